"""The sending side: what emits events and delivers them.

`outbox` writes an event and its deliveries in the caller's unit of work; `dispatcher` claims
due deliveries, signs and sends them (`transport` over HTTP, `ustun.webhooks.brokers` to a
broker) and settles the outcomes as `verdict` classifies them, retrying on `schedule`, paced by
`pacing`; `message` builds the body sent, `quotas` bounds what an account may emit, `wakeup`
rings dispatchers after commit.
"""
