from rest_framework import viewsets

from documents.models import Document
from documents.serializers import DocumentSerializer
from ustun.django.rest import ConditionalMixin


class DocumentViewSet(ConditionalMixin, viewsets.ModelViewSet):
    """The caller's documents: each carries an ETag; PUT, PATCH and DELETE need `If-Match`."""

    serializer_class = DocumentSerializer

    def get_queryset(self):
        return Document.objects.filter(owner=self.request.user).order_by("id")

    def perform_create(self, serializer):
        serializer.save(owner=self.request.user)
