"""Attacks on the gate: floods, path tricks, hostile input. Each is gated,
refused or answered cleanly: never forwarded ungated, never a 500."""

from __future__ import annotations

import re

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from queuegate import QueueGate, Room

from .conftest import SECRET, MakeGate, client_for

SECRET2 = "another-secret-key-0123456789abcd"

pytestmark = pytest.mark.anyio


def client_at(gate: QueueGate, address: str, headers: dict[str, str] | None = None) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=gate, client=(address, 5000)),
        base_url="https://shop.test",
        headers=headers,
    )


async def test_one_client_cannot_take_thousands_of_places(make_gate: MakeGate) -> None:
    gate = await make_gate(rooms=[Room("sale", paths=["/checkout*"], rate=1, per=60, client_limit=3)])
    statuses = []
    for _ in range(5):
        async with client_at(gate, "203.0.113.7") as browser:
            response = await browser.get("/checkout", headers={"accept": "application/json"})
            statuses.append(response.status_code)
    assert statuses == [200, 503, 503, 429, 429]
    assert 1 <= int(response.headers["retry-after"]) <= 60
    assert response.json()["state"] == "limited"
    assert response.headers["cache-control"] == "no-store"
    async with client_at(gate, "198.51.100.9") as neighbour:
        assert (await neighbour.get("/checkout")).status_code == 503  # a place of its own
    stats = await gate.rooms["sale"].stats()
    assert stats["waiting"] == 3  # the refused ones took nothing
    assert stats["limited"] == 2  # and are counted, for operators to see
    # The count lasts a minute from the client's first place, then goes.
    counts = gate.store._base("sale") + "client:"
    assert 0 < await gate.store.client.pttl(counts + "203.0.113.7") <= 60_000
    assert 0 < await gate.store.client.pttl(counts + "198.51.100.9") <= 60_000
    taken = await gate.store.client.get(counts + "203.0.113.7")
    assert taken is not None
    assert int(taken) == 5


async def test_forwarded_for_counts_only_behind_trusted_proxies(make_gate: MakeGate) -> None:
    gate = await make_gate(
        rooms=[Room("sale", paths=["/checkout*"], rate=1, per=60, client_limit=1)],
        trusted_proxies=["10.0.0.0/8"],
    )
    # Through the trusted proxy, two real clients are two clients...
    for real in ("192.0.2.1", "192.0.2.2"):
        async with client_at(gate, "10.0.0.5", {"x-forwarded-for": f"{real}, 10.0.0.9"}) as c:
            assert (await c.get("/checkout")).status_code in (200, 503)
    # ...but a client that writes its own X-Forwarded-For is still itself.
    async with client_at(gate, "192.0.2.50", {"x-forwarded-for": "1.1.1.1"}) as c:
        assert (await c.get("/checkout")).status_code == 503
    async with client_at(gate, "192.0.2.50", {"x-forwarded-for": "8.8.8.8"}) as c:
        assert (await c.get("/checkout")).status_code == 429
    scope = {"client": ("2001:db8:1:2:3:4:5:6", 1), "headers": []}
    assert gate.client_address(scope) == "2001:db8:1:2::/64"


# Each spelling an app or server might route to /checkout/pay. Every one must
# be gated (503 with a place in line) or rejected; none may reach the app.
BYPASSES = [
    "/checkout",
    "/Checkout",
    "/CHECKOUT",
    "/checkout/",
    "//checkout",
    "///checkout",
    "/./checkout",
    "/a/../checkout",
    "/../checkout",
    "/checkout/.",
    "/checkout/pay/..",
    "/%63heckout",
    "/%63%68%65%63%6b%6f%75%74",
    "/%2563heckout",
    "/%252563heckout",
    "/checkout;jsessionid=abc",
    "/checkout;/pay",
    "/check%00out",
    "/checkout%00",
    "/\\checkout",
    "/%5ccheckout",
    "/checkout\\pay",
    "/\uff43heckout",
    "/\uff23\uff28\uff25\uff23\uff2b\uff2f\uff35\uff34",
    "/che\u0441kout".replace("\u0441", "c"),
    "/checkout/%2e%2e/checkout",
    "/%2e/checkout",
    "/checkout%2fpay",
    "/CheckOut/PAY",
    "/checkout\t",
    "/checkout%09",
    "/x/%2e%2e/checkout",
    "/checkout/./pay",
    "/checkout//pay",
    "/%2F%2Fcheckout",
]


@pytest.mark.parametrize("path", BYPASSES)
async def test_path_spellings_are_gated(make_gate: MakeGate, path: str) -> None:
    from .test_gate import asgi_status

    gate = await make_gate(rooms=[Room("sale", paths=["/checkout*"], rate=1, per=60)])
    async with client_for(gate) as first:
        assert (await first.get("/checkout")).status_code == 200  # the one place now
    assert await asgi_status(gate, path) in (503, 400), path


def test_at_least_30_spellings() -> None:
    assert len(set(BYPASSES)) >= 30


async def test_no_redirect_anywhere(make_gate: MakeGate) -> None:
    """There is no 'return to' parameter to abuse: the waiting page is served
    at the URL the visitor asked for and reloads it in place."""
    gate = await make_gate(rooms=[Room("sale", paths=["/checkout*"], rate=1, per=60)])
    async with client_for(gate) as a, client_for(gate) as b:
        await a.get("/checkout")
        for target in (
            "//evil.test",
            "/\\evil.test",
            "https://evil.test",
            "javascript:alert(1)",
            "%2F%2Fevil",
        ):
            for response in (
                await b.get("/checkout", params={"next": target, "return_to": target}),
                await b.get("/_queuegate/status/sale", params={"next": target}),
                await b.post("/_queuegate/leave/sale", params={"next": target}),
            ):
                assert "location" not in response.headers
                assert response.status_code < 300 or response.status_code >= 400
                assert "evil" not in response.text


TEXT = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=40)
HEADER_VALUE = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=60)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    path=st.one_of(TEXT.map(lambda t: "/checkout" + t), TEXT.map(lambda t: "/_queuegate/status/" + t), TEXT),
    query=HEADER_VALUE,
    cookie=HEADER_VALUE,
    accept=st.sampled_from(["text/html", "application/json", "*/*", ""]),
    method=st.sampled_from(["GET", "POST", "HEAD", "PUT"]),
)
def test_fuzzed_requests_never_crash_or_leak(
    redis_url: str, path: str, query: str, cookie: str, accept: str, method: str
) -> None:
    import anyio

    from .conftest import SECRET, call_asgi, http_scope, ok_app

    async def one() -> tuple[int, dict[str, str], bytes]:
        # A gate per example: each example runs in an event loop of its own.
        gate = QueueGate(
            ok_app,
            rooms=[Room("sale", paths=["/checkout*"], rate=1, per=60, client_limit=0, title="<b>'\"&")],
            secret_key=SECRET,
            redis=redis_url,
            environ={},
        )
        headers = [(b"cookie", b"qg_sale=" + cookie.encode()), (b"accept", accept.encode())]
        scope = http_scope("/" + path.lstrip("/"), method=method, headers=headers, query=query.encode())
        try:
            return await call_asgi(gate, scope)
        finally:
            await gate.store.aclose()

    status, headers, body = anyio.run(one)
    assert status in (200, 403, 404, 405, 429, 503)  # the gate's answers; never a 500
    assert b"Traceback" not in body
    if headers.get("content-type", "").startswith("text/html"):
        text = body.decode("utf-8", "replace")
        assert "<b>'" not in text  # the room's hostile title, always escaped
        for value in (path, query, cookie):
            if re.search(r"<[a-zA-Z/!?]", value):  # markup, were it reflected raw
                assert value not in text
    if not body.startswith(b"app:"):  # the gate's own answers
        assert headers.get("cache-control") == "no-store"


async def test_a_bound_cookie_admits_only_the_client_that_got_it(make_gate: MakeGate) -> None:
    room = Room("sale", paths=["/checkout*"], capacity=1, client_limit=0)
    gate = await make_gate(rooms=[room], bind_cookie=["network", "user_agent"])
    phone = {"user-agent": "Phone/1.0"}
    async with client_at(gate, "203.0.113.5", phone) as owner:
        assert (await owner.get("/checkout")).status_code == 200
        cookie = owner.cookies["qg_sale"]
    shared = {"cookie": f"qg_sale={cookie}"}
    # The owner on another address of its network (a phone moving on its
    # carrier's range) still passes.
    async with client_at(gate, "203.0.113.77", {**phone, **shared}) as moved:
        assert (await moved.get("/checkout")).status_code == 200
    # Anyone else with the same cookie is a newcomer: the line.
    for address, agent in (("198.51.100.9", "Phone/1.0"), ("203.0.113.5", "Desktop/2.0")):
        async with client_at(gate, address, {"user-agent": agent, **shared}) as other:
            response = await other.get("/checkout")
            assert response.status_code == 503
            assert "qg_sale=" in response.headers["set-cookie"]  # a place of its own
    # Rotating the secret key keeps the binding valid.
    rotated = await make_gate(
        rooms=[room], bind_cookie=["network", "user_agent"], secret_key=[SECRET2, SECRET]
    )
    async with client_at(rotated, "203.0.113.5", {**phone, **shared}) as owner_again:
        assert (await owner_again.get("/checkout")).status_code == 200


async def test_without_binding_a_shared_cookie_works_anywhere(make_gate: MakeGate) -> None:
    """The default, documented trade-off: a cookie is a bearer token."""
    gate = await make_gate(rooms=[Room("sale", paths=["/checkout*"], capacity=1, client_limit=0)])
    async with client_at(gate, "203.0.113.5") as owner:
        assert (await owner.get("/checkout")).status_code == 200
        shared = {"cookie": f"qg_sale={owner.cookies['qg_sale']}"}
    async with client_at(gate, "198.51.100.9", shared) as other:
        assert (await other.get("/checkout")).status_code == 200
