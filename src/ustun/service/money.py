"""Money fields shared by the resources: integer minor units and an ISO 4217 currency code."""

from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator, Field, StrictInt

# The largest integer every JSON parser (IEEE 754 doubles) reads exactly: 2**53 - 1.
MAX_AMOUNT = 9_007_199_254_740_991


def _integral(value: object) -> object:
    """`100.0` as `100`, as JSON Schema counts it an integer; only where a double is exact."""
    if isinstance(value, float) and value.is_integer() and abs(value) <= MAX_AMOUNT:
        return int(value)
    return value


# Put last in `Annotated[StrictInt, Field(...), INTEGRAL_FLOAT]`: the schema stays `integer` with
# its bounds, `100.0` passes, and `100.5`, `"100"` and `true` are still refused.
INTEGRAL_FLOAT = BeforeValidator(_integral)

Amount = Annotated[
    StrictInt,
    Field(gt=0, le=MAX_AMOUNT, description="Positive integer, in minor units."),
    INTEGRAL_FLOAT,
]
Balance = Annotated[
    StrictInt,
    Field(ge=0, le=MAX_AMOUNT, description="Integer in minor units, not negative."),
    INTEGRAL_FLOAT,
]
Currency = Annotated[
    str, Field(pattern=r"^[A-Z]{3}$", description="ISO 4217 code, three capital letters.")
]
