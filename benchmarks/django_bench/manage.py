#!/usr/bin/env python
"""The Django project of benchmarks/django.py: `manage.py migrate` on BENCH_DATABASE_URL."""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench_site.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
