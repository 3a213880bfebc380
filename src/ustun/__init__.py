"""ustun: make HTTP APIs safe under retries, races and slow work."""

__version__ = "0.1.0"
