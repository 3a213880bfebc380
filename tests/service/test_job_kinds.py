"""The worker's job kinds: the app's own (USTUN_JOB_MODULES), then the service's report."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ustun.service.resources import reports
from ustun.service.runtime.job_loops import job_kinds
from ustun.settings import Settings

APP_KINDS = """
from ustun.jobs import Registry

kinds = Registry()


@kinds.kind("report")
async def report(ctx):
    return None
"""


def test_an_apps_kind_named_report_wins_over_the_services(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "app_report_kinds.py").write_text(APP_KINDS)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        kinds = job_kinds(Settings(job_modules="app_report_kinds"))
        found = kinds.get(reports.KIND)
        assert found is not None
        assert found.handler is sys.modules["app_report_kinds"].report
    finally:
        sys.modules.pop("app_report_kinds", None)


def test_without_one_the_service_runs_its_report() -> None:
    found = job_kinds(Settings()).get(reports.KIND)
    assert found is not None
    assert found.handler is reports.build_report
