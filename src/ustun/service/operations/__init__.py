"""Operational routes: jobs, webhook endpoints, deliveries and events, API keys, health,
metrics, queues."""
