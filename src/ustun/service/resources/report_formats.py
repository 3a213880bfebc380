"""Rendering a payments report as CSV, JSON or PDF (fpdf2): rows plus totals per currency.

The rendering runs in the job runner's worker process (`JobContext.offload`): a PDF takes
1.5 to 2.5 ms of CPU per payment, which on the event loop stopped every request of the server.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime

from fpdf import FPDF

from ustun.clock import rfc3339

COLUMNS = ("id", "created_at", "amount", "currency", "status")


@dataclass(slots=True)
class Report:
    """A period's payments, column by column, and their totals per currency (all statuses,
    minor units).

    Columns of strings and integers because the report is pickled to the process that renders
    it: that is a few milliseconds of the event loop for 20,000 payments, where a list of rows
    holding `datetime`s took tens of milliseconds in one go.
    """

    period: str
    generated_at: datetime
    ids: list[str] = field(default_factory=list)
    created_at: list[str] = field(default_factory=list)  # RFC 3339
    amounts: list[int] = field(default_factory=list)
    currencies: list[str] = field(default_factory=list)
    statuses: list[str] = field(default_factory=list)

    def add(self, id: str, created_at: datetime, amount: int, currency: str, status: str) -> None:
        """Append one payment."""
        self.ids.append(id)
        self.created_at.append(rfc3339(created_at))
        self.amounts.append(amount)
        self.currencies.append(currency)
        self.statuses.append(status)

    def rows(self) -> Iterator[tuple[str, str, int, str, str]]:
        """Each payment's `COLUMNS`, in order."""
        columns = (self.ids, self.created_at, self.amounts, self.currencies, self.statuses)
        return zip(*columns, strict=True)

    def totals(self) -> list[tuple[str, int, int]]:
        """`(currency, number of payments, sum of amounts)`, by currency."""
        sums: dict[str, tuple[int, int]] = {}
        for currency, amount in zip(self.currencies, self.amounts, strict=True):
            count, total = sums.get(currency, (0, 0))
            sums[currency] = (count + 1, total + amount)
        return [(cur, count, total) for cur, (count, total) in sorted(sums.items())]


def to_csv(report: Report) -> bytes:
    """One row per payment, then one `total` row per currency (id `total`, its sum as amount)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(COLUMNS)
    writer.writerows(report.rows())
    writer.writerows(("total", "", str(amount), cur, "") for cur, _, amount in report.totals())
    return out.getvalue().encode()


def to_json(report: Report) -> bytes:
    """`{"period", "generated_at", "payments": [...], "totals": [{currency, count, amount}]}`."""
    body = {
        "period": report.period,
        "generated_at": rfc3339(report.generated_at),
        "payments": [
            {"id": id, "created_at": at, "amount": amount, "currency": cur, "status": status}
            for id, at, amount, cur, status in report.rows()
        ],
        "totals": [
            {"currency": cur, "count": count, "amount": amount}
            for cur, count, amount in report.totals()
        ],
    }
    return json.dumps(body, separators=(",", ":")).encode()


def to_pdf(report: Report) -> bytes:
    """A printable table of the payments and the totals."""
    pdf = FPDF(orientation="portrait", format="A4")
    pdf.set_title(f"Payments {report.period}")
    pdf.add_page()
    pdf.set_font("Helvetica", style="B", size=14)
    pdf.cell(text=f"Payments report, {report.period}", new_x="LMARGIN", new_y="NEXT")
    pdf.set_font("Helvetica", size=8)
    pdf.cell(
        text=f"Generated {rfc3339(report.generated_at)}; amounts in minor units.",
        new_x="LMARGIN",
        new_y="NEXT",
    )
    pdf.ln(4)
    with pdf.table(col_widths=(60, 45, 30, 20, 25)) as table:
        table.row(COLUMNS)
        for id, at, amount, cur, status in report.rows():
            table.row((id, at, str(amount), cur, status))
    pdf.ln(4)
    with pdf.table(col_widths=(30, 30, 40)) as table:
        table.row(("currency", "payments", "total"))
        for cur, count, amount in report.totals():
            table.row((cur, str(count), str(amount)))
    return bytes(pdf.output())


@dataclass(frozen=True, slots=True)
class Format:
    """How to render and serve one report format."""

    media_type: str
    render: Callable[[Report], bytes]


FORMATS: dict[str, Format] = {
    "csv": Format("text/csv; charset=utf-8", to_csv),
    "json": Format("application/json", to_json),
    "pdf": Format("application/pdf", to_pdf),
}
