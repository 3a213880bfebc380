"""How caches may reuse API responses (RFC 9111 §5.2.2); `RequestMiddleware` says so.

`private, no-cache`: a browser or client cache may keep an answer but must revalidate it (the
ETag / 304 flow) before every reuse, so it never shows a stale payment status; shared caches
must not store it at all, as every answer is one account's. `no-store` would forbid the
revalidation as well. A response that sets its own `Cache-Control` (e.g. `no-store` on one
that shows a secret) keeps it.
"""

API_CACHE_CONTROL = "private, no-cache"
