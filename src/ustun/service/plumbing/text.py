"""Text fields every backend can store, checked at the edge so bad input is a 422, not a 500.

PostgreSQL's `text` refuses the NUL character, and no database can store a lone UTF-16
surrogate (JSON allows `"\\udc00"`); both used to reach the database and fail there.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator


def storable(value: str) -> str:
    """`value` if it is valid Unicode without NUL; else a `ValueError` saying what is wrong."""
    if "\x00" in value:
        raise ValueError("must not contain the NUL character (U+0000)")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("must be valid Unicode text (no lone surrogates)") from None
    return value


Text = Annotated[str, AfterValidator(storable)]
