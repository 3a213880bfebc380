import os

from django.urls import path
from rest_framework.routers import SimpleRouter

from shop import faults
from shop.views import PaymentViewSet

router = SimpleRouter(trailing_slash=False)
router.register("payments", PaymentViewSet, basename="payment")
urlpatterns = router.urls
if os.environ.get("SHOP_FAULTS"):
    urlpatterns += [path("faults/raise", faults.fail), path("faults/wait", faults.wait)]
