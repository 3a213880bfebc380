"""Money fields shared by the resources: integer minor units and an ISO 4217 currency code."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StrictInt

from ustun.service.plumbing.bodies import INTEGRAL_FLOAT

# The largest integer every JSON parser (IEEE 754 doubles) reads exactly: 2**53 - 1.
MAX_AMOUNT = 9_007_199_254_740_991


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
