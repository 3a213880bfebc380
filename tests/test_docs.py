"""docs/ against the code: every problem slug, setting, CLI command and option, and /v1 route
is documented, the problem catalogue word for word, every link between the pages resolves, and
every ```python block runs as a complete program (conventions: tests/doc_programs.py).

`USTUN_UPDATE_DOCS=1` rewrites the generated catalogue in docs/problems.md.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from fastapi.routing import iter_route_contexts
from typer.core import TyperGroup

from doc_programs import SERVE, Block, blocks, run_program
from support import FIRST_KEY, Served, Server, wait_for
from ustun.cli import app as cli_app
from ustun.http.problem import CATALOGUE
from ustun.service import create_app
from ustun.settings import Settings

ROOT = Path(__file__).parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))
BEGIN = "<!-- BEGIN CATALOGUE: generated from ustun.http.problem.CATALOGUE -->\n"
END = "<!-- END CATALOGUE -->\n"


def text(name: str) -> str:
    return (DOCS / name).read_text()


def catalogue_markdown() -> str:
    """The problem catalogue as docs/problems.md shows it: a table, then a section per slug."""
    rows = "".join(
        f"| {p.status} | [`{p.slug}`](#{p.slug}) | {p.title} |\n" for p in CATALOGUE.values()
    )
    sections = "".join(
        f"\n### `{p.slug}`\n\n**{p.status}** {p.title}\n\n{p.description}\n"
        for p in CATALOGUE.values()
    )
    return f"| status | slug | title |\n|---|---|---|\n{rows}{sections}"


def test_problems_md_carries_the_catalogue_word_for_word() -> None:
    page = text("problems.md")
    head, rest = page.split(BEGIN)
    generated, tail = rest.split(END)
    if os.environ.get("USTUN_UPDATE_DOCS"):
        (DOCS / "problems.md").write_text(f"{head}{BEGIN}{catalogue_markdown()}{END}{tail}")
    else:
        assert generated == catalogue_markdown(), (
            "docs/problems.md differs from CATALOGUE: USTUN_UPDATE_DOCS=1 pytest tests/test_docs.py"
        )


@pytest.mark.parametrize("slug", sorted(CATALOGUE))
def test_every_problem_slug_has_its_section(slug: str) -> None:
    assert f"### `{slug}`" in text("problems.md")


def _default(value: object) -> str | None:
    """A default as the settings table writes it; None when the table describes it in words."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


@pytest.mark.parametrize("field", sorted(Settings.model_fields))
def test_every_setting_is_documented_with_its_default(field: str) -> None:
    variable = f"USTUN_{field.upper()}"
    rows = [
        line for line in text("settings.md").splitlines() if line.startswith(f"| `{variable}` |")
    ]
    assert len(rows) == 1, f"{variable} needs one row in docs/settings.md"
    default = _default(Settings.model_fields[field].default)
    if default is not None:
        assert rows[0].split(" | ")[1] == f"`{default}`", rows[0]


def _commands(group: TyperGroup, prefix: str = "ustun") -> dict[str, Any]:
    """Every leaf command of the Typer app by its full name (typer carries its own click)."""
    found: dict[str, Any] = {}
    for name, command in group.commands.items():
        if isinstance(command, TyperGroup):
            found |= _commands(command, f"{prefix} {name}")
        else:
            found[f"{prefix} {name}"] = command
    return found


COMMANDS = _commands(typer.main.get_group(cli_app))


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_cli_command_and_option_is_documented(name: str) -> None:
    page = text("cli.md")
    heading = f"## `{name}`\n"
    assert heading in page, f"docs/cli.md needs a section {heading!r}"
    section = page.split(heading)[1].split("\n## ")[0]
    for param in COMMANDS[name].params:
        if param.param_type_name == "option" and param.name != "help":
            assert any(f"`{opt}" in section for opt in param.opts), (name, param.opts)


def v1_routes() -> list[str]:
    app = create_app(Settings(database_url="sqlite:///:memory:"))
    return sorted(
        f"{method} {context.path}"
        for context in iter_route_contexts(app.routes)
        if context.path.startswith("/v1/")
        for method in context.methods or ()
        if method != "HEAD"
    )


@pytest.mark.parametrize("route", v1_routes())
def test_every_v1_route_is_documented(route: str) -> None:
    assert f"`{route}`" in text("http-api.md")


def _anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    headings = re.findall(r"^#+ (.+)$", page.read_text(), re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


def test_every_link_between_the_pages_resolves() -> None:
    for page in [ROOT / "README.md", *PAGES]:
        for target, anchor in re.findall(
            r"\]\(((?:docs/)?[\w-]*\.md)?#?([\w-]*)\)", page.read_text()
        ):
            linked = (page.parent / target) if target else page
            assert linked.exists(), (page.name, target)
            if anchor:
                assert anchor in _anchors(linked), (page.name, target, anchor)


def test_the_readme_points_into_the_repository() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "../shared" not in readme
    assert "(docs/README.md)" in readme
    index = text("README.md")
    for page in PAGES:
        if page.name != "README.md":
            assert f"({page.name})" in index, page.name


PROGRAMS = [b for page in PAGES for b in blocks(page) if b.lang == "python"]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A fresh `ustun serve` on SQLite, as the blocks marked `<!-- run: serve -->` expect."""
    tmp = tmp_path_factory.mktemp("docs-serve")
    server = Server(
        f"sqlite:///{tmp / 'ustun.db'}", tmp / "serve.log", USTUN_WEBHOOK_ALLOW_PRIVATE="1"
    ).start()
    try:
        key = wait_for(lambda: FIRST_KEY.search(server.output()), what="the first API key")
        yield Served(server.base_url, key.group())
    finally:
        server.stop()


@pytest.mark.e2e
@pytest.mark.parametrize("block", PROGRAMS, ids=[f"{b.path.stem}-L{b.line}" for b in PROGRAMS])
def test_every_python_block_runs(
    block: Block, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    env = dict(os.environ)
    if block.before == SERVE:
        served: Served = request.getfixturevalue("served")
        env |= {"USTUN_URL": served.base_url, "USTUN_KEY": served.key}
    else:
        assert "<!-- run:" not in block.before, f"{block.path.name} line {block.line}: {SERVE}?"
    run_program(block, block.code, tmp_path, env)
