"""ustun for Litestar: `UstunPlugin(database)` (see `ustun.litestar.plugin`)."""

from __future__ import annotations

from ustun.litestar.plugin import OPT, UstunPlugin

__all__ = ["OPT", "UstunPlugin"]
