"""The WSGI application of the Django project tests/apps/django_site.py (gunicorn:
apps.django_wsgi:application)."""
import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "apps.django_site")

from django.core.wsgi import get_wsgi_application  # noqa: E402

application = get_wsgi_application()
