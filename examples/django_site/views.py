from __future__ import annotations

from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.utils.html import escape

from queuegate.integrations.django import gated

SIGN_IN = (
    "<!doctype html><title>Sign in</title>"
    "<p>Name a user to sign in as (this stands for your own sign-in).</p>"
    "<form action='/login'><label>user <input name='user' required></label> <button>Sign in</button></form>"
)


def login(request: HttpRequest) -> HttpResponse:
    user = request.GET.get("user", "").strip()
    if not user:
        return HttpResponseBadRequest(SIGN_IN)
    request.session["user_id"] = user
    return HttpResponse(f"signed in as {escape(user)}")


@gated("sale")
def checkout(request: HttpRequest) -> HttpResponse:
    return HttpResponse(f"checkout for {request.session.get('user_id', 'a guest')}")


@gated("ticket-{event}")
async def buy(request: HttpRequest, event: str) -> HttpResponse:
    return HttpResponse(f"ticket for {event}")
