"""Request bodies read by hand, for routes whose media type FastAPI does not check (PATCH)."""

from __future__ import annotations

import json
from typing import TypeVar

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

from ustun.http.errors import ProblemError

M = TypeVar("M", bound=BaseModel)


async def read_json(request: Request, model: type[M], media_types: tuple[str, ...]) -> M:
    """The body as `model`: 415 for another media type, 422 for bad JSON or a bad shape."""
    media_type = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media_type not in media_types:
        raise ProblemError(
            "unsupported-media-type",
            f"Send the body as {' or '.join(media_types)}, not {media_type or 'nothing'}.",
            headers={"accept-patch": ", ".join(media_types)},
        )
    try:
        data = json.loads(await request.body())
    except ValueError as exc:
        raise RequestValidationError(
            [{"loc": ("body",), "msg": f"Invalid JSON: {exc}", "type": "json_invalid"}]
        ) from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = [{**err, "loc": ("body", *err["loc"])} for err in exc.errors()]
        raise RequestValidationError(errors) from None
