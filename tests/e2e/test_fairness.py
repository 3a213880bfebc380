"""A fair share of the server for every account (issue 27): while another account floods a real
`ustun serve` in each way `benchmarks/fairness.py` knows (PDF reports, report enqueues, streams,
list pages, contended transfers, 1 MiB documents, the event feed and its paging, cheap GETs),
account A's light requests keep p99 under 100 ms and none of them fails.

The benchmark is the one place the floods are written; this runs it, shorter, on each backend.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.alone]

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "fairness.py"
P99_MS = 100.0
SECONDS = 3


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_keeps_its_latency_and_loses_nothing_beside_every_flood(backend: str) -> None:
    ran = subprocess.run(
        [sys.executable, str(BENCHMARK), "--backend", backend, "--seconds", str(SECONDS), "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    phases = json.loads(ran.stdout.strip().splitlines()[-1])[backend]
    assert set(phases) >= {"nothing", "pdf", "gets", "transfers", "streams"}
    report = {name: (p["answered"], p["p99"], p["failures"]) for name, p in phases.items()}
    for name, (answered, p99, failures) in report.items():
        assert answered == 20 * SECONDS, (name, report)
        assert failures == [], (name, report)
        assert p99 < P99_MS, (name, report)
