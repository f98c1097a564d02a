"""Every visitor's language: catalogs, plural rules, negotiation, and every
page the gate serves in every shipped language."""

from __future__ import annotations

import html
import re
import time
from importlib.resources import files

import pytest
from babel.messages.pofile import read_po
from babel.numbers import format_decimal
from hypothesis import given, settings
from hypothesis import strategies as st

from queuegate import QueueGate, Room
from queuegate.embedded import free_port
from queuegate.i18n import LANGUAGES, language_for, negotiate
from queuegate.pages import Pages
from queuegate.settings import ConfigError
from queuegate.store import Outcome
from queuegate.texts import LOTTERY_AHEAD, MESSAGES, RETRYING, TAB_TITLE, TEXTS

from .conftest import MakeGate, call_asgi, http_scope

pytestmark = pytest.mark.anyio

NOW = 1_763_700_000_000
PLURAL_TEXTS = [
    ("about {num} second", "about {num} seconds"),
    ("about {num} minute", "about {num} minutes"),
    ("about {num} hour", "about {num} hours"),
    ("{num} person", "{num} people"),
]
SINGULAR_TEXTS = [
    *TEXTS.values(),
    *(text for pair in MESSAGES.values() for text in pair),
    LOTTERY_AHEAD,
    RETRYING,
    TAB_TITLE,
    "unknown for now",
    "paused for now; your place is kept",
    "a few seconds",
    "nobody: you are next",
]


def catalog(code: str):  # type: ignore[no-untyped-def]
    path = files("queuegate").joinpath("locales", code, "LC_MESSAGES", "queuegate.po")
    with path.open("rb") as po:
        return read_po(po, locale=code)


def test_the_template_has_every_text_the_catalogs_have() -> None:
    """A new text put in the catalogs and not in the template (the paused
    line's) would be marked obsolete in every catalog by the next
    ``pybabel update``, and the pages would fall back to English."""
    with files("queuegate").joinpath("locales", "queuegate.pot").open("rb") as pot:
        template = {message.id if isinstance(message.id, str) else message.id[0] for message in read_po(pot)}
    for code in LANGUAGES:
        found = {message.id if isinstance(message.id, str) else message.id[0] for message in catalog(code)}
        assert found - {""} == template - {""}, code


@pytest.mark.parametrize("code", LANGUAGES)
def test_every_text_the_pages_use_is_translated(code: str) -> None:
    found = catalog(code)
    for text in SINGULAR_TEXTS:
        message = found.get(text)
        assert message is not None, f"{code}: no entry for {text!r}"
        assert message.string, f"{code}: no translation of {text!r}"
        for placeholder in re.findall(r"\{\w+\}", text):
            assert placeholder in message.string, f"{code}: {placeholder} lost in {message.string!r}"
    for singular, _ in PLURAL_TEXTS:
        message = found.get(singular)
        assert message is not None, f"{code}: no plural entry {singular!r}"
        forms = message.string
        assert len(forms) == found.num_plurals, f"{code}: {forms!r}"
        assert all(forms), f"{code}: {forms!r}"


# The people ahead, as a visitor reads them, for 1, 2, 5 and 21: each
# language's own plural rules (Arabic has six forms, French counts 0 and 1
# as singular, East Asian languages have one).
AHEAD = {
    "en": ["1 person", "2 people", "5 people", "21 people"],
    "de": ["1 Person", "2 Personen", "5 Personen", "21 Personen"],
    "fr": ["1 personne", "2 personnes", "5 personnes", "21 personnes"],
    "es": ["1 persona", "2 personas", "5 personas", "21 personas"],
    "ko": ["1명", "2명", "5명", "21명"],
    "ja": ["1人", "2人", "5人", "21人"],
    "zh_Hans": ["1 人", "2 人", "5 人", "21 人"],
    "he": ["אדם אחד", "2 אנשים", "5 אנשים", "21 אנשים"],
    "pl": ["1 osoba", "2 osoby", "5 osób", "21 osób"],
    "pt_BR": ["1 pessoa", "2 pessoas", "5 pessoas", "21 pessoas"],
    "tr": ["1 kişi", "2 kişi", "5 kişi", "21 kişi"],
}


@pytest.mark.parametrize("code", sorted(AHEAD))
def test_plural_forms_for_1_2_5_and_21(code: str) -> None:
    language = language_for(code)
    assert [language.ahead_text(n) for n in (1, 2, 5, 21)] == AHEAD[code]


@settings(max_examples=300, deadline=None)
@given(value=st.one_of(st.integers(0, 10**12), st.sampled_from([0, 9, 999, 1000, 9999, 10**4, 10**6 - 1])))
def test_numbers_read_as_babel_writes_them_in_every_language(value: int) -> None:
    # Counts take a quick path past Babel (queuegate.i18n.Language._number).
    for code in LANGUAGES:
        language = language_for(code)
        assert language.number(value) == format_decimal(value, locale=language.locale), code


@given(counts=st.lists(st.integers(0, 10**12), min_size=1, max_size=30), codes=st.permutations(LANGUAGES))
def test_the_waiting_pages_escaped_numbers_are_the_texts_escaped(counts: list[int], codes: list[str]) -> None:
    """A newcomer's place and people ahead are made escaped (each language
    keeps the escaped text of each plural form): the same as escaping the
    texts, in every language, whatever count and language came before (a
    form kept by the wrong key would give one language's or form's text
    to another)."""
    import html

    for count in [*counts, 0, 1, 2, 3, 5, 11, 21, 22, 25, 101, 102, 111]:
        for code in codes:
            language = language_for(code)
            assert language.ahead_html(count) == html.escape(language.ahead_text(count))
            assert language.number_html(count) == html.escape(language.number(count))
            # Both are ngettext's form with the count put in (Language.plural).
            assert language.ahead_text(count) == (
                language.plural("{num} person", "{num} people", count) if count else language.ahead_text(0)
            )


@given(
    etas=st.lists(st.integers(-1, 10**11), min_size=1, max_size=30),
    codes=st.permutations(LANGUAGES),
)
def test_the_estimates_are_the_catalogs_texts_and_escaped_alike(etas: list[int], codes: list[str]) -> None:
    """An estimate's text is ngettext's form for its count with the count in
    (each language keeps its forms by the key of ngettext's choice), and its
    escaped text the text escaped, whatever came before."""
    import html
    import math

    for eta_ms in [*etas, -1, 0, 10_000, 10_001, 59_999, 60_000, 61_000, 120_000, 89 * 60_000, 5_400_001]:
        for code in codes:
            language = language_for(code)
            text = language.eta_text(eta_ms)
            assert language.eta_html(eta_ms) == html.escape(text)
            if eta_ms <= 10_000:
                continue
            minutes = math.ceil(eta_ms / 60_000)
            if eta_ms < 60_000:
                unit, count = "second", math.ceil(eta_ms / 10_000) * 10
            elif minutes < 90:
                unit, count = "minute", minutes
            else:
                unit, count = "hour", math.ceil(minutes / 60)
            assert text == language.plural(f"about {{num}} {unit}", f"about {{num}} {unit}s", count)


def test_arabic_has_its_six_plural_forms() -> None:
    arabic = language_for("ar")
    five, twenty_one, hundred = (arabic.number(n) for n in (5, 21, 100))
    assert [arabic.ahead_text(n) for n in (1, 2, 5, 21, 100)] == [
        "شخص واحد",
        "شخصان",
        f"{five} أشخاص",
        f"{twenty_one} شخصًا",
        f"{hundred} شخص",
    ]
    assert arabic.eta_text(120_000) == "نحو دقيقتين"


@pytest.mark.parametrize(
    ("header", "code"),
    [
        ("ko-KR,ko;q=0.9,en-US;q=0.8,en;q=0.7", "ko"),
        ("en-GB,en;q=0.9", "en"),
        ("fr-CA;q=0.5, de;q=0.9", "de"),
        ("zh-TW", "zh_Hant"),
        ("zh-Hant-HK", "zh_Hant"),
        ("zh-HK", "zh_Hant"),
        ("zh-CN,zh;q=0.9", "zh_Hans"),
        ("zh-Hans-SG", "zh_Hans"),
        ("ar-EG", "ar"),
        ("iw", "he"),
        ("pt-PT", "pt_BR"),
        ("pl-PL,pl;q=0.9", "pl"),
        ("vi-VN", "vi"),
        ("th", "th"),
        ("in", "id"),
        ("xx-YY, *;q=0.1", "en"),
        ("sw;q=1, ja;q=0.2", "ja"),
        ("ja;q=0, es", "es"),
        (";;;,,=q", "en"),
        ("de;q=abc, fr", "fr"),
        ("x" * 10_000, "en"),
    ],
)
def test_the_visitors_language_comes_from_accept_language(header: str, code: str) -> None:
    assert negotiate(header[:200]) == code


def pages_of(language_code: str) -> dict[str, str]:
    language = language_for(language_code)
    pages = Pages(503)
    out = {}
    for method in ("fifo", "random"):
        outcome = Outcome("waiting", NOW, "v", rank=4, line=9, eta_ms=42_000, poll_ms=5000, method=method)
        page = pages.waiting(
            "Sale", "sale", outcome, status_url="/s", leave_url="/l", as_json=False, language=language
        )
        out[f"waiting-{method}"] = page.body.decode()
    early = Outcome(
        "prequeue", NOW, "v", line=3, poll_ms=5000, opens_at_ms=NOW + 600_000, seed_sha256="ab" * 32
    )
    out["prequeue"] = pages.waiting(
        "Sale", "sale", early, status_url="/s", leave_url="/l", as_json=False, language=language
    ).body.decode()
    for kind in MESSAGES:
        page = pages.message(kind, "sale", status=503, as_json=False, retry_after=5, language=language)
        out[kind] = page.body.decode()
    challenge = {"algorithm": "SHA-256", "challenge": "ab" * 32, "maxNumber": 5, "salt": "s"}
    out["challenge"] = pages.challenge(
        "Sale", "sale", challenge, join_url="/j", as_json=False, language=language
    ).body.decode()
    return out


@pytest.mark.parametrize("code", LANGUAGES)
def test_every_page_in_every_language(code: str) -> None:
    language = language_for(code)
    english = pages_of("en")
    for name, body in pages_of(code).items():
        assert f'<html lang="{language.tag}" dir="{language.dir}">' in body, name
        assert not re.search(r"\$\{?[A-Za-z_]", body), f"{code} {name}: a placeholder was left"
        assert "{seconds}" not in body, name
        assert "{num}" not in body, name
        if code != "en":
            # None of the English page's own texts is left (the room's title
            # and values aside).
            english_texts = (
                "You are in line<",
                "Leave the line<",
                "Opening soon<",
                ">Stop<",
                "Trying again in",
                "Checking your browser<",
                "needs JavaScript",
            )
            for text in english_texts:
                assert text not in body or text not in english[name], f"{code} {name}: {text!r} untranslated"
    assert language.dir == ("rtl" if code in ("ar", "he") else "ltr")


async def test_the_gate_answers_in_the_visitors_language(make_gate: MakeGate) -> None:
    rooms = [
        Room(
            "sale", paths=["/checkout*"], rate=1, per=3600, client_limit=0, title={"en": "Sale", "ko": "세일"}
        ),
        Room("fixed", paths=["/fixed*"], rate=1, per=3600, client_limit=0, language="ja"),
    ]
    gate: QueueGate = await make_gate(rooms=rooms)
    await call_asgi(gate, http_scope("/checkout"))
    await call_asgi(gate, http_scope("/fixed"))
    korean = [(b"accept-language", b"ko-KR,ko;q=0.9,en;q=0.8")]
    status, headers, body = await call_asgi(gate, http_scope("/checkout", headers=korean))
    page = body.decode()
    assert status == 503
    assert headers["content-language"] == "ko"
    assert '<html lang="ko" dir="ltr">' in page
    assert "대기 중입니다" in page
    assert "세일" in page
    as_json = [*korean, (b"accept", b"application/json")]
    _, _, body = await call_asgi(gate, http_scope("/checkout", headers=as_json))
    assert b'"language":"ko"' in body
    assert '"ahead_text":"1명"'.encode() in body  # the people ahead, in Korean
    _, headers, body = await call_asgi(gate, http_scope("/fixed", headers=korean))
    assert headers["content-language"] == "ja"  # the room's own language
    assert "順番待ち".encode() in body
    arabic = [(b"accept-language", b"ar")]
    _, _, body = await call_asgi(gate, http_scope("/checkout", headers=arabic))
    assert '<html lang="ar" dir="rtl">' in body.decode()
    assert "Sale" in body.decode()  # the English title: none was given in Arabic
    fixed = await make_gate(rooms=rooms[:1], language="de")
    _, headers, _ = await call_asgi(fixed, http_scope("/checkout", headers=korean))
    assert headers["content-language"] == "de"


async def test_a_room_without_a_title_shows_visitors_no_name(make_gate: MakeGate) -> None:
    """A room's name is the operator's ("checkout", "drop-7f3a"): without a
    title, the waiting, prequeue and challenge pages showed it under their
    heading and in the tab's title. They show none now, in every language;
    a title given is shown, in the visitor's language."""
    headings = {
        "internal-line": "in_line",
        "internal-drop": "opening_soon",
        "internal-check": "check_heading",
    }
    rooms = [
        Room("internal-line", paths=["/internal-line"], rate=1, per=3600, client_limit=0),
        Room("internal-drop", paths=["/internal-drop"], rate=1, client_limit=0, opens_at=time.time() + 3600),
        Room("internal-check", paths=["/internal-check"], rate=1, client_limit=0, challenge=1000),
        Room(
            "sale",
            paths=["/sale"],
            rate=1,
            per=3600,
            client_limit=0,
            title={"en": "Summer sale", "ar": "تخفيضات الصيف"},
        ),
    ]
    gate = await make_gate(rooms=rooms)
    await call_asgi(gate, http_scope("/internal-line"))  # the hour's one admission
    await call_asgi(gate, http_scope("/sale"))
    for code in LANGUAGES:
        language = [(b"accept-language", code.encode())]
        for name, heading in headings.items():
            status, _, body = await call_asgi(gate, http_scope(f"/{name}", headers=language))
            page, where = body.decode(), (code, name)
            assert status == 503, where
            assert f"<title>{html.escape(language_for(code).text(TEXTS[heading]))}</title>" in page, where
            assert 'class="room"' not in page, where
            assert "$" not in page.split("<script>")[0], where  # no placeholder left
            assert name not in re.sub(r"<[^>]*>", "", page), where  # in no text a visitor sees
    for code, title in (("en", "Summer sale"), ("ar", "تخفيضات الصيف")):
        _, _, body = await call_asgi(gate, http_scope("/sale", headers=[(b"accept-language", code.encode())]))
        page = body.decode()
        assert f"<title>{html.escape(language_for(code).text(TEXTS['in_line']))}: {title}</title>" in page
        assert f'<p class="room">{title}</p>' in page


async def test_the_tab_title_is_punctuated_as_the_language_does(make_gate: MakeGate) -> None:
    """The heading and the room's title are joined by each language's own
    pattern (TAB_TITLE), not by an English ": ": French puts a no-break
    space before the colon, Chinese and Japanese a full-width colon."""
    room = Room("sale", paths=["/sale"], rate=1, per=3600, client_limit=0, title="Soldes <d'été>")
    gate = await make_gate(rooms=[room])
    await call_asgi(gate, http_scope("/other"))
    await call_asgi(gate, http_scope("/sale"))  # the hour's one admission
    joined_by = {"fr": "\u00a0: ", "ja": "\uff1a", "zh_Hans": "\uff1a", "de": ": ", "ar": ": "}
    for code, between in joined_by.items():
        heading = html.escape(language_for(code).text(TEXTS["in_line"]))
        _, _, body = await call_asgi(gate, http_scope("/sale", headers=[(b"accept-language", code.encode())]))
        assert f"<title>{heading}{between}Soldes &lt;d&#x27;été&gt;</title>" in body.decode(), code


def test_a_language_that_is_not_shipped_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="language"):
        Room("sale", paths=["/x"], rate=1, language="klingon")
    with pytest.raises(ConfigError, match="title language"):
        Room("sale", paths=["/x"], rate=1, title={"xx": "?"})


async def test_a_short_page_names_the_room_by_its_title(make_gate: MakeGate) -> None:
    """The short pages (Redis away, a room closed, a visitor refused) name
    the room as the waiting page does: its title under the heading and in
    the tab, in the visitor's language, escaped; an untitled room by no name
    (its name is the operator's)."""
    rooms = [
        Room("sale", paths=["/sale"], rate=1, title={"en": "Summer <sale>", "ar": "تخفيضات الصيف"}),
        Room("internal-line", paths=["/plain"], rate=1),
    ]
    gate = await make_gate(rooms=rooms, redis=f"redis://127.0.0.1:{free_port()}", timeout=0.3)
    for code, title in (("en", "Summer &lt;sale&gt;"), ("ar", "تخفيضات الصيف")):
        language = language_for(code)
        asked = [(b"accept-language", code.encode())]
        status, _, body = await call_asgi(gate, http_scope("/sale", headers=asked))
        page, heading = body.decode(), html.escape(language.text(MESSAGES["unavailable"][0]))
        assert status == 503, page
        assert f'<p class="room">{title}</p>' in page, code
        tab = html.escape(language.text(TAB_TITLE)).format(heading=heading, title=title)
        assert f"<title>{tab}</title>" in page, code
    status, _, body = await call_asgi(gate, http_scope("/plain"))
    assert status == 503
    assert 'class="room"' not in body.decode()
    assert "internal-line" not in re.sub(r"<[^>]*>", "", body.decode())
