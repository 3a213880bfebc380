"""ustun for Litestar: `UstunPlugin(database)` (see `ustun.litestar.plugin`), and what handlers
write in their unit of work: `emit`, `enqueue` (answered by `accepted`), `register_endpoint`;
`represent` for a resource with its ETag (see docs/litestar.md)."""

from __future__ import annotations

from ustun.litestar.conditional import represent
from ustun.litestar.jobs import accepted
from ustun.litestar.outbox import emit, enqueue, register_endpoint
from ustun.litestar.plugin import OPT, UstunPlugin

__all__ = ["OPT", "UstunPlugin", "accepted", "emit", "enqueue", "register_endpoint", "represent"]
