"""A small Django project for tests/test_django.py and tests/test_gunicorn.py: settings,
a stamp middleware (standing for CORS or security headers) and views.

As settings (DJANGO_SETTINGS_MODULE=apps.django_site, served by gunicorn as
apps.django_wsgi:application): one limit shared by every worker, its rate and region from
SLIDEWIN_TEST_RATE and SLIDEWIN_TEST_REGION.
"""
import os

from django.http import HttpResponse
from django.urls import path

SECRET_KEY = "slidewin-tests"
DEBUG = False
ALLOWED_HOSTS = ["*"]
ROOT_URLCONF = "apps.django_site"
USE_TZ = True
MIDDLEWARE = [
    "apps.django_site.Stamp",  # outside the limiter: it sees the 429s too
    "slidewin.django.LimitMiddleware",
]
SLIDEWIN = {"rate": os.environ.get("SLIDEWIN_TEST_RATE", "10/minute"),
            "shared": os.environ.get("SLIDEWIN_TEST_REGION", "slidewin-django-test")}


class Stamp:
    """Stands for the project's own middleware (CORS, security headers): it stamps every
    response it sees with the worker's pid."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        response["X-Stamp"] = str(os.getpid())
        return response


def home(request):
    return HttpResponse("ok %d" % os.getpid())


urlpatterns = [path("", home)]
