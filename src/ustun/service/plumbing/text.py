"""Text fields every backend can store, checked at the edge so bad input is a 422, not a 500.

PostgreSQL's `text` refuses the NUL character, and no database can store a lone UTF-16
surrogate (JSON allows `"\\udc00"`); both used to reach the database and fail there. Defined
with the webhook endpoint's body (`ustun.webhooks.endpoint_body`), which Django and Flask check
too; the service's other bodies take them from here.
"""

from __future__ import annotations

from ustun.webhooks.endpoint_body import Text as Text
from ustun.webhooks.endpoint_body import storable as storable
