from django.db import models


class Payment(models.Model):
    """What every variant's `POST /payments` writes."""

    amount = models.PositiveIntegerField()
    currency = models.CharField(max_length=3)
    created_at = models.DateTimeField(auto_now_add=True)


class Event(models.Model):
    """The hand-written outbox row of variants (a) and (c); (b) and (d) `emit` ustun's."""

    type = models.CharField(max_length=100)
    data = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)
