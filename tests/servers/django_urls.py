"""The shop's URLs on Django (see ``apps.django_app``)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.urls import include, path, re_path

from queuegate.integrations.django import gated

from .apps import oracle


def _checkout(request: HttpRequest) -> HttpResponse:
    response = HttpResponse("checkout")
    response.headers["x-oracle"] = oracle(request.scope, request.method or "")
    return response


def protected(request: HttpRequest, **kwargs: Any) -> HttpResponse:
    return _checkout(request)


async def protected_async(request: HttpRequest, **kwargs: Any) -> HttpResponse:
    return _checkout(request)


def open_page(request: HttpRequest, **kwargs: Any) -> HttpResponse:
    response = HttpResponse("open")
    response.headers["x-oracle"] = "OPEN"
    return response


if settings.QGDEV_MODE == "routes":
    protected = gated("sale")(protected)
    protected_async = gated("sale")(protected_async)

urlpatterns = [
    path("checkout", protected),
    path("checkout/<str:item>", protected_async),
    path("checkout/<str:item>/pay", protected),
    re_path(r"^checkout-any/(?P<rest>.*)$", protected_async),
    path("checkout-m/", include([path("<str:x>", protected), path("<str:x>/<path:rest>", protected)])),
    path("", open_page),
    path("<str:page>", open_page),
    path("files/<path:rest>", open_page),
]
