"""The reference service: a FastAPI app that wires every pillar together.

`create_app` is imported on first use, so a module of the service (an account helper the CLI
needs, say) can be imported without building the whole app's import tree.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ustun.service.app import create_app

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from ustun.service.app import create_app

        return create_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
