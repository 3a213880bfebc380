"""Split a py-spy profile of a server into the layers of its request path (CPU per request).

`py-spy record --format raw` writes one line per distinct stack with its sample count. Each
busy sample goes to the layer of the innermost frame that belongs to one (a statement issued
by the idempotency store counts as SQLAlchemy and driver time, not as idempotency). Samples
of a thread waiting for work are dropped; the shares are then scaled to a measured CPU time
per request. py-spy samples wall time, so a frame that makes a syscall also carries the time
the process waits for the CPU after it (a driver's send wakes PostgreSQL, which may run first).

    .venv/bin/python benchmarks/budget.py PROFILE.txt MICROSECONDS_PER_REQUEST
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

# (layer, file-path fragments); the first layer that matches a frame's file wins.
LAYERS = (
    ("JSON encoding", ("json/",)),
    ("logging: JSON access line", ("logging/__init__", "ustun/logs.py")),
    ("metrics: Prometheus", ("prometheus_client", "ustun/service/plumbing/metrics.py")),
    ("driver: asyncpg", ("asyncpg/",)),
    ("driver: aiosqlite hand-offs + sqlite3", ("aiosqlite/", "sqlite3/")),
    (
        "SQLAlchemy: compile, cache key, execute, result, pool, greenlet",
        ("sqlalchemy/", "greenlet"),
    ),
    ("pydantic: body validation", ("pydantic",)),
    ("FastAPI dependency solving", ("fastapi/dependencies/",)),
    (
        "thread hops: run_in_threadpool",
        ("anyio/", "starlette/concurrency.py", "queue.py", "threading.py"),
    ),
    ("ids: new_id (os.urandom)", ("ustun/ids.py", "random.py")),
    (
        "idempotency: own code",
        ("ustun/idempotency/", "ustun/http/fingerprint", "ustun/http/idempotency_key"),
    ),
    ("unit of work, Database (ustun/store)", ("ustun/store/",)),
    (
        "handler, outbox, render, ETag",
        (
            "ustun/service/",
            "ustun/webhooks/",
            "ustun/concurrency/",
            "ustun/clock.py",
            "ustun/http/",
            "request_path_apps.py",  # the hand-written apps' own handlers
        ),
    ),
    ("FastAPI/Starlette: routing, middleware stack, responses", ("fastapi/", "starlette/")),
    ("uvicorn: HTTP protocol", ("uvicorn/",)),
    ("asyncio, contextlib", ("contextlib.py", "asyncio/", "uvloop")),
)
# ustun's own ASGI middlewares are in ustun/service/ too; their frames are named apart.
MIDDLEWARES = ("Plumbing", "Authenticator")
ASGI = "plumbing: one pass of request id, limits, auth, observation (own frames)"


def _idle(frames: list[str]) -> bool:
    """Whether the sample is a thread waiting: for work (a worker thread) or for I/O (the loop)."""
    leaf = frames[-1]
    if frames[0].startswith("Thread._bootstrap") and any(
        "Condition.wait" in f or "Queue.get" in f for f in frames
    ):
        return True
    # aiosqlite's worker blocks in SimpleQueue.get (C) on this line; the loop in epoll (C).
    return "aiosqlite/core.py:59)" in leaf or leaf.startswith("Runner.run") or not leaf.strip()


def _layer(frames: list[str]) -> str:
    for frame in reversed(frames):
        if frame.startswith(MIDDLEWARES):
            return ASGI
        path = frame.rsplit("(", 1)[-1]
        for layer, fragments in LAYERS:
            if any(fragment in path for fragment in fragments):
                return layer
    return "other"


def budget(profile: Path) -> list[tuple[str, float]]:
    """Each layer's share of the busy samples in a raw py-spy profile, largest first."""
    counts: Counter[str] = Counter()
    for line in profile.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        if stack and not _idle(frames):
            counts[_layer(frames)] += int(count)
    busy = sum(counts.values())
    return [(layer, n / busy) for layer, n in counts.most_common()]


def print_budget(profile: Path, per_request_us: float) -> None:
    print(f"{profile.name}: {per_request_us:.0f} µs of server CPU per request")
    for layer, share in budget(profile):
        print(f"  {share * per_request_us:6.0f} µs  {share:6.1%}  {layer}")


def print_budgets(profiles: list[tuple[str, Path, float]]) -> None:
    """Several servers' budgets side by side (name, profile, CPU µs per request), by layer."""
    columns = [(name, dict(budget(path)), us) for name, path, us in profiles]
    layers = sorted(
        {layer for _, found, _ in columns for layer in found},
        key=lambda layer: -max(found.get(layer, 0) * us for _, found, us in columns),
    )
    print("| layer | " + " | ".join(f"{name} µs/req" for name, _, _ in columns) + " |")
    print("|---|" + "---:|" * len(columns))
    for layer in layers:
        cells = " | ".join(f"{found.get(layer, 0) * us:.0f}" for _, found, us in columns)
        print(f"| {layer} | {cells} |")
    print("| **all** | " + " | ".join(f"**{us:.0f}**" for _, _, us in columns) + " |")


if __name__ == "__main__":
    print_budget(Path(sys.argv[1]), float(sys.argv[2]))
