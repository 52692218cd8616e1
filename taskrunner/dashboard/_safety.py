"""What keeps the dashboard safe to leave open: read-only unless told, a token for
actions, CSRF protection, no secrets shown.

Theory of operation.

- **Read-only by default.** Without ``allow_actions`` every action route answers
  403 and no page shows an action button.
- **The action token** (``--token``, or ``TASKRUNNER_DASHBOARD_TOKEN``, or one
  generated and logged once at start) is typed into the login form, a POST,
  never put in a URL. A right token opens a *session*: a random id the
  dashboard keeps in memory, sent back as an ``HttpOnly``, ``SameSite=Strict``
  cookie. Tokens and session ids are compared with :func:`hmac.compare_digest`.
- **CSRF.** State changes are POSTs only. Each browser gets a random CSRF token
  in a ``SameSite=Strict`` cookie, rendered into every form as a hidden field;
  a POST whose field does not match its cookie is refused (403), as is one whose
  ``Origin`` header names another host. Another site can neither read the
  cookie nor make the browser send it along.
- **No secrets shown.** :func:`redact_url` drops the password (and user) of the
  Redis URL before it is shown anywhere.
- **Escaping** is the templates' job: Jinja2 with autoescape on, and the live
  updates write text only (``textContent``), never HTML.
"""

from __future__ import annotations

import hmac
import secrets
import urllib.parse

__all__ = [
    "CSRF_COOKIE",
    "SESSION_COOKIE",
    "Sessions",
    "new_token",
    "origin_matches",
    "redact_url",
    "same_secret",
]

SESSION_COOKIE = "taskrunner_session"
CSRF_COOKIE = "taskrunner_csrf"
TOKEN_ENV = "TASKRUNNER_DASHBOARD_TOKEN"
"""The environment variable ``taskrunner dashboard`` reads the action token from."""


def new_token() -> str:
    """A fresh random secret (32 bytes, URL-safe text)."""
    return secrets.token_urlsafe(32)


def same_secret(given: str | None, expected: str | None) -> bool:
    """Whether ``given`` is ``expected``, in constant time; never for a missing or empty one."""
    if not given or not expected:
        return False
    return hmac.compare_digest(given.encode(), expected.encode())


def redact_url(url: str) -> str:
    """``url`` with any user and password left out (pure): what may be shown.

    ``redis://:secret@host:6379/0`` becomes ``redis://host:6379/0``; a Sentinel
    URL keeps its host list and loses its ``sentinel_password`` too. A URL that
    does not parse is shown as its scheme only.
    """
    if "+sentinel://" in url.lower():  # s1:26379,s2:26379: no single host to parse
        parts = urllib.parse.urlsplit(url)
        hosts = parts.netloc.rpartition("@")[2]
        query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
        kept = [(k, v) for k, v in query if not _secret_option(k)]
        query_text = urllib.parse.urlencode(kept)
        return f"{parts.scheme}://{hosts}{parts.path}" + (f"?{query_text}" if query_text else "")
    try:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port is not None else ""
    except ValueError:
        return url.partition(":")[0] + "://..."
    if ":" in host:  # an IPv6 address
        host = f"[{host}]"
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    kept = [(k, v) for k, v in query if not _secret_option(k)]
    query_text = urllib.parse.urlencode(kept)
    return f"{parts.scheme}://{host}{port}{parts.path}" + (f"?{query_text}" if query_text else "")


def _secret_option(name: str) -> bool:
    """A URL query option that names or authenticates a user (``sentinel_password``...)."""
    return name.lower().removeprefix("sentinel_") in ("password", "username", "user")


def origin_matches(origin: str | None, host: str | None) -> bool:
    """Whether a request's ``Origin`` header is this server (pure; absent is accepted:
    older browsers send none on same-origin form posts, and the CSRF token still holds)."""
    if origin is None:
        return True
    if origin == "null" or host is None:
        return False
    return urllib.parse.urlsplit(origin).netloc.lower() == host.lower()


class Sessions:
    """The sessions opened with the action token, in memory (a restart logs everyone out)."""

    def __init__(self, token: str | None) -> None:
        self._token = token
        self._ids: set[str] = set()

    @property
    def enabled(self) -> bool:
        return self._token is not None

    def open(self, token: str | None) -> str | None:
        """A new session id when ``token`` is the action token, else ``None``."""
        if not same_secret(token, self._token):
            return None
        session = new_token()
        self._ids.add(session)
        return session

    def valid(self, session: str | None) -> bool:
        if not session:
            return False
        return any(same_secret(session, known) for known in self._ids)

    def close(self, session: str | None) -> None:
        if session:
            self._ids.discard(session)
