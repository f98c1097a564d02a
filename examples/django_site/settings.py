"""Just enough Django for the example: sessions in signed cookies (no
database), no auth app: /login?user=NAME stands for your own sign-in."""

from __future__ import annotations

import os

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-only-not-a-secret-0123456789")
DEBUG = False
ALLOWED_HOSTS = ["*"]
ROOT_URLCONF = "examples.django_site.urls"
INSTALLED_APPS = ["django.contrib.sessions"]
MIDDLEWARE = ["django.contrib.sessions.middleware.SessionMiddleware"]
SESSION_ENGINE = "django.contrib.sessions.backends.signed_cookies"
USE_TZ = True
