"""A client for ustun-style APIs: httpx, plus retries that are safe by construction.

```python
from ustun.client import Client

with Client(base_url="http://127.0.0.1:8000", api_key=KEY) as api:
    payment = api.post("/v1/payments", json={"amount": 1000, "currency": "EUR"}).json()
    doc = api.update("/v1/documents/readme", lambda d: {"title": "New", "body": d["body"]})
    job = api.wait(api.post("/v1/reports", json={"period": "2026", "format": "csv"}))
```

Imports only `ustun.errors`, `ustun.http` and httpx, so `pip install ustun` (no server extra)
is enough.
"""

from ustun.client._client import AsyncClient, Client
from ustun.client._flows import FINAL_STATUSES, UPDATE_ATTEMPTS, WAIT_TIMEOUT, api_error
from ustun.errors import (
    ApiError,
    ClientError,
    RetriesExhausted,
    UpdateConflict,
    UstunError,
    WaitTimeout,
)
from ustun.http.backoff import Backoff
from ustun.http.problem import Problem

__all__ = [
    "FINAL_STATUSES",
    "UPDATE_ATTEMPTS",
    "WAIT_TIMEOUT",
    "ApiError",
    "AsyncClient",
    "Backoff",
    "Client",
    "ClientError",
    "Problem",
    "RetriesExhausted",
    "UpdateConflict",
    "UstunError",
    "WaitTimeout",
    "api_error",
]
