"""The receiving side: what a webhook consumer runs, from `verify` to exactly-once handling.

`verify` checks a delivery's signature (pure: `pip install ustun`); `receiver` is the Starlette
app that verifies, records the id in an `inbox` and runs `handlers`; `consumers` do the same for
RabbitMQ and NATS; `reconciler` reads a provider's event feed for missed events and keeps its
place in `cursors`; `printer` is `ustun listen`'s receiver that prints each event. The public
names are re-exported by `ustun.webhooks`; importing this package loads nothing.
"""
