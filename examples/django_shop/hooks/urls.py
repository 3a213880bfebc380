"""`POST /webhooks`: Standard Webhooks signed with `SHOP_WEBHOOK_SECRET` (the `whsec_…` the
sender gave), each recorded once (`hooks.handlers`). Not routed while the variable is unset."""

import os

from django.urls import path

from hooks.handlers import HANDLERS
from ustun.django import receiver

SECRET = os.environ.get("SHOP_WEBHOOK_SECRET")

urlpatterns = [] if not SECRET else [path("webhooks", receiver(HANDLERS, secret=SECRET))]
