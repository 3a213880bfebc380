"""The account of a tenant's name, made on first use, as a plan (`ustun.store.plans`).

The service names accounts when it issues API keys; a Django or Flask app names them with
whatever string it scopes tenants by. Concurrent first uses make one row: the insert does
nothing when another transaction made it first, and the read after it sees that row.
"""

from __future__ import annotations

from sqlalchemy import bindparam, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from ustun import clock, ids
from ustun.store.plans import Plan, count, rows
from ustun.store.statements import Statement
from ustun.store.tables import accounts

_ID = Statement(select(accounts.c.id).where(accounts.c.name == bindparam("name")))
_VALUES = {
    "id": bindparam("id"),
    "name": bindparam("name"),
    "created_at": bindparam("created_at", type_=accounts.c.created_at.type),
}
_INSERT = Statement(
    pg_insert(accounts).values(_VALUES).on_conflict_do_nothing(index_elements=["name"]),
    per_dialect={
        "sqlite": sqlite_insert(accounts)
        .values(_VALUES)
        .on_conflict_do_nothing(index_elements=["name"])
    },
)


def account_id(name: str) -> Plan[str]:
    """The id of the account named `name`, made if there is none."""
    found = yield rows(_ID, {"name": name})
    if not found:
        new = {"id": ids.new_id("acct"), "name": name, "created_at": clock.now()}
        yield count(_INSERT, new)
        found = yield rows(_ID, {"name": name})
    return str(found[0].id)
