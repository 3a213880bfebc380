"""What the shop does with the webhooks it receives (`hooks.urls` routes them here)."""

from hooks.models import Received


def record(event: dict) -> None:
    """Keep the event: it commits with the inbox row that marks it received."""
    Received.objects.create(event_id=event["id"], type=event["type"], data=event.get("data", {}))


HANDLERS = {"*": record}
