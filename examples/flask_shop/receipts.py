"""The shop's job kinds, run by `flask --app shop ustun worker` (`USTUN_JOB_MODULES`)."""

from ustun.jobs import JobContext, Registry, Result

kinds = Registry()


@kinds.kind("shop.receipt")
async def receipt(ctx: JobContext) -> Result:
    """A plain-text receipt of the payment in the payload."""
    text = f"Receipt for payment {ctx.payload['payment']}\n"
    return Result(text.encode(), "text/plain", "receipt.txt")
