"""The console's admin actions on a queue: purge, delete, replay, each in two steps.

1. The queue page's Actions box (``AdminPanel.actions_for``) shows the buttons only
   when the api says this caller may use its admin actions on that queue (asked with
   the caller's credentials, ``relay.ApiRelay.check``); otherwise it says why not.
2. A button opens a confirmation page (GET ``/queues/<q>/admin/<action>``): what will
   happen in words, the api's figures of the queue now, and a POST form holding a token
   (``forms``). Purge and delete need the queue's name typed again: a click alone
   never deletes. Replay changes nothing; its confirmation is the time it will use.
3. The POST is checked (same origin, token, typed name), relayed to the api
   (``relay``), and the api's answer shown: the result, or its error with its status.

The api decides every time (the buttons are a convenience, not the check): a caller
without the right who forges the steps gets the api's 403.

Without access control the console's pages are open and carry no credentials, so the
api answers 401 to the buttons' question: the queue page then offers to sign in
(``/login?queue=<q>``, ``AdminPanel.sign_in``), which asks the browser for the
operator's token (HTTP Basic: user ``admin``, the token as password), has the api check
it, and goes back to the queue. Signed in at the console's root, the browser sends the
token with every later page of the console, and the relay passes it on.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from markupsafe import Markup, escape

from zoscii_statissa.forms import FormTokens, credential, cross_site
from zoscii_statissa.relay import ApiRelay, Caller, RelayError
from zoscii_statissa.report import environment
from zosciimq.core.admin import parse_utc
from zosciimq.core.names import is_message_name
from zosciimq.errors import InvalidInput

log = logging.getLogger(__name__)

ACTIONS = ("purge", "delete", "replay")
PARAMETER = {"purge": "before", "delete": "", "replay": "since"}  # the one each takes
RETYPED = frozenset({"purge", "delete"})  # destructive: the queue name is typed again
OFF = (
    "Admin actions are off in this console: set ZOSCII_STATISSA_API_URL to the api's URL "
    "(statissa's README, \u201cAdmin actions\u201d)."
)
REALM = 'Basic realm="ZOSCII MQ admin", charset="UTF-8"'
SIGN_IN = (
    "Sign in with the operator's token: user name <b>admin</b>, the token as password "
    "(<code>make up</code> printed it; it is kept in <code>secrets/admin-token</code>)."
)

@dataclass(frozen=True)
class Page:
    html: str
    status: int
    headers: dict[str, str] = field(default_factory=dict)


def sign_in_link(queue: str, prefix: str) -> Markup:
    """A link to sign in for ``queue``'s admin actions, from a page ``prefix`` below the root."""
    href = f"{prefix}login?queue={quote(queue)}"
    return Markup('<a id="sign-in" href="{}">sign in</a>').format(href)


class AdminPanel:
    """The queue page's buttons and the pages behind them."""

    def __init__(self, relay: ApiRelay | None, tokens: FormTokens | None = None) -> None:
        self.relay = relay
        self.tokens = tokens or FormTokens()
        env = environment()
        self._bar = env.get_template("admin_bar.html")
        self._page = env.get_template("admin.html")

    # --- the queue page ------------------------------------------------------------------
    def actions_for(self, environ: Mapping[str, Any], queue: str) -> tuple[list[Markup], str]:
        """The buttons for this caller (none, and why, when the api would refuse them)."""
        if self.relay is None:
            return [], OFF
        try:
            self.relay.check(Caller.of(environ), queue)
        except RelayError as exc:
            if exc.status == 401:
                return [], Markup(
                    "Admin actions need the operator's token: {} to use them."
                ).format(sign_in_link(queue, "../"))
            if exc.status == 403:
                return [], (
                    f"No admin actions offered: the api refuses them to you (it answered "
                    f"{exc.status}: {exc})"
                )
            return [], f"No admin actions offered: the api answered {exc.status}: {exc}"
        return [Markup(self._bar.render(base=queue))], ""

    # --- signing in (access control off: the pages carry no credentials) ----------------
    def sign_in(self, environ: Mapping[str, Any], queue: str) -> Page:
        """401 with a challenge until the browser sends a token the api takes for admin
        actions on ``queue``; then back to the queue's page."""
        if self.relay is None:
            return self._error(queue, "sign-in", 503, "Not available", OFF)
        caller = Caller.of(environ)
        if caller.authorization is None:
            return self._challenge(queue, Markup(SIGN_IN))
        try:
            self.relay.check(caller, queue)
        except RelayError as exc:
            if exc.status == 401:
                message = Markup("The api did not accept that token ({}). {}").format(
                    exc, Markup(SIGN_IN)
                )
                return self._challenge(queue, message)
            return self._refused(queue, "sign-in", exc)
        log.info("console: %s signed in for admin actions", caller.address)
        return Page("", 303, {"Location": f"queues/{quote(queue)}"})

    def _challenge(self, queue: str, message: Markup) -> Page:
        page = self._error(queue, "sign-in", 401, "Sign in", message)
        return Page(page.html, 401, {"WWW-Authenticate": REALM})

    # --- step 2: the confirmation page ---------------------------------------------------
    def confirm(self, environ: Mapping[str, Any], queue: str, action: str, value: str) -> Page:
        if self.relay is None:
            return self._error(queue, action, 503, "Not available", OFF)
        value = value.strip()
        try:
            what = describe(action, value)
        except InvalidInput as exc:
            return self._error(queue, action, 400, "Cannot do that", str(exc))
        caller = Caller.of(environ)
        try:
            figures = self.relay.queue(caller, queue)
        except RelayError as exc:
            return self._refused(queue, action, exc)
        return self._confirm_page(queue, action, value, what, caller, figures=figures)

    def _confirm_page(
        self,
        queue: str,
        action: str,
        value: str,
        what: str,
        caller: Caller,
        *,
        figures: dict[str, Any] | None = None,
        error: str = "",
        status: int = 200,
    ) -> Page:
        token = self.tokens.issue(action, queue, value, credential(caller.authorization))
        html = self._page.render(
            root=_root(action),
            stage="confirm",
            queue=queue,
            action=action,
            title=action.capitalize(),
            what=what,
            figures=figures,
            token=token,
            parameter=PARAMETER[action],
            value=value,
            retype=action in RETYPED,
            button={"purge": "Purge", "delete": "Delete the queue", "replay": "Get the pointer"}[
                action
            ],
            error=error,
            error_title="Not done",
        )
        return Page(html, status)

    # --- step 3: the POST ------------------------------------------------------------------
    def submit(
        self, environ: Mapping[str, Any], queue: str, action: str, form: Mapping[str, str]
    ) -> Page:
        if self.relay is None:
            return self._error(queue, action, 503, "Not available", OFF)
        reason = cross_site(environ)
        if reason is not None:
            log.warning("console: %s of %s refused: %s", action, queue, reason)
            return self._error(queue, action, 403, "Refused", reason + ".")
        caller = Caller.of(environ)
        value = form.get(PARAMETER[action], "") if PARAMETER[action] else ""
        token = form.get("token", "")
        if not self.tokens.valid(token, action, queue, value, credential(caller.authorization)):
            return self._error(
                queue,
                action,
                403,
                "Refused",
                "this form is stale or was not made by this console: open it again from "
                "the queue page.",
            )
        if action in RETYPED and form.get("confirm", "").strip() != queue:
            what = describe(action, value)
            return self._confirm_page(
                queue,
                action,
                value,
                what,
                caller,
                error=f"type the queue name \u201c{queue}\u201d exactly to confirm.",
                status=400,
            )
        try:
            if action == "purge":
                result = self.relay.purge(caller, queue, value or None)
            elif action == "delete":
                result = self.relay.delete(caller, queue)
            else:
                result = self.relay.replay(caller, queue, value)
        except RelayError as exc:
            log.warning("console: %s of %s: the api answered %s %s", action, queue, exc.status, exc)
            return self._refused(queue, action, exc)
        log.info("console: %s of %s for %s: %s", action, queue, caller.address, result)
        return self._done(queue, action, result)

    def _done(self, queue: str, action: str, result: dict[str, Any]) -> Page:
        if action == "purge":
            title = f"Purged {result.get('purged', 0)} message(s) from {queue}"
            rows = [
                ("purged", result.get("purged")),
                ("bytes", result.get("bytes")),
                ("before", result.get("before") or "(all)"),
            ]
            note = "The figures and charts catch up at the next computation."
        elif action == "delete":
            title = f"Deleted queue {queue}"
            rows = [
                ("messages", result.get("messages")),
                ("bytes", result.get("bytes")),
                ("groups", ", ".join(result.get("groups") or []) or "(none)"),
            ]
            note = "A later publish to this name makes a new queue: reset its readers' pointers."
        else:
            title = f"Replay {queue} from {result.get('since')}"
            rows = [
                ("pointer", result.get("pointer") or '"" (start from the beginning)'),
                ("first", result.get("first") or "(none yet)"),
                ("waiting", result.get("waiting")),
                ("since", result.get("since")),
            ]
            note = (
                "Nothing was changed. Save the pointer as the consumer's pointer (fetch "
                "after=<pointer>) to receive again every message published since then."
            )
        html = self._page.render(
            root=_root(action),
            stage="done",
            queue=queue,
            action=action,
            title=action.capitalize(),
            done_title=title,
            result=rows,
            note=note,
            error="",
            error_title="",
        )
        return Page(html, 200)

    def _refused(self, queue: str, action: str, exc: RelayError) -> Page:
        # 401 without a challenge would confuse a browser: a refusal here, and a way in
        if exc.status == 401:
            link = sign_in_link(queue, _root(action))
            message = Markup("{} (the api asks for the operator's token: {} first).").format(
                escape(str(exc)), link
            )
            return self._error(queue, action, 403, "The api answered 401", message)
        return self._error(queue, action, exc.status, f"The api answered {exc.status}", str(exc))

    def _error(self, queue: str, action: str, status: int, title: str, message: str) -> Page:
        html = self._page.render(
            root=_root(action),
            stage="error",
            queue=queue,
            action=action,
            title=action.capitalize(),
            error=message,
            error_title=title,
        )
        return Page(html, status)


def _root(action: str) -> str:
    """The console's root, relative to the page of ``action`` (/queues/<q>/admin/<action>,
    or /login to sign in): pages work behind a path prefix."""
    return "../../../" if action in ACTIONS else ""


def describe(action: str, value: str) -> str:
    """What ``action`` with its parameter will do, in words; InvalidInput for a value the
    api would refuse (checked by the core's own parsers, so both read it the same way)."""
    if action == "delete":
        return (
            "This removes the queue whole: every message, its index and its consumer "
            "groups' state. It cannot be undone."
        )
    if action == "purge":
        if not value:
            return (
                "This deletes every message in the queue when the purge starts (messages "
                "published meanwhile stay; the queue and its pointers stay). It cannot be "
                "undone."
            )
        if is_message_name(value):
            return f"This deletes the messages that sort before {value}. It cannot be undone."
        moment = parse_utc(value)
        return (
            f"This deletes the messages published before {moment:%Y-%m-%d %H:%M:%S} UTC "
            "(whole seconds). It cannot be undone."
        )
    if not value:
        raise InvalidInput("Give the time to replay from (ISO-8601 with a zone).")
    moment = parse_utc(value)
    return (
        f"This asks the api for the pointer after which a fetch returns the messages "
        f"published at or after {moment:%Y-%m-%d %H:%M:%S} UTC. Nothing is changed."
    )
