"""Rendering a payments report as CSV, JSON or PDF (fpdf2): rows plus totals per currency."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from fpdf import FPDF

from ustun.clock import rfc3339

COLUMNS = ("id", "created_at", "amount", "currency", "status")


@dataclass(frozen=True, slots=True)
class Line:
    """One payment in a report."""

    id: str
    created_at: datetime
    amount: int
    currency: str
    status: str


@dataclass
class Report:
    """A period's payments and their totals per currency (all statuses, minor units)."""

    period: str
    generated_at: datetime
    lines: list[Line] = field(default_factory=list)

    def totals(self) -> list[tuple[str, int, int]]:
        """`(currency, number of payments, sum of amounts)`, by currency."""
        sums: dict[str, tuple[int, int]] = {}
        for line in self.lines:
            count, amount = sums.get(line.currency, (0, 0))
            sums[line.currency] = (count + 1, amount + line.amount)
        return [(cur, count, amount) for cur, (count, amount) in sorted(sums.items())]


def _cells(line: Line) -> Sequence[str]:
    return (line.id, rfc3339(line.created_at), str(line.amount), line.currency, line.status)


def to_csv(report: Report) -> bytes:
    """One row per payment, then one `total` row per currency (id `total`, its sum as amount)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(COLUMNS)
    writer.writerows(_cells(line) for line in report.lines)
    writer.writerows(("total", "", str(amount), cur, "") for cur, _, amount in report.totals())
    return out.getvalue().encode()


def to_json(report: Report) -> bytes:
    """`{"period", "generated_at", "payments": [...], "totals": [{currency, count, amount}]}`."""
    body = {
        "period": report.period,
        "generated_at": rfc3339(report.generated_at),
        "payments": [
            {
                "id": line.id,
                "created_at": rfc3339(line.created_at),
                "amount": line.amount,
                "currency": line.currency,
                "status": line.status,
            }
            for line in report.lines
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
        for line in report.lines:
            table.row(_cells(line))
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
