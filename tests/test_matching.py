"""What the gate counts as a request to a protected page, in process: the
forms of a path, methods, root_path, bypass rules, and the memory that
hostile paths may cost. (tests/test_routers.py attacks the same through real
servers and routers.)"""

from __future__ import annotations

import gc
import secrets

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.types import Message

from queuegate import Room
from queuegate.paths import forms, route_path

from .conftest import MakeGate, call_asgi, http_scope

pytestmark = pytest.mark.anyio


def test_dot_segments_are_never_resolved_to_avoid_gating() -> None:
    found = forms("/checkout/..")
    assert "/checkout/.." in found  # what the router sees: /checkout/{item} with item ".."
    assert "/" in found  # what a proxy that resolves dots would forward
    assert "/checkout/x/.." in forms("/checkout/x%5c..")
    assert "/checkout/.." in forms("/checkout/\uff0e\uff0e")


def test_route_path_is_the_path_minus_root_path_as_starlette_routes() -> None:
    assert route_path("/shop/checkout", "/shop") == "/checkout"
    assert route_path("/shop", "/shop") == "/"
    assert route_path("/shopping/checkout", "/shop") == "/shopping/checkout"
    assert route_path("/checkout", "/shop") == "/checkout"  # hypercorn leaves the prefix out
    assert "/shop/checkout" in forms("/checkout", "/shop")
    assert "/checkout" in forms("/shop/checkout", "/shop")
    # Litestar routes on what follows the first root_path anywhere in the path.
    assert "/checkout" in forms("/x/shop/checkout", "/shop")
    assert "/checkout/x" in forms("/shopcheckout/x", "/shop")


async def test_a_room_gates_every_method_but_those_it_names_open(make_gate: MakeGate) -> None:
    gate = await make_gate(rooms=[Room("sale", paths=["/checkout*"], rate=1, open_methods=["options"])])
    for method in ("GET", "get", "HEAD", "POST", "pOsT", "PUT", "DELETE", "PATCH", "PROPFIND", "BREW"):
        assert gate.match("/checkout", method) is not None, method
    for method in ("OPTIONS", "options", "Options"):
        assert gate.match("/checkout", method) is None, method
    everything = await make_gate(rooms=[Room("sale", paths=["/checkout*"], rate=1)])
    assert everything.match("/checkout", "OPTIONS") is not None


async def test_the_deprecated_methods_gate_only_what_they_list(make_gate: MakeGate) -> None:
    with pytest.warns(DeprecationWarning, match=r"methods= is deprecated.*open_methods") as warned:
        room = Room("sale", paths=["/checkout*"], rate=1, methods=["get", "Post"])
    assert warned[0].filename == __file__  # it points at the Room(...) to change
    gate = await make_gate(rooms=[room])
    for method in ("GET", "get", "HEAD", "head", "POST", "pOsT"):
        assert gate.match("/checkout", method) is not None, method
    for method in ("PUT", "DELETE", "OPTIONS"):
        assert gate.match("/checkout", method) is None, method
    with pytest.warns(DeprecationWarning, match="open_methods"):
        post_only = await make_gate(rooms=[Room("sale", paths=["/checkout*"], rate=1, methods=["POST"])])
    assert post_only.match("/checkout", "HEAD") is None


@pytest.mark.parametrize(
    "path",
    ["http://shop.test/checkout", "x:/checkout", "http:///checkout", "checkout", "", "*", "files/x"],
)
async def test_a_target_that_is_not_a_path_is_refused(make_gate: MakeGate, path: str) -> None:
    gate = await make_gate(rooms=[Room("sale", paths=["/checkout*"], rate=1, client_limit=0)])
    status, headers, body = await call_asgi(gate, http_scope(path))
    assert status == 400, body
    assert headers["cache-control"] == "no-store"
    # Not a path under a room either: some routers dispatch these (Quart
    # routes "x:/files" to /files), so none reaches the app.
    assert (await call_asgi(gate, http_scope(path, method="PUT")))[0] == 400


async def test_options_asterisk_goes_on_to_the_app(make_gate: MakeGate) -> None:
    gate = await make_gate(rooms=[Room("sale", paths=["/checkout*"], rate=1, client_limit=0)])
    status, _, body = await call_asgi(gate, http_scope("*", method="OPTIONS"))
    assert (status, body) == (200, b"app:*")
    # A room over everything covers it too ("*" is matched as "/*").
    everything = await make_gate(rooms=[Room("all", paths=["/*"], rate=1, client_limit=0)])
    assert everything.match("*", "OPTIONS") is not None


async def test_a_websocket_handshake_to_a_target_that_is_not_a_path_is_refused(make_gate: MakeGate) -> None:
    gate = await make_gate(rooms=[Room("sale", paths=["/checkout*"], rate=1, client_limit=0)])
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "websocket.connect"}

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {**http_scope("ws://shop.test/checkout/ws"), "type": "websocket", "scheme": "wss"}
    await gate({**scope, "extensions": {"websocket.http.response": {}}}, receive, send)
    assert [m["type"] for m in sent] == ["websocket.http.response.start", "websocket.http.response.body"]
    assert sent[0]["status"] == 400
    sent.clear()
    await gate(scope, receive, send)
    assert sent == [{"type": "websocket.close", "code": 1008}]


async def test_a_gate_in_a_sub_app_matches_the_path_it_routes_on(make_gate: MakeGate) -> None:
    gate = await make_gate(rooms=[Room("sale", paths=["/checkout*"], rate=1, client_limit=0)])
    assert (await call_asgi(gate, http_scope("/checkout")))[0] == 200  # the one place
    mounted = http_scope("/sub/checkout/..")
    mounted["root_path"] = "/sub"
    status, _, body = await call_asgi(gate, mounted)
    assert status == 503, body
    # The waiting page's links go through the mount, to this gate.
    assert b'"/sub/_queuegate/status/sale"' in body or b"/sub/_queuegate/status/sale" in body
    status_scope = http_scope("/sub/_queuegate/status/sale")
    status_scope["root_path"] = "/sub"
    assert (await call_asgi(gate, status_scope))[2].startswith(b'{"room":"sale","state":"none"')


async def test_a_bypass_path_must_cover_every_form(make_gate: MakeGate) -> None:
    gate = await make_gate(
        rooms=[Room("sale", paths=["/checkout*"], rate=1, client_limit=0)], bypass_paths=["/static/*"]
    )
    assert (await call_asgi(gate, http_scope("/checkout")))[0] == 200
    assert (await call_asgi(gate, http_scope("/static/app.css")))[0] == 200
    # Resolved, this is /checkout: a proxy would send it there, so it is gated.
    assert (await call_asgi(gate, http_scope("/static/../checkout")))[0] == 503


async def test_a_duplicate_cookie_that_does_not_verify_costs_nothing(make_gate: MakeGate) -> None:
    """A stray duplicate of the room's cookie (a parent domain's cookie of
    the same name, junk a sibling site set) sent after the visitor's own
    was read as theirs, the last one counting as in Starlette: an admitted
    buyer lost the admission and a waiting visitor the place (an auditor's
    raw requests). The last one that verifies counts, in one Cookie header
    or in several; of two valid ones, the last, as in Starlette."""
    from starlette.requests import cookie_parser

    gate = await make_gate(rooms=[Room("sale", paths=["/checkout*"], rate=1, client_limit=0)])
    _, headers, _ = await call_asgi(gate, http_scope("/checkout"))
    admitted = headers["set-cookie"].split(";")[0]
    forged = "qg_sale=" + admitted.split("=", 1)[1][::-1]
    assert cookie_parser(f"{admitted}; {forged}")["qg_sale"] == forged.split("=", 1)[1]
    for sent in (
        [f"{forged}; {admitted}"],
        [f"{admitted}; {forged}"],
        [f"{admitted}; qg_sale=junk; other=1"],
        [admitted, f"qg_sale=; {forged}"],
    ):
        scope = http_scope("/checkout", headers=[(b"cookie", header.encode()) for header in sent])
        assert (await call_asgi(gate, scope))[0] == 200, sent
    # Of two valid ones, the last: a second visitor's, waiting, after the
    # admitted one's is that second visitor.
    _, second, _ = await call_asgi(gate, http_scope("/checkout"))
    waiting = second["set-cookie"].split(";")[0]
    scope = http_scope("/checkout", headers=[(b"cookie", f"{admitted}; {waiting}".encode())])
    assert (await call_asgi(gate, scope))[0] == 503


_SPACE = st.sampled_from(["", " ", "  ", "\t"])


@settings(max_examples=500, deadline=None)
@given(
    pairs=st.lists(
        st.tuples(
            _SPACE,
            st.sampled_from(["qg_sale", "qg_sal", "qg_salex", "xqg_sale", "sid", ""]),
            _SPACE,
            st.sampled_from(["=", ""]),
            _SPACE,
            st.text(alphabet="abcXYZ019-_.~!=", max_size=8),
            _SPACE,
        ),
        max_size=6,
    )
)
def test_the_gate_reads_the_room_s_cookie_as_starlette_does(pairs: list[tuple[str, ...]]) -> None:
    """Cookie headers of every shape (names that contain the room's, spaces
    around names and values, pairs without '=', empty values): the gate
    reads the value Starlette's parser gives the app, for values a token can
    have."""
    from starlette.requests import cookie_parser

    from queuegate.visitors import cookie

    header = ";".join("".join(pair) for pair in pairs)
    scope = http_scope("/", headers=[(b"cookie", header.encode())])
    assert cookie(scope, b"qg_sale") == cookie_parser(header).get("qg_sale")


@settings(max_examples=1000, deadline=None)
@given(
    text=st.one_of(
        st.ip_addresses().map(str),
        st.lists(st.integers(0, 999), min_size=3, max_size=5).map(lambda parts: ".".join(map(str, parts))),
        st.text(alphabet="0123456789.:abcdefx \t", max_size=24),
    )
)
def test_client_addresses_are_read_as_the_ipaddress_module_reads_them(text: str) -> None:
    """IPv4 in canonical form takes a faster parser; every text must read as
    ``ipaddress.ip_address`` reads it (leading zeros, short forms, junk)."""
    import ipaddress

    from queuegate.clients import ClientAddresses, _address

    try:
        expected: object = ipaddress.ip_address(text)
    except ValueError:
        expected = None
    if isinstance(expected, ipaddress.IPv6Address) and expected.ipv4_mapped is not None:
        expected = expected.ipv4_mapped
    assert _address(text) == expected
    # The client it stands for: the address as ipaddress writes it, or an
    # IPv6 address's /64.
    if expected is None:
        key = "unknown"
    elif isinstance(expected, ipaddress.IPv6Address):
        key = f"{ipaddress.ip_network(f'{expected}/64', strict=False).network_address}/64"
    else:
        key = str(expected)
    assert ClientAddresses([])({"client": (text, 1), "headers": []}) == key or text != text.strip()


@given(
    address=st.ip_addresses(v=4),
    network=st.one_of(
        st.tuples(st.ip_addresses(v=4), st.integers(0, 32)),
        st.tuples(st.ip_addresses(v=6), st.integers(0, 128)),
    ),
)
def test_trusted_proxies_are_matched_as_the_ipaddress_module_matches_them(
    address: object, network: tuple[object, int]
) -> None:
    """A hop in canonical IPv4 is checked against the trusted networks as
    integers; it must be trusted exactly when ``ipaddress`` says it is in one."""
    import ipaddress

    from queuegate.clients import ClientAddresses

    trusted = ipaddress.ip_network(f"{network[0]}/{network[1]}", strict=False)
    gate = ClientAddresses([str(trusted), "192.0.2.0/24"])
    expected = address in trusted or address in ipaddress.ip_network("192.0.2.0/24")
    assert gate._hop_of(str(address)).trusted is expected
    assert gate.peer({"client": (str(address), 1)}) == address


_HOP_TEXTS = st.one_of(
    st.ip_addresses().map(str),
    st.sampled_from(["10.1.2.3", "192.0.2.9", "::ffff:10.1.2.3", "::ffff:198.51.100.7", "unknown", ""]),
    st.lists(st.integers(0, 999), min_size=3, max_size=5).map(lambda parts: ".".join(map(str, parts))),
    st.text(alphabet="0123456789.:abcdefx \t", max_size=24),
)


@given(peer=_HOP_TEXTS, hops=st.lists(_HOP_TEXTS, min_size=1, max_size=3))
def test_a_forwarded_header_s_client_is_the_last_hop_a_trusted_proxy_names(
    peer: str, hops: list[str]
) -> None:
    """A header of one hop takes a shorter way (queuegate.clients, _resolve):
    every header must name the client that walking its hops from the peer
    leftwards names (the last address read, stopping after an untrusted one
    or before one that is not an address)."""
    from queuegate.clients import _NO_HOP, ClientAddresses

    gate = ClientAddresses(["10.0.0.0/8", "2001:db8::/32", "192.0.2.0/24"])
    forwarded = ",".join(hops).encode("latin-1")
    found = _NO_HOP
    for hop in reversed([*hops, peer]):
        parsed = gate._hop_of(hop.strip())
        if not parsed.address:
            break
        found = parsed
        if not parsed.trusted:
            break
    assert gate._resolve(peer, forwarded) == found.key
    assert gate({"client": (peer, 1), "headers": [(b"x-forwarded-for", forwarded)]}) == found.key


async def test_ipv4_mapped_clients_are_their_ipv4_address(make_gate: MakeGate) -> None:
    gate = await make_gate(rooms=[Room("sale", paths=["/checkout*"], rate=1)], trusted_proxies=["10.0.0.0/8"])

    def client(peer: str, forwarded: str | None = None) -> str:
        headers = [] if forwarded is None else [(b"x-forwarded-for", forwarded.encode())]
        return gate.client_address({"client": (peer, 1), "headers": headers})

    assert client("::ffff:13.4.4.4") == "13.4.4.4"
    assert client("::ffff:13.4.4.5") == "13.4.4.5"  # two clients, not one /64
    assert client("10.0.0.1", "::ffff:198.51.100.7") == "198.51.100.7"
    assert client("2001:db8:1:2:3:4:5:6") == "2001:db8:1:2::/64"
    assert client("10.0.0.1", "x" * 100_000) == "10.0.0.1"  # not an address: the proxy itself


@pytest.mark.parametrize(
    ("headers", "allowed"),
    [
        ([(b"sec-fetch-site", b"same-origin")], True),
        ([(b"sec-fetch-site", b"cross-site"), (b"origin", b"https://shop.test")], False),
        ([(b"sec-fetch-site", b"same-site")], False),  # a sibling subdomain
        ([(b"origin", b"https://shop.test")], True),
        ([(b"origin", b"https://evil.example")], False),
        ([(b"origin", b"null")], False),
        ([], True),  # not a browser acting for another page
    ],
)
async def test_leaving_is_refused_from_another_site(
    make_gate: MakeGate, headers: list[tuple[bytes, bytes]], allowed: bool
) -> None:
    gate = await make_gate(rooms=[Room("sale", paths=["/checkout*"], rate=1, per=3600, client_limit=0)])
    await call_asgi(gate, http_scope("/checkout"))
    _, joined, _ = await call_asgi(gate, http_scope("/checkout"))
    cookie = (b"cookie", joined["set-cookie"].split(";")[0].encode())
    scope = http_scope("/_queuegate/leave/sale", method="POST", headers=[cookie, *headers])
    status, _, _ = await call_asgi(gate, scope)
    assert status == (200 if allowed else 403)
    assert (await gate.rooms["sale"].stats())["waiting"] == (0 if allowed else 1)


async def test_template_values_are_bounded_and_derived_rooms_expire(make_gate: MakeGate) -> None:
    events = {"42", "43"}
    template = Room(
        "ticket-{event}",
        paths=["/tickets/{event}/buy*"],
        rate=1,
        per=60,
        accept=lambda v: v["event"] in events,
    )
    gate = await make_gate(rooms=[template])
    assert (await call_asgi(gate, http_scope("/tickets/42/buy")))[0] == 200
    status, _, _ = await call_asgi(gate, http_scope("/tickets/made-up/buy"))
    assert status == 404  # refused values make no room and never reach the app
    assert await gate.store.room_names() == ["ticket-42"]
    keys = gate.store.keys("ticket-42")
    ttl = await gate.store.client.pttl(keys[4])
    assert 0 < ttl <= (600 + 3600) * 1000  # session (600 s) plus an hour
    assert await gate.store.client.pttl(keys[3]) > 0
    plain = await make_gate(rooms=[Room("sale", paths=["/checkout*"], rate=1)], prefix="plain")
    await call_asgi(plain, http_scope("/checkout"))
    assert await plain.store.client.pttl(plain.store.keys("sale")[4]) == -1  # plain rooms stay


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096


@pytest.mark.skipif(not __import__("os").path.exists("/proc/self/statm"), reason="needs /proc")
async def test_hostile_long_paths_do_not_grow_the_worker(make_gate: MakeGate) -> None:
    """10,000 unique 60 KB paths (httptools accepts 65 KB URLs), half of them
    gated: the process grows by less than 20 MB. (The first code cached each
    path's normal form: about 1.2 GB for these.)"""
    gate = await make_gate(rooms=[Room("sale", paths=["/checkout*"], rate=1, per=3600, client_limit=0)])

    async def hostile(n: int) -> None:
        for i in range(n):
            tail = secrets.token_hex(30_000)
            path = f"/checkout/{tail}" if i % 2 else f"/static/{tail}"
            scope = http_scope(path, headers=[(b"x-forwarded-for", tail[:60_000].encode())])
            scope["root_path"] = ""
            await call_asgi(gate, scope)

    await hostile(500)  # caches and pools at their working size
    gc.collect()
    before = _rss_bytes()
    await hostile(10_000)
    gc.collect()
    grown = _rss_bytes() - before
    assert grown < 20 * 2**20, f"grew by {grown / 2**20:.1f} MB"


async def test_a_pattern_with_a_trailing_slash_gates_the_bare_directory(make_gate: MakeGate) -> None:
    """Room ``/checkout/*``, request ``/checkout/``: Starlette dispatches it to
    ``/checkout/{rest:path}`` with an empty ``rest``. The first code dropped the
    trailing slash before matching, and let it through."""
    gate = await make_gate(rooms=[Room("sale", paths=["/checkout/*"], rate=1)])
    for path in ("/checkout/", "/checkout/x", "/Checkout//"):
        assert gate.match(path) is not None, path
    assert gate.match("/checkout") is None  # not under the pattern, and no route of it either


async def test_the_endpoints_caches_of_routes_and_urls_are_bounded(make_gate: MakeGate) -> None:
    """A page polls one route, so its match, its room's URLs and its JSON's
    fixed parts are remembered; a client chooses the room part of a route
    and a proxy the root path: each cache keeps at most 1,024 entries, and
    routes too long to be an endpoint's are matched without being kept."""
    from queuegate import pages

    gate = await make_gate(rooms=[Room("sale", paths=["/checkout*"], rate=1, per=3600, client_limit=0)])
    endpoints = gate.endpoints
    for n in range(3000):
        assert endpoints.match(f"/_queuegate/status/room-{n}") == ("status", f"room-{n}")
        gate.answers._urls(f"/mounted-{n}", "sale")
        pages._json_parts(f"room-{n}", "fifo", "/s", "/t", "en")
    for cache in (endpoints._cached_match, gate.answers._urls, pages._json_parts):
        assert cache.cache_info().currsize <= 1024
    endpoints._cached_match.cache_clear()
    # No room's name is that long: the gate's 404, not the app's page.
    assert endpoints.match("/_queuegate/status/" + "x" * 300) == ("status", "")
    assert endpoints._cached_match.cache_info().currsize == 0
    assert gate.answers._urls("/shop", "sale") == (
        "/shop/_queuegate/status/sale",
        "/shop/_queuegate/leave/sale",
        "/shop/_queuegate/stream/sale",
    )
