from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("ustun/", include("ustun.django.urls")),
    path("", include("shop.urls")),
    path("", include("documents.urls")),
    path("", include("reports.urls")),
    path("", include("hooks.urls")),
]
