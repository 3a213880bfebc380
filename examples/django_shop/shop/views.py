import json

from asgiref.sync import sync_to_async
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
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
        serializer.save(owner=request.user)
        emit("payment.created", serializer.data, account=str(request.user.pk))
        return Response(serializer.data, status=status.HTTP_201_CREATED)


@csrf_exempt
@require_POST
@idempotent("required")
async def guest_payment(request: HttpRequest) -> JsonResponse:
    """An async view (served under ASGI): a guest's payment and its event, once per key."""
    serializer = PaymentSerializer(data=json.loads(request.body))
    if not await sync_to_async(serializer.is_valid)():
        return JsonResponse(serializer.errors, status=400)
    await sync_to_async(serializer.save)()
    await sync_to_async(emit)("payment.created", serializer.data, account="guests")
    return JsonResponse(serializer.data, status=201)
