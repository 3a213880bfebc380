"""A client generated from `/openapi.json` by openapi-python-client, used against `ustun serve`.

It is generated at test time (never committed), without a single generator warning, and must
return typed models (not dicts or `Any`) for payments, documents and jobs, and read every
report format without parsing it as JSON.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import uuid
from datetime import datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

from support import Served, wait_for

pytestmark = pytest.mark.e2e

GENERATOR = Path(sys.executable).with_name("openapi-python-client")


@pytest.fixture(scope="module")
def generated(served: Served, tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    """The generated package, imported under a name of its own."""
    root = tmp_path_factory.mktemp("generated")
    (root / "openapi.json").write_bytes(httpx.get(f"{served.base_url}/openapi.json").content)
    (root / "config.json").write_text('{"post_hooks": []}')
    name = f"ustun_client_{uuid.uuid4().hex[:8]}"
    run = subprocess.run(
        [
            str(GENERATOR),
            "generate",
            "--path",
            str(root / "openapi.json"),
            "--meta",
            "none",
            "--output-path",
            str(root / name),
            "--config",
            str(root / "config.json"),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    # A duplicate or unparsable model is a warning, and the piece is left out of the client.
    assert "Warning" not in run.stdout + run.stderr, run.stdout + run.stderr
    sys.path.insert(0, str(root))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(root))


def _api(generated: ModuleType, module: str) -> Any:
    return importlib.import_module(f"{generated.__name__}.api.{module}")


def _models(generated: ModuleType) -> Any:
    return importlib.import_module(f"{generated.__name__}.models")


def _client(generated: ModuleType, served: Served) -> Any:
    return generated.AuthenticatedClient(base_url=served.base_url, token=served.key)


def test_payments_come_back_as_payment_models(generated: ModuleType, served: Served) -> None:
    models = _models(generated)
    create = _api(generated, "payments.create_payment_v1_payments_post")
    read = _api(generated, "payments.get_payment_v1_payments_payment_id_get")
    settle = _api(generated, "payments.update_payment_v1_payments_payment_id_patch")
    with _client(generated, served) as client:
        body = models.PaymentCreate(amount=1250, currency="EUR", description="typed")
        created = create.sync_detailed(client=client, body=body, idempotency_key=str(uuid.uuid4()))
        assert created.status_code == 201
        payment = created.parsed
        assert isinstance(payment, models.Payment)
        assert payment.status == models.PaymentStatus.PENDING
        assert isinstance(payment.created_at, datetime)
        assert created.headers["location"] == f"/v1/payments/{payment.id}"

        again = read.sync(payment.id, client=client)
        assert isinstance(again, models.Payment)
        assert again.amount == 1250

        settled = settle.sync(
            payment.id,
            client=client,
            body=models.PaymentUpdate(status=models.PaymentUpdateStatus.SUCCEEDED),
            if_match=created.headers["etag"],
        )
        assert isinstance(settled, models.Payment)
        assert settled.status == models.PaymentStatus.SUCCEEDED

        listed = _api(generated, "payments.list_payments_v1_payments_get").sync(client=client)
        assert isinstance(listed, models.PaymentList)
        assert all(isinstance(p, models.Payment) for p in listed.data)


def test_documents_come_back_as_document_models(generated: ModuleType, served: Served) -> None:
    models = _models(generated)
    put = _api(generated, "documents.put_document_v1_documents_document_id_put")
    read = _api(generated, "documents.get_document_v1_documents_document_id_get")
    with _client(generated, served) as client:
        document_id = f"typed-{uuid.uuid4().hex[:8]}"
        created = put.sync_detailed(
            document_id,
            client=client,
            body=models.DocumentIn(title="Typed", body="v1"),
            if_none_match="*",
        )
        assert created.status_code == 201
        assert isinstance(created.parsed, models.Document)
        assert created.parsed.version == 1

        document = read.sync(document_id, client=client)
        assert isinstance(document, models.Document)
        assert document.title == "Typed"

        replaced = put.sync(
            document_id,
            client=client,
            body=models.DocumentIn(title="Typed", body="v2"),
            if_match=created.headers["etag"],
        )
        assert isinstance(replaced, models.Document)
        assert replaced.body == "v2"


@pytest.mark.parametrize("fmt", ["csv", "json", "pdf"])
def test_jobs_come_back_as_job_models_and_results_as_files(
    generated: ModuleType, served: Served, fmt: str
) -> None:
    models = _models(generated)
    start = _api(generated, "reports.create_report_v1_reports_post")
    poll = _api(generated, "jobs.get_job_v1_jobs_job_id_get")
    result = _api(generated, "jobs.job_result_v1_jobs_job_id_result_get")
    events = _api(generated, "jobs.job_events_v1_jobs_job_id_events_get")
    with _client(generated, served) as client:
        body = models.ReportRequest(period="2026", format_=models.ReportRequestFormat(fmt))
        accepted = start.sync_detailed(client=client, body=body)
        assert accepted.status_code == 202
        job = accepted.parsed
        assert isinstance(job, models.Job)
        assert job.status in (models.JobStatus.PENDING, models.JobStatus.PROCESSING)

        def finished() -> Any:
            current = poll.sync(job.id, client=client)
            assert isinstance(current, models.Job)
            return current if current.status == models.JobStatus.DONE else None

        done = wait_for(finished, timeout=30, what=f"the {fmt} report job to finish")
        assert done.result_url == f"/v1/jobs/{job.id}/result"

        file = result.sync_detailed(job.id, client=client)
        assert file.status_code == 200
        assert file.content.startswith({"csv": b"id,", "json": b"{", "pdf": b"%PDF"}[fmt])

        stream = events.sync_detailed(job.id, client=client)
        assert stream.status_code in (200, 204)
        if stream.status_code == 200:
            assert "event: status" in stream.parsed
