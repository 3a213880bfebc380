"""`POST /v1/reports`: 202 and a job that builds a real report of the account's payments."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime

import httpx
import pytest
from pypdf import PdfReader
from sqlalchemy import insert

from job_kinds import eventually, running
from support import problem_of
from ustun import ids
from ustun.service.plumbing.accounts import account_for_key
from ustun.service.resources.reports import period_bounds
from ustun.service.resources.schema import payments
from ustun.store import Database

JUNE = [
    (datetime(2026, 6, 1, 0, 0, tzinfo=UTC), 1_000, "EUR", "succeeded"),
    (datetime(2026, 6, 15, 12, 30, tzinfo=UTC), 2_500, "EUR", "pending"),
    (datetime(2026, 6, 30, 23, 59, 59, tzinfo=UTC), 700, "USD", "failed"),
]
OUTSIDE = [
    (datetime(2026, 5, 31, 23, 59, 59, tzinfo=UTC), 9_999, "EUR", "succeeded"),
    (datetime(2026, 7, 1, 0, 0, tzinfo=UTC), 8_888, "USD", "succeeded"),
]


async def add_payments(
    db: Database, account_id: str, rows: list[tuple[datetime, int, str, str]]
) -> list[str]:
    """Insert payments through the table; return their ids in order."""
    made = []
    async with db.unit_of_work() as uow:
        for created_at, amount, currency, status in rows:
            payment_id = ids.new_id("pay")
            await uow.conn.execute(
                insert(payments).values(
                    id=payment_id,
                    account_id=account_id,
                    amount=amount,
                    currency=currency,
                    status=status,
                    version=1,
                    created_at=created_at,
                    updated_at=created_at,
                )
            )
            made.append(payment_id)
    return made


async def report(client: httpx.AsyncClient, period: str, fmt: str) -> httpx.Response:
    """Ask for a report, follow the job to `done`, download the result."""
    started = await client.post("/v1/reports", json={"period": period, "format": fmt})
    assert started.status_code == 202, started.text
    location = started.headers["location"]
    assert location == f"/v1/jobs/{started.json()['id']}"
    assert started.json()["status"] == "pending"
    assert int(started.headers["retry-after"]) >= 1

    async def done() -> dict[str, object] | None:
        job = (await client.get(location)).json()
        assert job["status"] in ("pending", "processing", "done"), job
        return job if job["status"] == "done" else None

    job = await eventually(done, what="the report job")
    assert job["progress"] == 100
    assert isinstance(job["result_url"], str)
    return await client.get(job["result_url"])


@pytest.fixture
async def account_id(db: Database, api_key: str) -> str:
    account = await account_for_key(db, api_key)
    assert account is not None
    return account.id


async def test_csv_report_lists_the_periods_payments_with_totals(
    client: httpx.AsyncClient, db: Database, account_id: str
) -> None:
    june = await add_payments(db, account_id, JUNE)
    await add_payments(db, account_id, OUTSIDE)
    async with running(db):
        got = await report(client, "2026-06", "csv")
    assert got.status_code == 200
    assert got.headers["content-type"] == "text/csv; charset=utf-8"
    assert 'filename="payments-2026-06.csv"' in got.headers["content-disposition"]
    rows = list(csv.DictReader(io.StringIO(got.text)))
    lines = [r for r in rows if r["id"] != "total"]
    assert [r["id"] for r in lines] == june
    assert [(int(r["amount"]), r["currency"], r["status"]) for r in lines] == [
        (a, c, s) for _, a, c, s in JUNE
    ]
    assert lines[0]["created_at"] == "2026-06-01T00:00:00.000Z"
    totals = {r["currency"]: int(r["amount"]) for r in rows if r["id"] == "total"}
    assert totals == {"EUR": 3_500, "USD": 700}


async def test_json_report_of_a_year(
    client: httpx.AsyncClient, db: Database, account_id: str
) -> None:
    await add_payments(db, account_id, JUNE + OUTSIDE)
    async with running(db):
        got = await report(client, "2026", "json")
    assert got.headers["content-type"] == "application/json"
    body = json.loads(got.content)
    assert body["period"] == "2026"
    assert len(body["payments"]) == 5
    assert body["totals"] == [
        {"currency": "EUR", "count": 3, "amount": 13_499},
        {"currency": "USD", "count": 2, "amount": 9_588},
    ]


async def test_pdf_report_is_a_valid_pdf(
    client: httpx.AsyncClient, db: Database, account_id: str
) -> None:
    june = await add_payments(db, account_id, JUNE)
    async with running(db):
        got = await report(client, "2026-06", "pdf")
    assert got.headers["content-type"] == "application/pdf"
    assert got.content.startswith(b"%PDF")
    text = "".join(page.extract_text() for page in PdfReader(io.BytesIO(got.content)).pages)
    assert "Payments report, 2026-06" in text
    assert all(payment_id in text for payment_id in june)
    assert "3500" in text


async def test_an_empty_period_still_makes_a_report(
    client: httpx.AsyncClient, db: Database
) -> None:
    async with running(db):
        got = await report(client, "1999", "csv")
    assert got.text.strip() == "id,created_at,amount,currency,status"


@pytest.mark.parametrize(
    "body",
    [
        {"period": "2026-13", "format": "csv"},
        {"period": "26", "format": "csv"},
        {"period": "2026-06", "format": "xlsx"},
        {"period": "2026-06"},
        {"period": "2026-06", "format": "csv", "extra": 1},
    ],
)
async def test_bad_requests_are_validation_problems(
    client: httpx.AsyncClient, body: dict[str, object]
) -> None:
    refused = await client.post("/v1/reports", json=body)
    assert refused.status_code == 422
    assert refused.headers["content-type"] == "application/problem+json"
    assert refused.json()["type"].endswith("/problems/validation-error")
    assert (await client.get("/v1/jobs")).json()["data"] == []


@pytest.mark.parametrize(
    "period", ["0000", "9999", "1969", "1969-12", "0000-01", "9999-12", "٢٠٢٦", "2026-1٢"]
)
async def test_a_period_outside_1970_to_9998_is_422_at_the_request(
    client: httpx.AsyncClient, period: str
) -> None:
    """Such periods used to start a job that then failed with a ValueError."""
    refused = await client.post("/v1/reports", json={"period": period, "format": "csv"})
    problem = problem_of(refused, 422, "validation-error")
    assert [e["field"] for e in problem["errors"]] == ["body.period"]
    assert (await client.get("/v1/jobs")).json()["data"] == []


@pytest.mark.parametrize("period", ["1970", "9998", "9998-12"])
async def test_the_first_and_last_years_make_reports(
    client: httpx.AsyncClient, db: Database, period: str
) -> None:
    async with running(db):
        got = await report(client, period, "json")
    assert json.loads(got.content)["period"] == period


@pytest.mark.parametrize(
    ("period", "start", "end"),
    [
        ("2026", datetime(2026, 1, 1, tzinfo=UTC), datetime(2027, 1, 1, tzinfo=UTC)),
        ("2026-02", datetime(2026, 2, 1, tzinfo=UTC), datetime(2026, 3, 1, tzinfo=UTC)),
        ("2026-12", datetime(2026, 12, 1, tzinfo=UTC), datetime(2027, 1, 1, tzinfo=UTC)),
    ],
)
def test_period_bounds(period: str, start: datetime, end: datetime) -> None:
    assert period_bounds(period) == (start, end)


async def test_the_same_idempotency_key_returns_the_same_job(client: httpx.AsyncClient) -> None:
    body = {"period": "2026-06", "format": "json"}
    key = {"idempotency-key": "report-2026-06-once"}
    first = await client.post("/v1/reports", json=body, headers=key)
    again = await client.post("/v1/reports", json=body, headers=key)
    assert (first.status_code, again.status_code) == (202, 202)
    assert again.json()["id"] == first.json()["id"]
    assert again.headers["location"] == first.headers["location"]
    assert again.headers["idempotent-replayed"] == "true"
    listed = (await client.get("/v1/jobs")).json()["data"]
    assert [job["id"] for job in listed] == [first.json()["id"]]

    other = await client.post("/v1/reports", json={**body, "format": "csv"}, headers=key)
    assert other.status_code == 422
    assert other.json()["type"].endswith("/problems/idempotency-key-reused")
    fresh = await client.post("/v1/reports", json=body, headers={"idempotency-key": "another"})
    assert fresh.json()["id"] != first.json()["id"]
