import os

from django.urls import path

from reports import faults
from reports.views import Reports

urlpatterns = [path("reports", Reports.as_view())]
if os.environ.get("SHOP_FAULTS"):
    urlpatterns += [path("faults/report", faults.fail)]
