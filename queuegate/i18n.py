"""Every visitor's language: the built-in pages' texts from gettext catalogs.

Catalogs live in ``queuegate/locales/<language>/LC_MESSAGES/queuegate.po``
(compiled in memory by Babel when a language is first used, so no binary
files are kept). A request's language comes from its ``Accept-Language``
(or is fixed by the gate's or a room's ``language``); plural rules come from
each catalog, numbers and times are formatted by Babel for the language.
Texts are whole sentences with named placeholders, never assembled from
fragments.
"""

from __future__ import annotations

import html
import io
import math
import re
from collections.abc import Callable
from datetime import UTC, datetime
from functools import cache, lru_cache
from importlib.resources import files
from typing import NamedTuple

from babel import Locale
from babel.dates import format_time
from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po
from babel.numbers import format_decimal, get_group_symbol
from babel.support import Translations

from .outcomes import PAUSED_ETA

__all__ = ["DEFAULT", "LANGUAGES", "N_", "Language", "language_for", "negotiate"]

DEFAULT = "en"
# The languages shipped, as catalog folder names.
LANGUAGES = (
    "en", "ko", "ja", "zh_Hans", "zh_Hant", "es", "pt_BR", "fr", "de", "it",
    "nl", "pl", "tr", "id", "th", "vi", "ar", "he",
)  # fmt: skip
MAX_ACCEPT_LANGUAGE = 200  # bytes of the header that are read (and cached by)


def _pieces(form: str) -> tuple[str, ...]:
    """A plural form cut at its count (``{num}``), when putting the count in
    is all ``str.format`` would do to it (a join of the pieces costs a
    tenth of a format); else ``()``: formatted each time."""
    pieces = tuple(form.split("{num}"))
    return () if any("{" in piece or "}" in piece for piece in pieces) else pieces


def N_(message: str) -> str:  # the gettext name for "translate later"
    """Marks a text for the catalogs where it is defined; translated when used."""
    return message


class _Form(NamedTuple):
    """A plural form of a catalog's text, and escaped; each cut at its count
    (see ``_pieces``)."""

    text: str
    pieces: tuple[str, ...]
    html: str
    html_pieces: tuple[str, ...]


class Language:
    """One language's texts and formats."""

    def __init__(self, code: str) -> None:
        self.code = code
        locale = Locale.parse(code)
        self.locale = locale
        # The lang attribute: BCP 47 (zh-Hans, pt-BR).
        self.tag = code.replace("_", "-")
        self.dir = "rtl" if locale.character_order == "right-to-left" else "ltr"
        source = files(__package__).joinpath("locales", code, "LC_MESSAGES", "queuegate.po")
        with source.open("rb") as po:
            catalog = read_po(po, locale=code)
        compiled = io.BytesIO()
        write_mo(compiled, catalog)
        compiled.seek(0)
        self._translations = Translations(compiled)
        self.clock: Callable[[int], str] = lru_cache(maxsize=16)(self._clock)
        # A count in the usual pattern (groups of three, Latin digits) is
        # Python's grouping with the language's separator, as Babel makes it
        # (checked against Babel for every language by the tests) in a tenth
        # of a microsecond; anything else is left to Babel.
        pattern = locale.decimal_formats.get(None)
        usual = pattern is not None and pattern.pattern == "#,##0.###"
        latin = locale.default_numbering_system == "latn"
        self._group = get_group_symbol(locale=locale) if usual and latin else None
        # Babel's formatting costs about 10 µs a number, and every poll
        # shows a place and an estimate: the texts are cached, as pure
        # functions of their values (places repeat as a line moves through
        # them; estimates are rounded to a few dozen texts).
        self.number: Callable[[int], str] = lru_cache(maxsize=4096)(self._number)
        # An estimate's text, and as HTML: new counts (a long line's hours,
        # each newcomer's own) are the count put into its plural form, each
        # form looked up in the catalog once (by the key ngettext's choice
        # depends on, as for the people ahead below).
        self._counted: Callable[[str, str, int], str] = lru_cache(maxsize=4096)(self._count_text)
        self._counted_html: Callable[[str, str, int], str] = lru_cache(maxsize=4096)(self._count_html)
        self._forms: dict[tuple[str, str, int, bool], _Form] = {}
        # The waiting page's place and people ahead, HTML-escaped, for a
        # newcomer's new numbers (the caches above miss every time in a
        # storm of joins): a count in the usual pattern needs no escaping
        # when its separator needs none, and the people ahead are the escaped
        # plural form of the count (see _form) with the count put in.
        self._group_html = self._group if self._group == html.escape(self._group or "") else None
        # The texts without a number, translated once.
        self._nobody = self.text(N_("nobody: you are next"))
        self._nobody_html = html.escape(self._nobody)
        self._unknown = self.text(N_("unknown for now"))
        self._paused = self.text(N_("paused for now; your place is kept"))
        self._few_seconds = self.text(N_("a few seconds"))
        self._unknown_html = html.escape(self._unknown)
        self._paused_html = html.escape(self._paused)
        self._few_seconds_html = html.escape(self._few_seconds)

    def text(self, message: str, **values: object) -> str:
        translated = self._translations.gettext(message)
        return translated.format(**values) if values else translated

    def plural(self, singular: str, plural: str, count: int, **values: object) -> str:
        translated = self._translations.ngettext(singular, plural, count)
        return translated.format(num=self.number(count), **values)

    def _number(self, value: int) -> str:
        if self._group is not None and value >= 0:
            return f"{value:,}".replace(",", self._group)
        return format_decimal(value, locale=self.locale)

    def _clock(self, second: int) -> str:
        moment = datetime.fromtimestamp(second, UTC)
        return format_time(moment, "medium", tzinfo=UTC, locale=self.locale) + " UTC"

    def _form(self, singular: str, plural: str, count: int) -> _Form:
        """The catalog's text for ``count`` (what ngettext gives), and escaped.
        ngettext's text depends on the count's plural form, and on whether
        it is 1 when the catalog lacks the message: the key of the form.
        Escaping leaves braces alone, and a count has nothing to escape but
        its separator: the escaped form with the count put in is the text
        escaped."""
        key = (singular, plural, self._translations.plural(count), count == 1)
        form = self._forms.get(key)
        if form is None:
            message = self._translations.ngettext(singular, plural, count)
            escaped = html.escape(message)
            form = self._forms[key] = _Form(message, _pieces(message), escaped, _pieces(escaped))
        return form

    def _count_text(self, singular: str, plural: str, count: int) -> str:
        """``self.plural(singular, plural, count)``."""
        form = self._form(singular, plural, count)
        number = self.number(count)
        return number.join(form.pieces) if form.pieces else form.text.format(num=number)

    def _count_html(self, singular: str, plural: str, count: int) -> str:
        """``html.escape(self.plural(singular, plural, count))`` (see _form)."""
        form = self._form(singular, plural, count)
        number = self.number_html(count)
        return number.join(form.html_pieces) if form.html_pieces else form.html.format(num=number)

    def eta_text(self, eta_ms: int) -> str:
        """The estimate as people read it; never more precise than it is."""
        return self._eta(eta_ms, self._counted, self._unknown, self._paused, self._few_seconds)

    def eta_html(self, eta_ms: int) -> str:
        """``html.escape(self.eta_text(eta_ms))``."""
        return self._eta(
            eta_ms, self._counted_html, self._unknown_html, self._paused_html, self._few_seconds_html
        )

    @staticmethod
    def _eta(
        eta_ms: int, counted: Callable[[str, str, int], str], unknown: str, paused: str, few_seconds: str
    ) -> str:
        if eta_ms < 0:
            return paused if eta_ms == PAUSED_ETA else unknown
        if eta_ms <= 10_000:
            return few_seconds
        if eta_ms < 60_000:
            tens = math.ceil(eta_ms / 10_000) * 10
            return counted(N_("about {num} second"), N_("about {num} seconds"), tens)
        minutes = math.ceil(eta_ms / 60_000)
        if minutes < 90:
            return counted(N_("about {num} minute"), N_("about {num} minutes"), minutes)
        hours = math.ceil(minutes / 60)
        return counted(N_("about {num} hour"), N_("about {num} hours"), hours)

    def ahead_text(self, ahead: int) -> str:
        if ahead == 0:
            return self._nobody
        return self._counted(N_("{num} person"), N_("{num} people"), ahead)

    def number_html(self, value: int) -> str:
        """``html.escape(self.number(value))``."""
        if self._group_html is not None and value >= 0:
            return f"{value:,}".replace(",", self._group_html)
        return html.escape(self.number(value))

    def ahead_html(self, ahead: int) -> str:
        """``html.escape(self.ahead_text(ahead))``."""
        if ahead == 0:
            return self._nobody_html
        return self._count_html(N_("{num} person"), N_("{num} people"), ahead)

    def __repr__(self) -> str:
        return f"Language({self.code!r})"


@cache
def language_for(code: str) -> Language:
    """A shipped language by its catalog name (loaded once)."""
    if code not in LANGUAGES:
        raise ValueError(f"no catalog for {code!r}; shipped: {', '.join(LANGUAGES)}")
    return Language(code)


def _shipped(tag: str) -> str | None:
    """The shipped catalog for one BCP 47 tag, if any."""
    parts = tag.lower().replace("_", "-").split("-")
    base = parts[0]
    if base == "zh":
        # The script when named, else where Traditional characters are written.
        traditional = "hant" in parts or (("hans" not in parts) and bool({"tw", "hk", "mo"} & set(parts)))
        return "zh_Hant" if traditional else "zh_Hans"
    if base == "pt":
        return "pt_BR"  # the Portuguese shipped (Brazil's), nearer than English for Portugal
    aliases = {"iw": "he", "in": "id"}
    base = aliases.get(base, base)
    return base if base in LANGUAGES else None


_WEIGHTED = re.compile(r"\s*([A-Za-z]{1,8}(?:[-_][A-Za-z0-9]{1,8})*|\*)\s*(?:;\s*q\s*=\s*([0-9.]+))?\s*")


@lru_cache(maxsize=4096)
def negotiate(accept_language: str) -> str:
    """The shipped language a visitor prefers most, by ``Accept-Language``
    (``ko-KR,ko;q=0.9,en;q=0.8``), else the default."""
    wanted: list[tuple[float, int, str]] = []
    for index, item in enumerate(accept_language[:MAX_ACCEPT_LANGUAGE].split(",")):
        found = _WEIGHTED.fullmatch(item)
        if found is None or found[1] == "*":
            continue
        try:
            weight = float(found[2]) if found[2] else 1.0
        except ValueError:
            continue
        if weight > 0:
            wanted.append((-weight, index, found[1]))
    for _, _, tag in sorted(wanted):
        code = _shipped(tag)
        if code is not None:
            return code
    return DEFAULT
