from django.db import models


class Payment(models.Model):
    """A payment: written by `POST /payments` under an Idempotency-Key, with its event; a
    guest's (`POST /guest/payments`, an async view) has no owner."""

    owner = models.ForeignKey(
        "auth.User", on_delete=models.CASCADE, related_name="payments", null=True
    )
    amount = models.PositiveIntegerField()
    currency = models.CharField(max_length=3)
    created_at = models.DateTimeField(auto_now_add=True)
