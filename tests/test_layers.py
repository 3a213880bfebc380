"""The package's floors, read from its imports: one table says which module may import which.

Each rule is parametrized by module, so that a failure names the module:
- every module sits on a floor of `FLOORS`, and imports only its own group and the groups of
  lower floors: never up, and never across to another group of its own floor (one pillar never
  imports another) but for the few pairs of `ACROSS`;
- what every layer imports (`errors`, `defaults`) and what `pip install ustun` ships (`http`,
  `client`: httpx only) import no more than `ONLY` says, third-party packages included;
- a pillar's tables are imported only inside the pillar (the service and the dashboard read
  through its port);
- drivers and dialect checks only in `STORAGE`; the jobs pillar's loops hold no SQL;
- no import circle when the modules load.

An import under `if TYPE_CHECKING:` counts too (it is a dependency, even if it never runs),
but for the few of `ANNOTATIONS`.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import ustun

ROOT = "ustun"
PILLARS = ("ustun.idempotency", "ustun.concurrency", "ustun.jobs", "ustun.webhooks", "ustun.client")

# Bottom up. A group is a module or a package with all below it; a module belongs to the longest
# group that holds it (the package `ustun` itself holds only its `__version__`).
FLOORS: tuple[tuple[str, ...], ...] = (
    # Importable from anywhere: they import nothing of ustun (see `ONLY`).
    (ROOT, "ustun.errors", "ustun.defaults"),
    # Sans-I/O protocol: entity tags, preconditions, keys, problem details, signatures.
    ("ustun.http",),
    # One of each, shared by all: the clock, ids, logs, instrumentation hooks, tracing, problem
    # handlers, the worker's periodic loop, the route a request hits.
    (
        "ustun.clock",
        "ustun.ids",
        "ustun.logs",
        "ustun.instrumentation",
        "ustun.tracing",
        "ustun.problems",
        "ustun.loops",
        "ustun.route_table",
    ),
    ("ustun.store",),
    PILLARS,
    # The service's and the CLI's settings (the pillars take their values as arguments).
    ("ustun.settings",),
    # What is derived from the settings' secret key: the secret box, the fingerprint keys.
    ("ustun.keys",),
    # Consumer portal sessions: the links an app hands to one account's people.
    ("ustun.portal",),
    # Inside the reference service, bottom up.
    ("ustun.service.plumbing",),
    ("ustun.service.resources", "ustun.service.operations"),
    ("ustun.service.specs", "ustun.service.runtime", "ustun.service.dashboard"),
    ("ustun.service",),
    # The checks `ustun serve` runs before it starts, then the command line.
    ("ustun.preflight",),
    ("ustun.cli",),
    # The pillars in a host framework's own transactions; their commands are the CLI's.
    ("ustun.django", "ustun.flask", "ustun.litestar", "ustun.wsgi"),
)
FLOOR = {group: level for level, groups in enumerate(FLOORS) for group in groups}

# (importing module or package, imported group): the only imports across one floor.
ACROSS = {
    # A receiver reads its sender's event feed as any client does, through the public client
    # (which brings httpx and nothing of the server): the receiving side may use it, the
    # sending side may not.
    ("ustun.webhooks.receiving", "ustun.client"),
    # An endpoint's PATCH and DELETE are the concurrency pillar's compare-and-set (If-Match,
    # 412, the version bump): written once, there.
    ("ustun.webhooks.adapters", "ustun.concurrency"),
}

# Under `if TYPE_CHECKING:` only, (module, imported module): named for the type checker.
ANNOTATIONS = {
    # `ClientError.problem` is the server's problem details; importing errors runs nothing of http.
    ("ustun.errors", "ustun.http.problem"),
}

STDLIB = tuple(sorted(sys.stdlib_module_names))
# The only imports of these groups (a module or a package prefix each).
ONLY: dict[str, tuple[str, ...]] = {
    # Plain constants: nothing at all, so that any layer (and a settings file) may import them.
    "ustun.defaults": ("__future__",),
    "ustun.errors": STDLIB,
    # ed25519 (`v1a`) signing is arithmetic, not I/O: `cryptography`, imported on first use.
    "ustun.http": (*STDLIB, "ustun.errors", "ustun.defaults", "ustun.http", "cryptography"),
    "ustun.client": (
        *STDLIB,
        "ustun.errors",
        "ustun.defaults",
        "ustun.http",
        "ustun.client",
        "httpx",
    ),
}

DRIVERS = ("asyncpg", "aiosqlite", "sqlite3", "psycopg", "sqlalchemy.dialects", "redis")
DIALECT_CHECKS = {"is_sqlite", "dialect", "driver"}
# Where a database driver and the dialect may show: the store, and each pillar's adapters.
STORAGE = (
    "ustun.store",
    "ustun.jobs.adapters",
    "ustun.webhooks.adapters",
    "ustun.idempotency.sql",
    "ustun.idempotency.redis_store",
)
# The jobs pillar's loops and port: they run jobs through the store and hold no SQL.
NO_SQL = tuple(
    f"ustun.jobs.{name}"
    for name in ("queue", "runner", "sweeper", "context", "registry", "wakeup", "store")
)

PACKAGE = Path(ustun.__file__).parent


def _name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


SOURCES = {path: _name(path) for path in PACKAGE.rglob("*.py") if "migrations" not in path.parts}
MODULES = {name: ast.parse(path.read_text()) for path, name in SOURCES.items()}
PACKAGES = {name for path, name in SOURCES.items() if path.name == "__init__.py"}


@dataclass(frozen=True)
class Import:
    """One module an import statement names, and when it runs."""

    target: str
    loads: bool  # runs when the module is imported (not inside a function)
    annotation: bool  # under `if TYPE_CHECKING:`


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> Iterator[str]:
    """The modules an import names: `from package import submodule` is the submodule."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    base = node.module or ""
    if node.level:
        package = module if module in PACKAGES else module.rpartition(".")[0]
        parts = package.split(".")
        base = ".".join([*parts[: len(parts) - node.level + 1], *filter(None, [base])])
    submodules = [f"{base}.{alias.name}" for alias in node.names]
    yield from (name for name in submodules if name in MODULES)
    if any(name not in MODULES for name in submodules):
        yield base


def _imports(module: str) -> list[Import]:
    found: list[Import] = []

    def visit(nodes: list[ast.stmt], loads: bool, annotation: bool) -> None:
        for node in nodes:
            if isinstance(node, ast.Import | ast.ImportFrom):
                found.extend(Import(t, loads, annotation) for t in _targets(module, node))
            elif isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING"):
                visit(node.body, False, True)
                visit(node.orelse, loads, annotation)
            else:
                inside = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
                for child in ast.iter_child_nodes(node):
                    if isinstance(child, ast.stmt):
                        visit([child], loads and not inside, annotation)

    visit(MODULES[module].body, True, False)
    return found


IMPORTS = {name: _imports(name) for name in MODULES}


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(f"{prefix}.")


def _group(name: str) -> str | None:
    """The longest group of `FLOORS` that holds `name`."""
    holding = [g for g in FLOOR if name == g or (g != ROOT and _within(name, g))]
    return max(holding, key=len, default=None)


def _dependencies(name: str) -> set[str]:
    """Everything `name` imports, but the type-checking imports `ANNOTATIONS` allows."""
    return {
        i.target for i in IMPORTS[name] if not (i.annotation and (name, i.target) in ANNOTATIONS)
    }


def test_the_table_names_only_modules_that_exist() -> None:
    named = {
        *FLOOR,
        *STORAGE,
        *NO_SQL,
        *(importer for importer, _ in ACROSS | ANNOTATIONS),
        *(imported for _, imported in ACROSS | ANNOTATIONS),
    }
    assert sorted(named - MODULES.keys()) == []
    assert {t for _, t in ACROSS} <= FLOOR.keys()


@pytest.mark.parametrize(("module", "imported"), sorted(ANNOTATIONS))
def test_an_allowed_annotation_is_one(module: str, imported: str) -> None:
    assert Import(imported, loads=False, annotation=True) in IMPORTS[module], (
        f"{module} no longer imports {imported} for annotations: strike it from ANNOTATIONS"
    )


@pytest.mark.parametrize(("importer", "imported"), sorted(ACROSS))
def test_an_allowed_crossing_is_used(importer: str, imported: str) -> None:
    assert any(
        _group(target) == imported
        for name in MODULES
        if _within(name, importer)
        for target in _dependencies(name)
    ), f"no module of {importer} imports {imported} now: strike it from ACROSS"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_dependencies_point_down(name: str) -> None:
    group = _group(name)
    assert group is not None, f"{name} is on no floor: add it (or its package) to FLOORS"
    wrong = []
    for target in sorted(_dependencies(name) & MODULES.keys()):
        other = _group(target)
        assert other is not None
        across = any(_within(name, i) and other == t for i, t in ACROSS)
        if other != group and FLOOR[other] >= FLOOR[group] and not across:
            wrong.append(f"{target} ({'up' if FLOOR[other] > FLOOR[group] else 'across'})")
    assert wrong == [], f"{name} imports {', '.join(wrong)}"


@pytest.mark.parametrize("name", sorted(n for n in MODULES if any(_within(n, g) for g in ONLY)))
def test_a_module_imports_only_what_its_group_may(name: str) -> None:
    allowed = next(ONLY[g] for g in ONLY if _within(name, g))
    extra = sorted(t for t in _dependencies(name) if not any(_within(t, a) for a in allowed))
    assert extra == [], f"{name} imports {extra}"


# Each pillar's table module, and the pillar it belongs to.
TABLES = {f"{pillar}.tables": pillar for pillar in PILLARS if f"{pillar}.tables" in MODULES}


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_pillar_table_is_imported_outside_its_pillar(name: str) -> None:
    tables = sorted(t for t in _dependencies(name) if t in TABLES and not _within(name, TABLES[t]))
    assert tables == [], f"{name} imports {tables}: read the rows through the port"


@pytest.mark.parametrize("name", sorted(n for n in MODULES if not n.startswith(STORAGE)))
def test_only_the_store_and_the_adapters_touch_a_driver_or_the_dialect(name: str) -> None:
    assert not [m for m in _dependencies(name) if m.startswith(DRIVERS)], f"{name} imports a driver"
    attributes = {node.attr for node in ast.walk(MODULES[name]) if isinstance(node, ast.Attribute)}
    assert not attributes & DIALECT_CHECKS, f"{name} checks the dialect"


@pytest.mark.parametrize("name", NO_SQL)
def test_the_job_loops_hold_no_sql(name: str) -> None:
    assert not [m for m in _dependencies(name) if _within(m, "sqlalchemy")]


def test_no_import_circle() -> None:
    edges = {
        name: {
            i.target
            for i in IMPORTS[name]
            # A package's own __init__ runs before its modules: importing it is not a circle.
            if i.loads
            and i.target in MODULES
            and not _within(name, i.target)
            and not _within(i.target, name)
        }
        for name in MODULES
    }

    def circle_from(start: str) -> list[str] | None:
        stack: list[tuple[str, list[str]]] = [(start, [start])]
        seen: set[str] = set()
        while stack:
            node, path = stack.pop()
            for nxt in edges[node]:
                if nxt == start:
                    return [*path, start]
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*path, nxt]))
        return None

    circles = [c for c in map(circle_from, sorted(edges)) if c is not None]
    assert circles == [], " -> ".join(circles[0])
