"""Proofs of work before a place (Room(challenge=N)): the challenge in JSON and
HTML, the join endpoint, and the rules that make a proof worth one place."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from queuegate import Room
from queuegate.challenges import Challenges, solve

from .conftest import SECRET, MakeGate, client_for

pytestmark = pytest.mark.anyio

JSON = {"accept": "application/json"}


def room(**kw: Any) -> Room:
    options: dict[str, Any] = {"rate": 100, "per": 60.0, "challenge": 500, "paths": ["/checkout*"]}
    options.update(kw)
    return Room(options.pop("name", "sale"), **options)


def solved(challenge: dict[str, Any]) -> str:
    """The payload the page posts: ALTCHA's, base64 of the solution's JSON."""
    return solve(challenge)


async def ask(client: httpx.AsyncClient, path: str = "/checkout") -> httpx.Response:
    return await client.get(path, headers=JSON)


async def test_a_newcomer_gets_a_challenge_not_a_place(make_gate: MakeGate) -> None:
    gate = await make_gate(rooms=[room()])
    async with client_for(gate) as client:
        response = await ask(client)
    body = response.json()
    assert response.status_code == 503
    assert body["state"] == "challenge"
    assert body["join_url"] == "/_queuegate/join/sale"
    assert body["challenge"]["maxNumber"] == 500
    assert body["challenge"]["algorithm"] == "SHA-256"
    assert "set-cookie" not in response.headers
    stats = await gate.store.stats("sale")
    assert (stats["waiting"], stats["active"]) == (0, 0)


async def test_a_solved_challenge_buys_one_place_once(make_gate: MakeGate) -> None:
    gate = await make_gate(rooms=[room()])
    async with client_for(gate) as client:
        challenge = (await ask(client)).json()["challenge"]
        payload = solved(challenge)
        joined = await client.post("/_queuegate/join/sale", json={"altcha": payload})
        assert joined.status_code == 200
        assert joined.json()["state"] == "active"
        assert (await client.get("/checkout")).text == "app:/checkout"
    # The same proof from another browser buys nothing.
    async with client_for(gate) as other:
        again = await other.post("/_queuegate/join/sale", json={"altcha": payload})
        assert again.json()["state"] == "challenge"
        assert "qg_sale" not in again.cookies
    stats = await gate.store.stats("sale")
    assert stats["active"] == 1


async def test_one_proof_sent_at_once_from_twenty_browsers_buys_one_place(make_gate: MakeGate) -> None:
    gate = await make_gate(rooms=[room()])
    async with client_for(gate) as client:
        payload = solved((await ask(client)).json()["challenge"])
    clients = [client_for(gate) for _ in range(20)]
    try:
        answers = await asyncio.gather(
            *(c.post("/_queuegate/join/sale", json={"altcha": payload}) for c in clients)
        )
    finally:
        await asyncio.gather(*(c.aclose() for c in clients))
    assert sorted(a.json()["state"] for a in answers) == ["active"] + ["challenge"] * 19
    assert (await gate.store.stats("sale"))["active"] == 1


async def test_proofs_do_not_cross_rooms_or_keys(make_gate: MakeGate) -> None:
    gate = await make_gate(rooms=[room(), room(name="other", paths=["/other*"])])
    async with client_for(gate) as client:
        for_sale = solved((await ask(client)).json()["challenge"])
        refused = await client.post("/_queuegate/join/other", json={"altcha": for_sale})
        assert refused.json()["state"] == "challenge"
    foreign = Challenges(["another secret that is long enough"]).issue("sale", 500)
    async with client_for(gate) as client:
        refused = await client.post("/_queuegate/join/sale", json={"altcha": solved(foreign)})
        assert refused.json()["state"] == "challenge"
    assert (await gate.store.stats("sale"))["active"] == 0


async def test_a_proof_easier_than_the_room_asks_now_is_refused(make_gate: MakeGate) -> None:
    gate = await make_gate(rooms=[room()])
    async with client_for(gate) as client:
        easy = solved((await ask(client)).json()["challenge"])
        await gate.store.configure(room(), challenge=5000)
        answer = (await client.post("/_queuegate/join/sale", json={"altcha": easy})).json()
        assert answer["state"] == "challenge"
        assert answer["challenge"]["maxNumber"] == 5000
        hard = solved(answer["challenge"])
        answer = (await client.post("/_queuegate/join/sale", data={"altcha": hard})).json()
        assert answer["state"] == "active"


async def test_an_expired_proof_is_refused(make_gate: MakeGate) -> None:
    gate = await make_gate(rooms=[room()])
    gate.challenges = gate.answers._challenges = Challenges([SECRET], ttl=0.5)
    async with client_for(gate) as client:
        payload = solved((await ask(client)).json()["challenge"])
        await asyncio.sleep(1.1)
        answer = (await client.post("/_queuegate/join/sale", json={"altcha": payload})).json()
    assert answer["state"] == "challenge"


async def test_the_line_is_joined_through_the_challenge_when_full(make_gate: MakeGate) -> None:
    gate = await make_gate(rooms=[room(rate=1)])
    states = []
    for _ in range(3):
        async with client_for(gate) as client:
            payload = solved((await ask(client)).json()["challenge"])
            states.append((await client.post("/_queuegate/join/sale", json={"altcha": payload})).json())
            after = await ask(client)
            assert after.text == "app:/checkout" if len(states) == 1 else after.json()["state"] == "waiting"
    assert [s["state"] for s in states] == ["active", "waiting", "waiting"]
    assert [s.get("position") for s in states[1:]] == [1, 2]


async def test_visitors_with_places_and_rooms_without_challenge_are_untouched(make_gate: MakeGate) -> None:
    gate = await make_gate(rooms=[room(challenge=0)])
    async with client_for(gate) as client:
        assert (await client.get("/checkout")).text == "app:/checkout"
        await gate.store.configure(room(challenge=0), challenge=1000)
        # Already inside: no challenge for a place already held.
        assert (await client.get("/checkout")).text == "app:/checkout"
    async with client_for(gate) as newcomer:
        assert (await ask(newcomer)).json()["state"] == "challenge"


async def test_the_join_endpoint_refuses_other_sites_methods_and_big_bodies(make_gate: MakeGate) -> None:
    gate = await make_gate(rooms=[room()])
    async with client_for(gate) as client:
        payload = solved((await ask(client)).json()["challenge"])
        cross = await client.post(
            "/_queuegate/join/sale", json={"altcha": payload}, headers={"sec-fetch-site": "cross-site"}
        )
        assert cross.status_code == 403
        assert (await client.get("/_queuegate/join/sale")).status_code == 405
        big = await client.post("/_queuegate/join/sale", content=b"x" * 10_000)
        assert big.status_code == 413
        # None of that spent the proof.
        answer = await client.post("/_queuegate/join/sale", json={"altcha": payload})
        assert answer.json()["state"] == "active"


async def test_the_page_says_javascript_is_needed_and_carries_the_challenge(make_gate: MakeGate) -> None:
    gate = await make_gate(rooms=[room()])
    async with client_for(gate) as client:
        page = await client.get("/checkout", headers={"accept-language": "ko"})
    assert page.status_code == 503
    assert page.headers["content-language"] == "ko"
    assert "<noscript>" in page.text
    assert 'lang="ko"' in page.text
    assert "data-challenge=" in page.text
    assert 'data-join="/_queuegate/join/sale"' in page.text
    assert "script-src 'sha256-" in page.headers["content-security-policy"]


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    body=st.one_of(
        st.binary(max_size=600),
        st.builds(lambda v: json.dumps({"altcha": v}).encode(), st.text(max_size=300)),
        st.builds(
            lambda d: json.dumps({"altcha": base64.b64encode(json.dumps(d).encode()).decode()}).encode(),
            st.dictionaries(
                st.sampled_from(["algorithm", "challenge", "salt", "signature", "number"]),
                st.one_of(st.text(max_size=80), st.integers(), st.none(), st.lists(st.integers())),
            ),
        ),
    )
)
def test_hostile_join_bodies_never_give_a_place_or_fail(body: bytes, sync_gate: Any) -> None:
    gate, run = sync_gate

    async def post() -> httpx.Response:
        async with client_for(gate) as client:
            return await client.post(
                "/_queuegate/join/sale", content=body, headers={"content-type": "application/json"}
            )

    response = run(post())
    assert response.status_code == 503
    assert response.json()["state"] == "challenge"


@pytest.fixture
def sync_gate(redis_url: str) -> Any:
    """A gate for Hypothesis, which runs each example synchronously."""
    from queuegate import QueueGate

    from .conftest import ok_app

    loop = asyncio.new_event_loop()
    prefix = f"qgc{time.time_ns()}"
    gate = QueueGate(ok_app, redis=redis_url, secret_key=SECRET, rooms=[room()], prefix=prefix)
    yield gate, loop.run_until_complete
    loop.run_until_complete(gate.aclose())
    loop.close()


def test_virtual_visitors_take_the_challenge_like_the_page(redis_url: str) -> None:
    from queuegate import QueueGate
    from queuegate.simulate import simulate

    from .conftest import lifespan_app, served

    gate = QueueGate(
        lifespan_app,
        redis=redis_url,
        secret_key=SECRET,
        rooms=[room(rate=3)],
        cookie_secure=False,
        environ={},
    )
    with served(gate) as base:
        progress = asyncio.run(simulate(base + "/checkout", 5, 5, give_up=0.0, max_seconds=30))
    assert (progress.admitted, progress.errors) == (3, 0), progress.last_error
    assert (progress.still_waiting, progress.gave_up) == (2, 0)  # 3 a minute: the run's time was up


def test_virtual_visitors_wait_out_the_client_limit_instead_of_failing(redis_url: str) -> None:
    """All virtual visitors come from one address: past client_limit they are
    answered 429 with Retry-After, and wait as a browser behind a shared
    address would (here the run ends first: they count as still waiting,
    not as errors)."""
    from queuegate import QueueGate, Room
    from queuegate.simulate import simulate

    from .conftest import lifespan_app, served

    sale = Room("sale", paths=["/checkout*"], rate=100, per=1.0, client_limit=3)
    gate = QueueGate(
        lifespan_app, redis=redis_url, secret_key=SECRET, rooms=[sale], cookie_secure=False, environ={}
    )
    with served(gate) as base:
        progress = asyncio.run(simulate(base + "/checkout", 6, 6, give_up=0.0, max_seconds=3))
    assert progress.errors == 0, progress.last_error
    assert progress.admitted == 3
    assert progress.limited >= 3
    assert (progress.still_waiting, progress.gave_up) == (3, 0)
