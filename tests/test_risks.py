"""What a change risks (queuegate.risks), from a room's figures before and
after it: the console's and the back office's warnings, said in full in
tests/test_cli.py and tests/test_admin.py; here, the cases around them."""

from __future__ import annotations

from typing import Any

from queuegate.risks import risks

ROOM = {
    "rate": 10,
    "per": 1000,
    "waiting": 0,
    "active": 0,
    "capacity": 0,
    "session": 600_000,
    "sliding": 0,
    "status": "open",
    "prequeue": 0,
}


def room(**figures: Any) -> dict[str, Any]:
    return {**ROOM, **figures}


def test_a_raise_under_ten_times_or_from_no_rate_is_not_a_risk() -> None:
    assert risks(room(), room(rate=99)) == []
    assert risks(room(rate=0, capacity=50), room(rate=1000)) == []  # no rate before to compare with
    assert risks(room(rate=100), room(rate=10)) == []


def test_a_raise_says_how_soon_the_line_is_let_in() -> None:
    (said,) = risks(room(waiting=25_000), room(rate=1000, per=2000))
    assert said == (
        "rate 1,000 per 2 s lets in 50 times as many a second as before (10 per 1 s); "
        "the 25,000 visitors waiting can all be in within 25 refills (50 s)"
    )
    # Where more than the rate decides it, the raise alone is said.
    for other in ({"capacity": 50}, {"status": "paused"}, {"prequeue": 1}):
        (said,) = risks(room(waiting=25_000), room(rate=1000, **other))
        assert said == "rate 1,000 per 1 s lets in 100 times as many a second as before (10 per 1 s)", other
    (said,) = risks(room(waiting=1), room(rate=100))
    assert said.endswith("(10 per 1 s); the 1 visitor waiting can be in at the next refill")
    (said,) = risks(room(), room(rate=100))
    assert said == "rate 100 per 1 s lets in 10 times as many a second as before (10 per 1 s)"


def test_a_rate_taken_away_is_said() -> None:
    (said,) = risks(room(capacity=40), room(rate=0, capacity=40))
    assert said == "rate 0: no limit by rate; only the capacity (40 at once) bounds who is let in"
    assert risks(room(rate=0, capacity=40), room(rate=0, capacity=30)) == []  # none before either


def test_a_short_session_is_said_once_and_a_sliding_one_as_such() -> None:
    assert risks(room(), room(session=30_000)) == []
    assert risks(room(session=5000), room(session=5000)) == []  # as it was
    (said,) = risks(room(), room(session=1500, sliding=1))
    assert said == (
        "session 1.5 s: each visitor admitted from now on must queue again 1.5 s after coming in, "
        "or after that long without a request (sliding)"
    )


def test_the_controller_taking_another_setting_is_said() -> None:
    before = room(rate=10, capacity=20, controlled="rate")
    no_rate = "rate 0: no limit by rate; only the capacity (20 at once) bounds who is let in"
    assert risks(before, room(rate=0, capacity=20, controlled="capacity")) == [
        no_rate,
        "the health controller now holds the capacity (20) and moves it from now on",
    ]
    assert risks(before, room(rate=0, capacity=20, controlled="")) == [no_rate]  # pinned: nobody moves it
    assert risks(room(controlled=""), room(controlled="rate")) == []  # given back (--auto)


def test_only_a_capacity_lowered_under_those_inside_is_a_risk() -> None:
    assert risks(room(active=80, capacity=100), room(active=80, capacity=90)) == []
    assert risks(room(active=80, capacity=0), room(active=80, capacity=200)) == []
    assert risks(room(active=80, capacity=50), room(active=80, capacity=60)) == []  # raised, still under
    (said,) = risks(room(active=80, capacity=100), room(active=80, capacity=20))
    assert said == "capacity 20 with 80 sessions active: nobody new is let in until 61 sessions end"


def test_a_per_that_changes_what_the_controllers_ceiling_means_is_said() -> None:
    """The controller's ceiling (a payment provider's quota, say) is a
    number of the room's units: a `--per` changed at run time left it the
    same number of a new interval, 60 times the limit after `--per 1` on a
    room counting a minute, without a word."""
    before = room(rate=300, per=60_000, ceiling=600, target_ms=400)
    (said,) = risks(before, room(rate=5, per=1000, ceiling=600, target_ms=400))
    assert said == (
        "the controller's ceiling 600 is now per 1 s (it was per 60 s): 600 a second at most, where it was"
        " 10; give --ceiling with --per to keep the limit"
    )
    assert risks(before, room(rate=5, per=1000, ceiling=10, target_ms=400)) == []  # given with it
    assert risks(before, room(rate=600, per=60_000, ceiling=600, target_ms=400)) == []  # the same per
    assert risks(before, room(rate=5, per=1000, ceiling=0, target_ms=400)) == []  # no ceiling
    assert risks(before, room(rate=5, per=1000, ceiling=600, target_ms=0)) == []  # no controller
