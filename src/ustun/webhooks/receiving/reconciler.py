"""The receiver's safety net: poll the provider's event feed for what webhooks did not bring.

    handlers = Handlers()
    receiver = WebhookReceiver("whsec_…", inbox=inbox, handlers=handlers)
    reconciler = Reconciler("https://api.example.com", API_KEY, inbox, handlers)
    await reconciler.run_once()            # on demand; or `await reconciler.run(stopping)`

It pages through `GET /v1/events?after=<cursor>` (commit-safe: a cursor never skips an event
that commits late), claims each event in the same inbox as the HTTP receiver (UNIQUE by event
id) and runs the same handlers, so an event is handled once whichever path brings it first.
The cursor is stored beside the inbox after each page, so a restart resumes where it stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import datetime
from typing import Any

from ustun.client import AsyncClient, api_error
from ustun.clock import rfc3339
from ustun.defaults import DEFAULT_RECONCILE_INTERVAL, DEFAULT_RECONCILE_PAGE_SIZE
from ustun.webhooks.receiving.cursors import CursorStore, cursors_beside
from ustun.webhooks.receiving.handlers import Handlers
from ustun.webhooks.receiving.inbox import Inbox

log = logging.getLogger("ustun.webhooks.receiving.reconciler")

FEED = "/v1/events"
# Members of a feed entry that a webhook body does not have.
_FEED_ONLY = ("object",)


class Reconciler:
    """Feeds the events of a provider's feed that `inbox` has not seen to `handlers`.

    `source` names the feed in the cursor store (default: `base_url`); `since` is where a
    first run starts (default: the beginning of the feed); `cursors` defaults to the store
    beside the inbox (its database's table, or memory for a `MemoryInbox`).
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        inbox: Inbox,
        handlers: Handlers,
        *,
        source: str | None = None,
        since: datetime | None = None,
        page_size: int = DEFAULT_RECONCILE_PAGE_SIZE,
        cursors: CursorStore | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.inbox = inbox
        self.handlers = handlers
        self.source = source or self.base_url
        self.since = since
        self.page_size = page_size
        self.cursors = cursors or cursors_beside(inbox)
        self._prepared = False

    async def run_once(self) -> int:
        """Read the feed from the stored cursor to its end; the number of events handled."""
        if not self._prepared:
            await self.inbox.prepare()
            await self.cursors.prepare()
            self._prepared = True
        params = await self._start()
        handled = 0
        async with AsyncClient(base_url=self.base_url, api_key=self.api_key) as api:
            while True:
                page = await self._page(api, params)
                for entry in page["data"]:
                    handled += await self._feed(entry)
                await self.cursors.save(self.source, page["next_cursor"])
                if len(page["data"]) < self.page_size:
                    return handled
                params = {"after": page["next_cursor"], "limit": self.page_size}

    async def run(
        self, stopping: asyncio.Event, *, interval: float = DEFAULT_RECONCILE_INTERVAL
    ) -> None:
        """Reconcile every `interval` seconds until `stopping` is set; a failed run is logged
        and tried again at the next tick."""
        while not stopping.is_set():
            try:
                handled = await self.run_once()
            except Exception:
                log.exception("reconciling with %s failed; trying again later", self.base_url)
            else:
                if handled:
                    log.info("reconciled %d missed event(s) from %s", handled, self.base_url)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), interval)

    async def _start(self) -> dict[str, Any]:
        """The query of the first page: after the stored cursor, else from `since` or the start."""
        cursor = await self.cursors.load(self.source)
        if cursor is not None:
            return {"after": cursor, "limit": self.page_size}
        if self.since is not None:
            return {"since": rfc3339(self.since), "limit": self.page_size}
        return {"after": "0", "limit": self.page_size}

    async def _page(self, api: AsyncClient, params: dict[str, Any]) -> dict[str, Any]:
        response = await api.get(FEED, params=params)
        if response.is_error:
            raise api_error(response, f"GET {self.base_url}{FEED} failed")
        page: dict[str, Any] = response.json()
        return page

    async def _feed(self, entry: dict[str, Any]) -> int:
        """Run one feed entry through the handlers if the inbox has not seen its id: 1, else 0.

        An expunged event (past the provider's payload retention: `data` null) is skipped with
        a warning, not handed to the handlers without its data, nor marked handled."""
        event = {k: v for k, v in entry.items() if k not in _FEED_ONLY}
        event_id, event_type = str(event["id"]), str(event.get("type", ""))
        if event.get("expunged_at") is not None:
            log.warning(
                "skipped event %s (%s) from %s: its payload was expunged at %s",
                event_id,
                event_type,
                self.base_url,
                event["expunged_at"],
            )
            return 0
        if not await self.inbox.claim(event_id, event_type):
            return 0
        await self.handlers.handle(self.inbox, event_id, event_type, event)
        return 1
