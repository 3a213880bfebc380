"""The service's documents: OpenAPI, AsyncAPI, API reference pages, event catalogue."""
