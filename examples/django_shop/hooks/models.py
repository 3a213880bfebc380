from django.db import models


class Received(models.Model):
    """A webhook the shop received: written by its handler, once per `webhook-id`."""

    event_id = models.CharField(max_length=40)
    type = models.CharField(max_length=100)
    data = models.JSONField()
    received_at = models.DateTimeField(auto_now_add=True)
