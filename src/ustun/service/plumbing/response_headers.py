"""Fixed headers for the answers under a path prefix, added by the plumbing (`pipeline`).

The API's cache policy (RFC 9111 §5.2.2) is one use: `private, no-cache` lets a browser or
client cache keep an answer but makes it revalidate (the ETag / 304 flow) before every reuse,
so it never shows a stale payment status, and shared caches must not store it at all, as
every answer is one account's. `no-store` would forbid the revalidation as well; a response
that sets its own `Cache-Control` (e.g. `no-store` on one that shows a secret) keeps it.
"""

from __future__ import annotations

from collections.abc import Mapping

API_CACHE_CONTROL = "private, no-cache"


class PrefixHeaders:
    """Fixed headers for every answer whose path starts with `prefix` (errors and redirects
    too): `overwrite` replaces a header of the name the answer set itself, else it is kept."""

    __slots__ = ("_names", "_own", "overwrite", "prefix")

    def __init__(self, prefix: str, headers: Mapping[str, str], *, overwrite: bool) -> None:
        self.prefix = prefix
        self.overwrite = overwrite
        self._own = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
        self._names = {name for name, _ in self._own}

    def apply(self, headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
        """`headers` (raw ASGI) with these added."""
        if self.overwrite:
            return [h for h in headers if h[0].lower() not in self._names] + self._own
        present = {name.lower() for name, _ in headers}
        return headers + [h for h in self._own if h[0] not in present]


API_HEADERS = PrefixHeaders("/v1/", {"cache-control": API_CACHE_CONTROL}, overwrite=False)
