"""`POST /<variant>/payments` for the four variants of benchmarks/django.py."""

from django.urls import path
from payments import views

urlpatterns = [
    path("a/payments", views.Plain.as_view({"post": "create"})),
    path("b/payments", views.ByHand.as_view({"post": "create"})),
    path("c/payments", views.PeerKeys.as_view({"post": "create"})),
    path("d/payments", views.Ustun.as_view({"post": "create"})),
]
