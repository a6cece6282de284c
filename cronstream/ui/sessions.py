"""The dashboard's sign-in sessions, held by the server: the browser's cookie carries a
random session id, never the API token, so a cookie that leaks (a proxy's log, a
shared machine) is worth at most the session's rest of life, and signing out ends it
on the server whatever the browser keeps.

A session ends ``IDLE_S`` (12 h) after its last request, ``MAX_AGE_S`` (24 h) after the
sign-in, at sign-out, or as soon as its token leaves the token book (checked on each
request by the caller: a tenant removed, a token rotated). Sessions live in the
process's memory: a restarted dashboard asks everyone to sign in again.

Two bounds, so that a token holder signing in in a loop neither grows the process nor
signs anyone else out: at most ``PER_TOKEN`` sessions of one token (its next sign-in
drops that token's least recently used session, never another token's), and at most
``CAPACITY`` in all (past it, the least recently used of all goes: reached only with
more than ``CAPACITY / PER_TOKEN`` tokens signed in at once). Pure: every method takes
``now`` (seconds), the caller's clock.
"""

from __future__ import annotations

import secrets
import threading
from collections import OrderedDict
from dataclasses import dataclass, replace

IDLE_S = 12 * 3600
MAX_AGE_S = 24 * 3600
CAPACITY = 10_000
PER_TOKEN = 20  # browsers and devices of one team signed in at once


@dataclass(frozen=True, slots=True)
class Session:
    holder: str  # a tenant, or runtime.tokens.ADMIN
    token: str  # what signed in: re-checked against the token book on each request
    started: float
    seen: float  # the last request


class Sessions:
    """Session id -> ``Session`` (thread-safe: the pages run on a thread pool)."""

    def __init__(
        self,
        *,
        idle_s: float = IDLE_S,
        max_age_s: float = MAX_AGE_S,
        capacity: int = CAPACITY,
        per_token: int = PER_TOKEN,
    ) -> None:
        self.idle_s, self.max_age_s = idle_s, max_age_s
        self.capacity, self.per_token = capacity, per_token
        self._by_id: OrderedDict[str, Session] = OrderedDict()  # least recently used first
        # token -> its session ids, least recently used first (the per-token bound)
        self._by_token: dict[str, OrderedDict[str, None]] = {}
        self._lock = threading.Lock()

    def open(self, holder: str, token: str, now: float) -> str:
        """A new session of ``holder``: its id (256 random bits), for the cookie."""
        session_id = secrets.token_urlsafe(32)
        with self._lock:
            own = self._by_token.get(token, OrderedDict())
            while len(own) >= self.per_token:  # (the last one dropped drops ``own`` too)
                self._drop(next(iter(own)))
            self._by_id[session_id] = Session(holder, token, now, now)
            self._by_token.setdefault(token, OrderedDict())[session_id] = None
            while len(self._by_id) > self.capacity:
                self._drop(next(iter(self._by_id)))
        return session_id

    def get(self, session_id: str, now: float) -> Session | None:
        """The live session ``session_id`` (its last request now), or None: unknown,
        signed out, or expired (then forgotten)."""
        with self._lock:
            session = self._by_id.get(session_id)
            if session is None:
                return None
            if now - session.seen > self.idle_s or now - session.started > self.max_age_s:
                self._drop(session_id)
                return None
            self._by_id[session_id] = session = replace(session, seen=now)
            self._by_id.move_to_end(session_id)
            self._by_token[session.token].move_to_end(session_id)
            return session

    def close(self, session_id: str) -> None:
        """Sign-out: the id no longer names a session."""
        with self._lock:
            if session_id in self._by_id:
                self._drop(session_id)

    def _drop(self, session_id: str) -> None:
        """Forget a session held (the lock held)."""
        session = self._by_id.pop(session_id)
        own = self._by_token[session.token]
        del own[session_id]
        if not own:
            del self._by_token[session.token]

    def __len__(self) -> int:
        with self._lock:
            return len(self._by_id)
