from rest_framework import status, viewsets
from rest_framework.response import Response

from shop.models import Payment
from shop.serializers import PaymentSerializer
from ustun.django import emit, idempotent


class PaymentViewSet(viewsets.ReadOnlyModelViewSet):
    """Payments: created once per Idempotency-Key, each with its `payment.created` event."""

    serializer_class = PaymentSerializer

    def get_queryset(self):
        return Payment.objects.filter(owner=self.request.user).order_by("id")

    @idempotent("required")
    def create(self, request):
        serializer = PaymentSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        payment = serializer.save(owner=request.user)
        emit("payment.created", serializer.data, account=str(request.user.pk))
        return Response(serializer.data, status=status.HTTP_201_CREATED)
