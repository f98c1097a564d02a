from __future__ import annotations

from django.http import HttpRequest, HttpResponse

from queuegate.integrations.django import gated


def login(request: HttpRequest) -> HttpResponse:
    request.session["user_id"] = request.GET["user"]
    return HttpResponse(f"signed in as {request.GET['user']}")


@gated("sale")
def checkout(request: HttpRequest) -> HttpResponse:
    return HttpResponse(f"checkout for {request.session.get('user_id', 'a guest')}")


@gated("ticket-{event}")
async def buy(request: HttpRequest, event: str) -> HttpResponse:
    return HttpResponse(f"ticket for {event}")
