"""The texts of the gate's own pages, marked for translation: each message
page's heading and text, the built-in templates' fixed texts (their
``$t_<name>`` placeholders) and the few the pages put together. Their
translations are in ``queuegate/locales/<language>/LC_MESSAGES/queuegate.po``
(see ``queuegate.i18n``)."""

from __future__ import annotations

from .i18n import N_

__all__ = [
    "BACK_HOME",
    "HEADINGS",
    "LOTTERY_AHEAD",
    "MESSAGES",
    "MESSAGE_STATES",
    "RETRYING",
    "TAB_TITLE",
    "TEXTS",
]

MESSAGES = {
    "closed": (
        N_("This line is closed"),
        N_("Nobody new can join right now: it may be sold out or over. Please come back later."),
    ),
    "closed_in_line": (
        N_("This line is closed for now"),
        N_("Your place is kept. If the line opens again, this page takes you back to it: keep it open."),
    ),
    "unavailable": (
        N_("Temporarily unavailable"),
        N_("We cannot check the line right now. Please try again in a few seconds."),
    ),
    "left": (
        N_("You left the line"),
        N_("Your place has been given up. Coming back puts you at the end of the line."),
    ),
    "not_found": (N_("Not found"), N_("There is no such waiting room.")),
    "not_admitted": (
        N_("Not your turn yet"),
        N_("Only visitors whose turn has come can connect here. Open the page to join the line."),
    ),
    "cross_site": (
        N_("Not allowed from another site"),
        N_("Leaving the line can only be asked for from this site's own waiting page."),
    ),
    "limited": (
        N_("Too many new places from your network"),
        N_(
            "So many places in this line were just taken from your network that we cannot give "
            "another one right now. Please try again in a minute."
        ),
    ),
    "refused": (
        N_("This place belongs to someone else"),
        N_(
            "This place in line was taken by another account. Sign in with the account that joined, "
            "or open the page again to join the line yourself."
        ),
    ),
}

# The state a message's JSON says, and what it adds, where the state is not
# the message's own name: one in line in a closed room is told more, in the
# same state.
MESSAGE_STATES: dict[str, tuple[str, dict[str, object]]] = {"closed_in_line": ("closed", {"in_line": True})}

# The fixed texts of the built-in templates, as $t_<name> placeholders.
TEXTS = {
    "in_line": N_("You are in line"),
    "paused_heading": N_("The line is paused"),
    "place_label": N_("your place in line"),
    "draw_label": N_("people in the draw"),
    "ahead_label": N_("Ahead of you"),
    "next_label": N_("Who goes next"),
    "eta_label": N_("Estimated wait"),
    "keep_open": N_(
        "Keep this page open. It updates by itself and takes you in as soon as it is your turn. "
        "Reloading keeps your place."
    ),
    "rejoined": N_(
        "You lost your earlier place in line (away too long, or the line was reset), so you joined it "
        "again at the end."
    ),
    "trouble": N_("We cannot check the line right now. Your place is kept, and this page keeps trying."),
    "updated": N_("Last updated"),
    "leave": N_("Leave the line"),
    "say_place": N_("Your place in line: {position}. Estimated wait: {eta}."),
    "say_turn": N_("Your turn has come: taking you in."),
    "notify": N_("Notify me when it is my turn"),
    "sound": N_("Play a sound when it is my turn"),
    "opening_soon": N_("Opening soon"),
    "until_opening": N_("until the opening"),
    "in_prequeue": N_("In the pre-queue"),
    "opens_at": N_("Opens at"),
    "prequeue_note": N_(
        "You are in. When the sale opens, everyone who came early gets a random place in line, "
        "so there is no need to rush or reload. Keep this page open; it takes you on by itself."
    ),
    "fairness": N_(
        "Fairness: the order is drawn from a secret that will be published after the event. Its SHA-256:"
    ),
    "leave_prequeue": N_("Leave the pre-queue"),
    "stop": N_("Stop"),
    "stopped": N_("Stopped. Reload the page to try again."),
    "check_heading": N_("Checking your browser"),
    "check_note": N_(
        "Before you get a place in line, your browser solves a small puzzle that keeps bots from "
        "taking places. It takes a few seconds and needs nothing from you."
    ),
    "check_noscript": N_(
        "This line needs JavaScript: your browser must solve a small puzzle before you get a place. "
        "Turn JavaScript on and reload the page."
    ),
    "check_failed": N_("The check did not succeed. Reload the page to try again."),
    "check_insecure": N_("This check needs a secure connection. Open the page over HTTPS and try again."),
}
LOTTERY_AHEAD = N_("a random draw whenever places free up")
RETRYING = N_("Trying again in {seconds} s.")
# The way back from the page that says the visitor left the line.
BACK_HOME = N_("Back to the home page")
# A built-in page's tab title with the room's title: each language puts its
# own punctuation (French a space before the colon, Chinese and Japanese a
# full-width colon), or the two in another order.
TAB_TITLE = N_("{heading}: {title}")
# The built-in pages' headings (TEXTS), each in its page's tab title as
# $tab_<name>: alone, or with the room's title in TAB_TITLE.
HEADINGS = ("in_line", "paused_heading", "opening_soon", "check_heading")
