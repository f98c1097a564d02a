"""Queue tokens (queuegate.tokens): signed as itsdangerous signs them."""

from __future__ import annotations

import hashlib

from hypothesis import given
from hypothesis import strategies as st
from itsdangerous import TimestampSigner

from queuegate.tokens import Tokens, _Signer


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
