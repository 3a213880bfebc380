"""The shop's job kinds, run by `litestar --app shop:app ustun worker` (`USTUN_JOB_MODULES`)."""

import csv
import io

from ustun.jobs import JobContext, Registry, Result

kinds = Registry()

# Rows written between two progress reports.
CHUNK = 250


# Named apart from ustun's own `report` kind, which the worker also runs (and which would
# replace an app's kind of the same name).
@kinds.kind("shop.report")
async def report(ctx: JobContext) -> Result:
    """A CSV of `rows` numbered rows with their squares, its progress reported as it goes."""
    rows = ctx.payload["rows"]
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["n", "square"])
    for start in range(0, rows, CHUNK):
        writer.writerows([n, n * n] for n in range(start + 1, min(rows, start + CHUNK) + 1))
        await ctx.progress(100 * min(rows, start + CHUNK) // rows)
    return Result(out.getvalue().encode(), "text/csv", "report.csv")
