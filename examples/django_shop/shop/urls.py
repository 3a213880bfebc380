import os

from django.urls import path
from rest_framework.routers import SimpleRouter

from shop import faults
from shop.views import PaymentViewSet, guest_payment

router = SimpleRouter(trailing_slash=False)
router.register("payments", PaymentViewSet, basename="payment")
urlpatterns = [*router.urls, path("guest/payments", guest_payment)]
if os.environ.get("SHOP_FAULTS"):
    urlpatterns += [path("faults/raise", faults.fail), path("faults/wait", faults.wait)]
