"""Optimistic concurrency: strong ETags from versions, preconditions, compare-and-set writes.

pre = Preconditions.from_headers(request.headers.items())
require_if_match(pre)                                   # 428 without If-Match
row = await compare_and_set(conn, table, where=[table.c.id == id], pre=pre, values={...})
response.headers["ETag"] = str(Version.of(row).etag)    # 412 raised when it was stale

`set_plan`/`delete_plan` are the same writes as plans, for a connection of your own
(`ustun.store.plans.run_sync` on a DB-API connection).
"""

from ustun.concurrency.cas import (
    compare_and_delete,
    compare_and_set,
    condition,
    delete_plan,
    insert_if_absent,
    set_plan,
    validators,
)
from ustun.concurrency.conditions import conditional_read, failed, require_if_match
from ustun.concurrency.versions import Version, new_generation
from ustun.errors import GuardRejected
from ustun.http.preconditions import Preconditions

__all__ = [
    "GuardRejected",
    "Preconditions",
    "Version",
    "compare_and_delete",
    "compare_and_set",
    "condition",
    "conditional_read",
    "delete_plan",
    "failed",
    "insert_if_absent",
    "new_generation",
    "require_if_match",
    "set_plan",
    "validators",
]
