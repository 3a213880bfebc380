from rest_framework.routers import SimpleRouter

from shop.views import PaymentViewSet

router = SimpleRouter(trailing_slash=False)
router.register("payments", PaymentViewSet, basename="payment")
urlpatterns = router.urls
