"""The reference service: a FastAPI app that wires every pillar together."""

from ustun.service.app import create_app

__all__ = ["create_app"]
