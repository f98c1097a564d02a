"""Queue tokens (queuegate.tokens): signed as itsdangerous signs them, and read
from the requests' cookies as long as they are valid."""

from __future__ import annotations

import asyncio
import hashlib
import time
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from itsdangerous import TimestampSigner

from queuegate import Room
from queuegate import visitors as visitors_module
from queuegate.tokens import Tokens, _Signer
from queuegate.visitors import Visitor, Visitors, cookie

from .conftest import MakeGate, client_for


@given(
    keys=st.lists(st.text(min_size=1, max_size=40), min_size=1, max_size=3),
    salt=st.text(max_size=30),
    values=st.lists(st.text(max_size=60), min_size=1, max_size=4),
    seconds=st.lists(st.integers(0, 2**40), min_size=1, max_size=4),
)
def test_signatures_are_itsdangerous_own(
    keys: list[str], salt: str, values: list[str], seconds: list[int]
) -> None:
    """The signer that keys its HMAC once and encodes each second once signs
    exactly as itsdangerous's TimestampSigner does, second after second, and
    itsdangerous verifies what it signs."""
    ours = _Signer(keys, salt=salt, digest_method=hashlib.sha256)
    theirs = TimestampSigner(keys, salt=salt, digest_method=hashlib.sha256)
    clock = [0]
    ours.get_timestamp = theirs.get_timestamp = lambda: clock[0]  # type: ignore[method-assign]
    for second in seconds:
        clock[0] = second
        for value in values:
            signed = ours.sign(value)
            assert signed == theirs.sign(value)
            assert theirs.unsign(signed) == value.encode()


def test_a_token_reads_back_and_another_rooms_does_not() -> None:
    tokens = Tokens(["a-secret-key-of-the-gate-0123456789"], 3600)
    token = tokens.issue("sale", "AbCdEfGhIjKlMnOp", until_ms=1234, place=7, seen_ms=99)
    found = tokens.read("sale", token)
    assert found is not None
    assert (found.visitor, found.until_ms, found.place, found.seen_ms) == ("AbCdEfGhIjKlMnOp", 1234, 7, 99)
    assert tokens.read("other", token) is None


# -- cookies read from requests (queuegate.visitors) ------------------------

KEY = "a-secret-key-of-the-gate-0123456789"
ROOM = Room("sale", paths=["/sale"], capacity=10)


def visitors_with(keys: list[str], max_age: int = 3600) -> Visitors:
    return Visitors(Tokens(keys, max_age), None, max_age, False)


def scope_with(*cookie_headers: bytes) -> dict[str, Any]:
    headers = [(b"host", b"shop.example")] + [(b"cookie", value) for value in cookie_headers]
    return {"type": "http", "headers": headers}


def test_a_remembered_header_is_refused_once_its_token_is_too_old(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Cookie header is remembered with the token it carries; the token's
    age still counts: past ``max_age`` it reads as no token, and the header
    is forgotten."""
    visitors = visitors_with([KEY], max_age=60)
    token = visitors.tokens.issue("sale", "AbCdEfGhIjKlMnOp")
    header = f"theme=dark; qg_sale={token}".encode()
    found = visitors.token(ROOM, scope_with(header))
    assert found is not None
    assert found.visitor == "AbCdEfGhIjKlMnOp"
    assert len(visitors._known) == 1
    now = time.time()
    monkeypatch.setattr(time, "time", lambda: now + 30)
    assert visitors.token(ROOM, scope_with(header)) == found
    monkeypatch.setattr(time, "time", lambda: now + 61)
    assert visitors.token(ROOM, scope_with(header)) is None
    assert visitors.anonymous(ROOM, scope_with(header)) is None
    assert not visitors._known


def test_remembered_headers_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """A client that sends a valid token in ever new headers fills at most
    ``KNOWN_HEADERS`` entries; a header longer than ``MAX_KNOWN_HEADER`` is
    read, not remembered."""
    monkeypatch.setattr(visitors_module, "KNOWN_HEADERS", 5)
    visitors = visitors_with([KEY])
    token = visitors.tokens.issue("sale", "AbCdEfGhIjKlMnOp")
    for n in range(12):
        found = visitors.token(ROOM, scope_with(f"n={n}; qg_sale={token}".encode()))
        assert found is not None
        assert found.visitor == "AbCdEfGhIjKlMnOp"
        assert 1 <= len(visitors._known) <= 5
    visitors._known.clear()
    long = f"junk={'x' * visitors_module.MAX_KNOWN_HEADER}; qg_sale={token}".encode()
    found = visitors.token(ROOM, scope_with(long))
    assert found is not None
    assert found.visitor == "AbCdEfGhIjKlMnOp"
    assert not visitors._known


def test_a_remembered_header_follows_the_keys() -> None:
    """Keys are a gate's own: under new keys (the old one retired) the same
    header reads as no token; with the old key kept for verifying, it reads
    as before. Invalid tokens are never remembered."""
    old = visitors_with(["the-old-key-0123456789abcdef"])
    token = old.tokens.issue("sale", "AbCdEfGhIjKlMnOp")
    header = f"qg_sale={token}".encode()
    assert old.token(ROOM, scope_with(header)) is not None
    assert visitors_with([KEY]).token(ROOM, scope_with(header)) is None
    rotated = visitors_with([KEY, "the-old-key-0123456789abcdef"])
    found = rotated.token(ROOM, scope_with(header))
    assert found is not None
    assert found.visitor == "AbCdEfGhIjKlMnOp"
    # A token of the right key with one letter of its visitor changed (its
    # last letters may encode the same signature bytes: a middle one).
    checked = visitors_with(["the-old-key-0123456789abcdef"])
    at = header.index(b"AbCd") + 2
    tampered = header[:at] + (b"X" if header[at : at + 1] != b"X" else b"Y") + header[at + 1 :]
    assert checked.token(ROOM, scope_with(tampered)) is None
    assert not checked._known
    assert checked.token(ROOM, scope_with(header)) is not None  # the same header, untouched


def test_the_last_cookie_of_the_room_counts_in_one_header_or_several() -> None:
    """As the frameworks' parsers: the last value of the room's cookie,
    across several Cookie headers too (HTTP/2 may split them), within its
    double quotes if it has them (an auditor's finding)."""
    visitors = visitors_with([KEY])
    first = visitors.tokens.issue("sale", "FirstVisitor0000")
    last = visitors.tokens.issue("sale", "LastVisitor00000")
    for scope in (
        scope_with(f"qg_sale={first}; qg_sale={last}".encode()),
        scope_with(f"qg_sale={first}".encode(), f"qg_sale={last}".encode()),
        scope_with(f"qg_sale={first}".encode(), b"theme=dark", f" qg_sale = {last} ".encode()),
        # Quoted (RFC 6265 allows it; Starlette reads the value within): it
        # was no cookie, and the visitor a newcomer at each request.
        scope_with(f'qg_sale={first}; qg_sale="{last}"'.encode()),
    ):
        for _ in range(2):  # read, then remembered
            found = visitors.token(ROOM, scope)
            assert found is not None
            assert found.visitor == "LastVisitor00000"
            assert cookie(scope, ROOM.cookie) == last


@pytest.mark.anyio
async def test_processes_with_different_secret_keys_are_said_in_the_log(
    make_gate: MakeGate, caplog: pytest.LogCaptureFixture
) -> None:
    """A visitor moving between two processes that sign with different keys
    loses their place at each move (each process takes the other's cookie
    for none): a launch-wrecking mistake that was silent. The process that
    meets a cookie signed with no key of its own says so in the log, once a
    minute at most; an expired, malformed or missing cookie is not that."""
    room = Room("sale", paths=["/checkout*"], rate=1, per=3600, client_limit=0)
    one = await make_gate(rooms=[room], secret_key="a-key-of-process-one-0123456789")
    two = await make_gate(rooms=[room], secret_key="a-key-of-process-two-0123456789")
    same = await make_gate(rooms=[room], secret_key="a-key-of-process-one-0123456789")
    name = room.cookie.decode()
    cookies = []
    async with client_for(one) as first:
        assert (await first.get("/checkout")).status_code == 200  # the hour's one admission
    for _ in range(3):
        async with client_for(one) as visitor:
            assert (await visitor.get("/checkout")).status_code == 503
            cookies.append({"cookie": f"{name}={visitor.cookies[name]}", "accept": "application/json"})
    async with client_for(same) as moved:
        assert (await moved.get("/checkout", headers=cookies[0])).json()["ahead"] == 0  # the same place
    assert same.tokens.foreign == 0
    assert "none of this process's secret keys" not in caplog.text
    for headers in cookies:
        async with client_for(two) as moved:
            answer = await moved.get("/checkout", headers=headers)
            assert answer.json()["ahead"] >= 3  # a new place at the back: the cookie counted as none
    assert two.tokens.foreign == 3  # each cookie once, though a request may read it twice
    said = [r.getMessage() for r in caplog.records if "none of this process's secret keys" in r.getMessage()]
    assert len(said) == 1, said  # once a minute at most
    assert said[0].startswith("queuegate: 1 cookie(s) since the last such message (this one of room 'sale')")
    assert "give every process the same key" in said[0]
    assert two.tokens.read("sale", "not-a-token") is None  # malformed: not counted
    expired = Tokens(["a-key-of-process-two-0123456789"], 0)
    old = two.tokens.issue("sale", "E" * 16)
    await asyncio.sleep(1.1)
    assert expired.read("sale", old) is None  # ours, expired: not counted
    assert (two.tokens.foreign, expired.foreign) == (3, 0)


def test_a_visitor_read_from_a_cookie_has_each_value_in_its_field() -> None:
    """Visitors.read makes its Visitor with the fields by position (keywords
    cost a dict on every poll and join): each of the token's values, and the
    client's binding, must land in its own field."""
    visitors = Visitors(Tokens([KEY], 3600), None, 3600, False, bind=("user_agent",))
    binding = visitors.tokens.fingerprint(b"|an agent")
    token = visitors.tokens.issue("sale", "AbCdEfGhIjKlMnOp", None, 1234, binding, 7, 99)
    scope = scope_with(f"qg_sale={token}".encode())
    scope["headers"].append((b"user-agent", b"an agent"))
    expected = Visitor("AbCdEfGhIjKlMnOp", None, until_ms=1234, binding=binding, place=7, seen_ms=99)
    assert asyncio.run(visitors.read(ROOM, scope)) == expected
    newcomer = scope_with()
    newcomer["headers"].append((b"user-agent", b"an agent"))
    assert asyncio.run(visitors.read(ROOM, newcomer)) == Visitor(None, None, binding=binding)


def test_the_fields_built_by_position_are_where_their_callers_put_them() -> None:
    """Visitors.read and outcomes.waiting build these by position (a
    dataclass called with keywords costs twice the instructions): a field
    added, removed or moved would shift values unseen, so a change here
    must come with a look at those calls."""
    from dataclasses import fields

    from queuegate.outcomes import Outcome

    assert [f.name for f in fields(Visitor)] == [
        "visitor", "user_hash", "refused", "unbound", "until_ms", "binding", "place", "seen_ms",
    ]  # fmt: skip
    assert [f.name for f in fields(Outcome)] == [
        "state", "now_ms", "visitor", "expires_ms", "rank", "line", "eta_ms", "poll_ms", "joined",
        "method", "opens_at_ms", "seed_sha256", "difficulty", "copyable", "place", "seen_ms", "in_line",
    ]  # fmt: skip
