"""ustun's webhook tables as unmanaged Django models, for the admin (`ustun.django.admin`).

ustun's own migrations make and change these tables (`manage.py migrate` runs them); Django
only reads them. The signing secrets and a broker's sealed URL are not mapped at all, so no
admin page or queryset can show them.
"""

from __future__ import annotations

from datetime import datetime

from django.db import models


class Account(models.Model):
    """A tenant, named by the `account` string given to `emit` and `endpoints.create`."""

    id: models.CharField[str, str] = models.CharField(primary_key=True, max_length=40)
    name: models.CharField[str, str] = models.CharField(max_length=100, unique=True)
    created_at: models.DateTimeField[datetime, datetime] = models.DateTimeField()

    class Meta:
        managed = False
        db_table = "accounts"

    def __str__(self) -> str:
        return self.name


def _account() -> models.ForeignKey[Account, Account]:
    return models.ForeignKey(
        Account, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+"
    )


class WebhookEndpoint(models.Model):
    """Where an account's events are sent."""

    id: models.CharField[str, str] = models.CharField(primary_key=True, max_length=40)
    account: models.ForeignKey[Account, Account] = _account()
    kind: models.CharField[str, str] = models.CharField(max_length=16)
    url: models.TextField[str, str] = models.TextField()
    destination: models.TextField[str | None, str | None] = models.TextField(null=True)
    description: models.TextField[str, str] = models.TextField()
    events: models.TextField[str, str] = models.TextField(
        help_text="JSON list of the event types it gets"
    )
    payload: models.CharField[str, str] = models.CharField(max_length=8)
    enabled: models.BooleanField[bool, bool] = models.BooleanField()
    disabled_reason: models.TextField[str | None, str | None] = models.TextField(null=True)
    rate_limit: models.FloatField[float | None, float | None] = models.FloatField(null=True)
    max_in_flight: models.IntegerField[int, int] = models.IntegerField()
    ordering: models.CharField[str, str] = models.CharField(max_length=16)
    signature: models.CharField[str, str] = models.CharField(max_length=16)
    failing_since: models.DateTimeField[datetime | None, datetime | None] = models.DateTimeField(
        null=True
    )
    version: models.IntegerField[int, int] = models.IntegerField()
    created_at: models.DateTimeField[datetime, datetime] = models.DateTimeField()
    updated_at: models.DateTimeField[datetime, datetime] = models.DateTimeField()

    class Meta:
        managed = False
        db_table = "webhook_endpoints"
        verbose_name = "webhook endpoint"

    def __str__(self) -> str:
        return self.url


class WebhookEvent(models.Model):
    """An event an account emitted (the outbox)."""

    id: models.CharField[str, str] = models.CharField(primary_key=True, max_length=40)
    account: models.ForeignKey[Account, Account] = _account()
    type: models.CharField[str, str] = models.CharField(max_length=100)
    data: models.TextField[str, str] = models.TextField()
    object_url: models.TextField[str | None, str | None] = models.TextField(null=True)
    created_at: models.DateTimeField[datetime, datetime] = models.DateTimeField()

    class Meta:
        managed = False
        db_table = "webhook_events"
        verbose_name = "webhook event"

    def __str__(self) -> str:
        return f"{self.type} {self.id}"


class WebhookDelivery(models.Model):
    """One event on its way to one endpoint."""

    id: models.CharField[str, str] = models.CharField(primary_key=True, max_length=40)
    account: models.ForeignKey[Account, Account] = _account()
    endpoint: models.ForeignKey[WebhookEndpoint, WebhookEndpoint] = models.ForeignKey(
        WebhookEndpoint, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+"
    )
    event: models.ForeignKey[WebhookEvent, WebhookEvent] = models.ForeignKey(
        WebhookEvent, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+"
    )
    status: models.CharField[str, str] = models.CharField(max_length=16)
    attempt_count: models.IntegerField[int, int] = models.IntegerField()
    next_attempt_at: models.DateTimeField[datetime | None, datetime | None] = models.DateTimeField(
        null=True
    )
    created_at: models.DateTimeField[datetime, datetime] = models.DateTimeField()
    updated_at: models.DateTimeField[datetime, datetime] = models.DateTimeField()

    class Meta:
        managed = False
        db_table = "webhook_deliveries"
        verbose_name = "webhook delivery"
        verbose_name_plural = "webhook deliveries"

    def __str__(self) -> str:
        return self.id


class WebhookAttempt(models.Model):
    """One try at sending a delivery, and what came back."""

    id: models.CharField[str, str] = models.CharField(primary_key=True, max_length=40)
    delivery: models.ForeignKey[WebhookDelivery, WebhookDelivery] = models.ForeignKey(
        WebhookDelivery, on_delete=models.DO_NOTHING, db_constraint=False, related_name="attempts"
    )
    attempted_at: models.DateTimeField[datetime, datetime] = models.DateTimeField()
    status_code: models.IntegerField[int | None, int | None] = models.IntegerField(null=True)
    latency_ms: models.FloatField[float, float] = models.FloatField()
    error: models.TextField[str | None, str | None] = models.TextField(null=True)
    response: models.TextField[str | None, str | None] = models.TextField(null=True)

    class Meta:
        managed = False
        db_table = "webhook_attempts"
        verbose_name = "webhook attempt"

    def __str__(self) -> str:
        return self.id
