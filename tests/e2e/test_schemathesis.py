"""Schemathesis's full run (every phase, stateful included, every check) against `/openapi.json`
of a real `ustun serve`, authenticated.

Nothing may be reported but the business refusals the document lists for the operation: a stale
`If-Match` (412; a malformed one is 400), a write without a precondition (428), an event cursor
that names no event of the account's feed (400), an id that is not there (404), a state or funds
conflict (409), and on writes a 422 (an `Idempotency-Key` that another generated request already
used, or a business rule no schema states, such as `from` ≠ `to`); and on portal sessions a 403,
since the run's key is not an operator's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from support import Served

pytestmark = pytest.mark.e2e

EXAMPLES = 8  # per operation and phase: the run stays well under a minute per database
STATEFUL_STEPS = 20
SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")

CONFIG = f"""
[generation]
max-examples = {EXAMPLES}
# Text fields refuse NUL by design (`ustun.service.plumbing.text`): a 422, not a finding.
allow-x00 = false

[phases.stateful]
max-steps = {STATEFUL_STEPS}

[checks]
enabled = true

[checks.positive_data_acceptance]
expected-statuses = ["2xx", "3xx", "401", "404", "409", "412", "428"]

[checks.negative_data_rejection]
expected-statuses = ["400", "401", "404", "405", "409", "412", "413", "415", "422", "428"]

[checks.missing_required_header]
# 409: its two workers may send one generated Idempotency-Key at the same moment, and the
# second is refused as `idempotency-in-progress` before its headers are looked at.
expected-statuses = ["400", "401", "409", "415", "422", "428"]

# The run's key is not an operator's: portal sessions are refused, 403 `forbidden` (documented).
[[operations]]
include-path-regex = '^/v1/portal-sessions'
checks.positive_data_acceptance.expected-statuses = [
    "2xx", "3xx", "401", "403", "404", "409", "412", "422", "428",
]
checks.negative_data_rejection.expected-statuses = [
    "400", "401", "403", "404", "405", "409", "412", "413", "415", "422", "428",
]

# Its coverage phase draws no value of If-Match's grammar (`"…"` or `*`), so the default
# "positive" case of a write that takes one sends its negative seed `0`: 400 precondition-invalid.
# (Listed first: of the entries that match an operation, the first to name a setting decides it.)
[[operations]]
include-path-regex = '^/v1/(documents|payments|webhook-endpoints)/[^/]+$'
include-method-regex = "^(PATCH|PUT|DELETE)$"
checks.positive_data_acceptance.expected-statuses = [
    "2xx", "3xx", "400", "401", "404", "409", "412", "422", "428",
]

# A cursor is opaque (`evc_` and an event of the account's own feed); one drawn from the pattern
# names no such event: 400 event-cursor-invalid.
[[operations]]
include-path-regex = '^/v1/events$'
include-method-regex = "^GET$"
checks.positive_data_acceptance.expected-statuses = [
    "2xx", "3xx", "400", "401", "404", "409", "412", "428",
]

[[operations]]
include-method-regex = "^(POST|PATCH|PUT)$"
checks.positive_data_acceptance.expected-statuses = [
    "2xx", "3xx", "401", "404", "409", "412", "422", "428",
]
"""


def test_the_full_run_finds_nothing_but_documented_refusals(served: Served, tmp_path: Path) -> None:
    config = tmp_path / "schemathesis.toml"
    config.write_text(CONFIG)
    run = subprocess.run(
        [
            str(SCHEMATHESIS),
            "--config-file",
            str(config),
            "run",
            f"{served.base_url}/openapi.json",
            "--header",
            f"Authorization: Bearer {served.key}",
            "--phases",
            "examples,coverage,fuzzing,stateful",
            "--checks",
            "all",
            "--seed",
            "15",
            "--workers",
            "2",
            "--report",
            "json",
            "--report-json-path",
            str(tmp_path / "report.json"),
        ],
        cwd=tmp_path,  # its cache (`.schemathesis/`) stays out of the repository
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["failures"] == [], run.stdout[-20000:]
    assert report["errors"] == [], run.stdout[-20000:]
    assert report["complete"], run.stdout[-5000:]
    assert {name: p["status"] for name, p in report["phases"].items()} == {
        "examples": "success",
        "coverage": "success",
        "fuzzing": "success",
        "stateful": "success",
    }, run.stdout[-5000:]
    assert run.returncode == 0, run.stdout[-20000:]
