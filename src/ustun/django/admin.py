"""The Django admin's pages for ustun's webhooks: endpoints, events, and deliveries with their
attempts, all read-only (ustun writes them), and a Retry action on deliveries.

No page shows a signing secret: the models do not map those columns (`admin_models`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.db import transaction
from django.db.models import Model, QuerySet
from django.http import HttpRequest

from ustun import clock
from ustun.django.admin_models import WebhookAttempt, WebhookDelivery, WebhookEndpoint, WebhookEvent
from ustun.django.conf import alias
from ustun.django.db import host_connection
from ustun.store.plans import run_sync
from ustun.webhooks.adapters import notifies, plans
from ustun.webhooks.states import Change, transition

if TYPE_CHECKING:
    EndpointAdmin = admin.ModelAdmin[WebhookEndpoint]
    EventAdmin = admin.ModelAdmin[WebhookEvent]
    DeliveryAdmin = admin.ModelAdmin[WebhookDelivery]
    AttemptInline = admin.TabularInline[WebhookAttempt, WebhookDelivery]
else:  # Django's classes take no type parameters at run time.
    EndpointAdmin = EventAdmin = DeliveryAdmin = admin.ModelAdmin
    AttemptInline = admin.TabularInline


class ReadOnly:
    """Neither add, change nor delete: ustun writes these rows, the admin shows them."""

    def has_add_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(ReadOnly, EndpointAdmin):
    list_display = ("id", "url", "account", "events", "enabled", "failing_since", "created_at")
    list_filter = ("enabled", "kind")
    list_select_related = ("account",)
    search_fields = ("id", "url", "account__name")
    ordering = ("-created_at",)


@admin.register(WebhookEvent)
class WebhookEventAdmin(ReadOnly, EventAdmin):
    list_display = ("id", "type", "account", "created_at")
    list_select_related = ("account",)
    search_fields = ("id", "type", "account__name")
    ordering = ("-created_at",)


class WebhookAttemptInline(ReadOnly, AttemptInline):
    model = WebhookAttempt
    fields = ("attempted_at", "status_code", "latency_ms", "error", "response")
    ordering = ("attempted_at", "id")
    extra = 0


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(ReadOnly, DeliveryAdmin):
    list_display = (
        "id",
        "event__type",
        "endpoint__url",
        "status",
        "attempt_count",
        "next_attempt_at",
        "updated_at",
    )
    list_filter = ("status",)
    list_select_related = ("event", "endpoint")
    search_fields = ("id", "event__id", "endpoint__url")
    ordering = ("-created_at",)
    inlines = (WebhookAttemptInline,)
    actions = ("retry",)

    def has_retry_permission(self, request: HttpRequest) -> bool:
        """Retrying changes a delivery: it takes the model's change permission (which the
        read-only pages otherwise ignore)."""
        return admin.ModelAdmin.has_change_permission(self, request)

    @admin.action(description="Retry the selected deliveries now", permissions=["retry"])
    def retry(self, request: HttpRequest, queryset: QuerySet[WebhookDelivery, Any]) -> None:
        """Make each due now, pending, as the service's `POST /v1/deliveries/{id}/retry` does
        (a new attempt; the count keeps growing); not those of a disabled endpoint."""
        conn = host_connection()
        notify = notifies(conn)
        now = clock.now()
        retried, refused = 0, []
        with transaction.atomic(using=alias()):
            for delivery_id, endpoint_id, status in queryset.values_list(
                "id", "endpoint_id", "status"
            ):
                resent = transition(status, Change.RESEND)
                plan = plans.retry(delivery_id, endpoint_id, resent, now, notify=notify)
                if run_sync(plan, conn):
                    retried += 1
                else:
                    refused.append(delivery_id)
        if retried:
            self.message_user(request, f"{retried} deliveries will be sent again now.")
        if refused:
            listed = ", ".join(refused)
            detail = f"Not retried, their endpoint is disabled (enable it first): {listed}."
            self.message_user(request, detail, messages.WARNING)
