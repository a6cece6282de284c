"""The dashboard's sign-in sessions (``cronstream.ui.sessions``): random ids, an idle
limit, a lifetime, sign-out, a bound on how many are held. Virtual time."""

from __future__ import annotations

from cronstream.ui.sessions import IDLE_S, MAX_AGE_S, Sessions


def test_a_session_id_is_random_and_names_its_holder() -> None:
    sessions = Sessions()
    first, second = sessions.open("acme", "tok", 0.0), sessions.open("acme", "tok", 0.0)
    assert first != second
    assert len(first) >= 40
    assert "tok" not in first
    session = sessions.get(first, 1.0)
    assert session is not None
    assert (session.holder, session.token) == ("acme", "tok")
    assert sessions.get("made-up", 1.0) is None


def test_a_session_ends_after_twelve_idle_hours_and_requests_keep_it_alive() -> None:
    sessions = Sessions()
    assert IDLE_S == 12 * 3600
    kept, idle = sessions.open("acme", "t", 0.0), sessions.open("beta", "t", 0.0)
    for hour in range(1, 13):  # a request every hour
        assert sessions.get(kept, hour * 3600.0) is not None
    assert sessions.get(idle, IDLE_S + 1.0) is None
    assert sessions.get(idle, 1.0) is None  # forgotten, not only refused
    assert sessions.get(kept, 12 * 3600.0 + IDLE_S) is not None  # idle exactly 12 h: still


def test_a_session_ends_a_day_after_sign_in_however_busy() -> None:
    sessions = Sessions()
    session_id = sessions.open("acme", "t", 0.0)
    now = 0.0
    while now < MAX_AGE_S:
        assert sessions.get(session_id, now) is not None
        now += 600
    assert sessions.get(session_id, MAX_AGE_S + 1.0) is None


def test_sign_out_ends_the_session_at_once() -> None:
    sessions = Sessions()
    session_id = sessions.open("acme", "t", 0.0)
    sessions.close(session_id)
    sessions.close(session_id)  # twice: no error
    assert sessions.get(session_id, 1.0) is None


def test_past_the_capacity_the_least_recently_used_session_goes() -> None:
    sessions = Sessions(capacity=3)
    a, b, c = (sessions.open(h, "t", 0.0) for h in "abc")
    assert sessions.get(a, 1.0) is not None  # a used: b is now the least recent
    d = sessions.open("d", "t", 2.0)
    assert len(sessions) == 3
    assert sessions.get(b, 3.0) is None
    assert all(sessions.get(s, 3.0) is not None for s in (a, c, d))


def test_one_token_signing_in_in_a_loop_signs_out_only_its_own_oldest_sessions() -> None:
    sessions = Sessions(capacity=100, per_token=3)
    others = [sessions.open("beta", "beta-token", 0.0), sessions.open("admin", "admin-token", 0.0)]
    loop = [sessions.open("acme", "acme-token", float(i)) for i in range(10_000)]
    assert len(sessions) == 2 + 3
    assert all(sessions.get(s, 20_000.0) is not None for s in others)
    assert [sessions.get(s, 20_000.0) is not None for s in loop[-4:]] == [False, True, True, True]


def test_a_session_used_lately_outlives_its_tokens_older_idle_ones() -> None:
    sessions = Sessions(per_token=2)
    used, idle = sessions.open("acme", "t", 0.0), sessions.open("acme", "t", 1.0)
    assert sessions.get(used, 2.0) is not None  # used: idle is now that token's oldest
    newest = sessions.open("acme", "t", 3.0)
    assert sessions.get(idle, 4.0) is None
    assert sessions.get(used, 4.0) is not None
    assert sessions.get(newest, 4.0) is not None


def test_sessions_that_ended_free_their_tokens_places() -> None:
    sessions = Sessions(per_token=2)
    first = sessions.open("acme", "t", 0.0)
    sessions.close(first)
    expired = sessions.open("acme", "t", 0.0)
    assert sessions.get(expired, IDLE_S + 1.0) is None
    kept = [sessions.open("acme", "t", IDLE_S + 2.0) for _ in range(2)]
    assert all(sessions.get(s, IDLE_S + 3.0) is not None for s in kept)
    assert len(sessions) == 2
