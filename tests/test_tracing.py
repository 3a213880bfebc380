"""`ustun.tracing`: which `OTEL_*` variables turn it on, and off costs no import."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ustun import tracing


@pytest.mark.parametrize(
    ("env", "on"),
    [
        ({}, False),
        ({"OTEL_SERVICE_NAME": "shop"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, True),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, True),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318", "OTEL_SDK_DISABLED": "true"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318", "OTEL_SDK_DISABLED": "false"}, True),
    ],
)
def test_the_standard_variables_decide(env: dict[str, str], on: bool) -> None:
    assert tracing._decide(env) is on


# Every module that calls a hook, on the paths a request, a job and a delivery take. (FastAPI
# imports the API itself when it is installed: the service's app is left out.)
OFF_PROGRAM = """
import sys
from ustun import tracing
import ustun.service.plumbing.observe, ustun.idempotency.middleware, ustun.store.uow
import ustun.jobs.runner, ustun.webhooks.sending.dispatcher, ustun.webhooks.brokers
assert not tracing.enabled()
parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
with tracing.span("x", parent=parent) as s:
    assert s is None
with tracing.server("GET", [(b"traceparent", parent.encode())]) as s:
    tracing.finish(s, method="GET", route="/", status=200)
headers = {}
tracing.inject(headers)
assert headers == {} and tracing.current_traceparent() is None
tracing.annotate({"a": 1})
print(sorted(m for m in sys.modules if m.startswith("opentelemetry")))
"""


def test_off_imports_nothing_of_opentelemetry() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", OFF_PROGRAM], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]"
