# SPDX-License-Identifier: MIT
"""Locks, semaphores, try/timed/forever, values, leader, renew, two-phase, check_token."""

from __future__ import annotations

import errno
import threading

import pytest

import shmlock
from shmlock import errors

from conftest import ctypes_path, wait_for


def test_version_and_strerror() -> None:
    assert shmlock.version().startswith("0.")
    assert "version" in shmlock.strerror(errors.EVERSION)


def test_lock_context_manager_tokens_rise(session: shmlock.Session, key: str) -> None:
    with session.lock(key, timeout=5) as hold:
        first = hold.token
        assert first > 0
        assert session.held(key) == first
        assert session.check_token(key, first)
        assert session.info(key).kind == "lock"
    assert hold.released
    assert not session.check_token(key, first)
    with pytest.raises(shmlock.NotHeld):
        session.held(key)
    with session.lock(key) as hold2:
        assert hold2.token > first


def test_module_level_default_session(broker: object, key: str) -> None:
    with shmlock.lock(key, timeout=5) as hold:
        assert shmlock.held(key) == hold.token
        assert shmlock.info(key).holder_session == shmlock.default_session().id
    assert shmlock.info(key).holders == 0


def test_try_and_timed_acquire(session: shmlock.Session, other: shmlock.Session,
                               key: str) -> None:
    with session.lock(key):
        assert other.try_lock(key) is None
        with pytest.raises(shmlock.Busy) as busy:
            other.lock(key, timeout=0)
        assert busy.value.code == errno.EBUSY
        assert "busy" in busy.value.message
        with pytest.raises(shmlock.Timeout) as timeout:
            other.lock(key, timeout=0.05)
        assert timeout.value.code == errno.ETIMEDOUT
        assert "timed out waiting for the key" in str(timeout.value)
        assert "Connection" not in str(timeout.value)
        with pytest.raises(TimeoutError):  # Timeout is also the builtin
            other.lock(key, timeout=0.01)
    hold = other.try_lock(key)
    assert hold is not None
    hold.release()


def test_forever_acquire_is_handed_over(session: shmlock.Session, other: shmlock.Session,
                                        key: str) -> None:
    got: list = []
    hold = session.lock(key)
    t = threading.Thread(target=lambda: got.append(other.lock(key)))
    t.start()
    wait_for(lambda: session.info(key).waiters == 1, what="the waiter queued")
    hold.release()
    t.join(10)
    assert got and got[0].token > hold.token
    assert session.info(key).holder_session == other.id
    got[0].release()


def test_semaphore(session: shmlock.Session, other: shmlock.Session, broker: object,
                   key: str) -> None:
    with shmlock.Session(name="third", lock_delay=0) as third:
        a = session.semaphore(key, 2)
        b = other.semaphore(key, 2, timeout=1)
        assert a.kind == "semaphore" and b.token > a.token
        with pytest.raises(shmlock.Busy):
            third.semaphore(key, 2, timeout=0)
        with pytest.raises(shmlock.KindMismatch) as lim:
            third.semaphore(key, 3, timeout=0)
        assert lim.value.code == errors.ELIMIT
        with pytest.raises(shmlock.KindMismatch):
            third.lock(key, timeout=0)
        assert len(session.holders(key)) == 2
        a.release()
        with third.semaphore(key, 2, timeout=0) as c:
            assert c.token > b.token
        b.release()


def test_value_and_leader(session: shmlock.Session, other: shmlock.Session, key: str) -> None:
    assert other.leader(key) is None
    with session.lock(key, value="http://10.0.0.1:8080") as hold:
        lead = other.leader(key)
        assert lead is not None
        assert lead.value == b"http://10.0.0.1:8080"
        assert lead.session == session.id and lead.token == hold.token
        assert lead.name == "pytest"
        assert other.value(key) == b"http://10.0.0.1:8080"
    with pytest.raises(shmlock.LimitExceeded) as big:
        session.lock(key, value=b"x" * 5000)  # the broker runs with --max-value 4096
    assert big.value.code == errors.EVALUESIZE


def test_lease_renew_and_expiry(session: shmlock.Session, other: shmlock.Session,
                                key: str) -> None:
    hold = session.lock(key, lease=5)
    assert 0 < hold.renew(10) <= 10
    assert hold.held
    hold.renew(0.05)  # shorten it: the broker releases the hold soon
    wait_for(lambda: other.try_lock(key) is not None, what="the lease to expire")
    assert not hold.held
    with pytest.raises(shmlock.Expired):
        hold.renew()
    other.release(key)


def test_expired_hold_raises_on_with_exit(session: shmlock.Session, other: shmlock.Session,
                                          key: str) -> None:
    with pytest.raises(shmlock.NotHeld):
        with session.lock(key, lease=0.05):
            wait_for(lambda: session.info(key).holders == 0, what="the lease to expire")


def test_two_phase_acquire(session: shmlock.Session, other: shmlock.Session, key: str) -> None:
    first = session.enqueue(key)
    assert first.granted and first.token
    second = other.enqueue(key)
    assert not second.granted
    with pytest.raises(shmlock.AlreadyEnqueued):
        other.enqueue(key)
    with pytest.raises(shmlock.Timeout):
        second.wait(0.05)  # it left the queue
    with pytest.raises(shmlock.NotEnqueued):
        second.wait(0)
    third = other.enqueue(key)
    hold = first.wait()
    hold.release()
    with third.wait(5) as h3:
        assert h3.token > hold.token
    fourth = session.enqueue(key)
    fourth.cancel()
    assert session.info(key).holders == 0


def test_force_release_and_destroy(session: shmlock.Session, other: shmlock.Session,
                                   key: str) -> None:
    hold = session.lock(key)
    other.force_release(key, session.id)
    with pytest.raises(shmlock.NotHeld):
        hold.release()
    with shmlock.Session(name="victim") as victim:
        victim.lock(key)
        other.destroy_session(victim.id)
        with pytest.raises(shmlock.SessionEnded):
            victim.lock(key + "/2", timeout=0)


def test_close_ends_a_blocked_wait(session: shmlock.Session, broker: object, key: str) -> None:
    errs: list = []
    waiter = shmlock.Session(name="waiter")

    def run() -> None:
        try:
            waiter.lock(key)
        except shmlock.ShmlockError as e:
            errs.append(e)

    with session.lock(key):
        t = threading.Thread(target=run)
        t.start()
        wait_for(lambda: session.info(key).waiters == 1, what="the waiter queued")
        waiter.close()
        t.join(10)
    assert not t.is_alive()
    assert errs and isinstance(errs[0], shmlock.SessionEnded)
    with pytest.raises(shmlock.SessionEnded):
        waiter.lock(key)


def test_close_under_busy_threads(broker: object, key: str) -> None:
    """Threads locking and releasing on one session while another closes it:
    every call either completes or raises SessionEnded, and close() returns."""
    s = shmlock.Session(name="busy")
    stop = threading.Event()
    ok: list = []
    bad: list = []

    def run(i: int) -> None:
        k = f"{key}/{i}"
        while not stop.is_set():
            try:
                with s.lock(k, timeout=1):
                    pass
                ok.append(i)
            except shmlock.SessionEnded:
                return
            except BaseException as e:  # noqa: B902 - anything else is a failure
                bad.append(e)
                return

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    wait_for(lambda: len(ok) >= 200, what="the threads to lock and release")
    s.close()
    stop.set()
    for t in threads:
        t.join(10)
    assert not any(t.is_alive() for t in threads)
    assert not bad, bad
    with pytest.raises(shmlock.SessionEnded):
        s.lock(key, timeout=0)


def test_bad_arguments(session: shmlock.Session) -> None:
    with pytest.raises(shmlock.InvalidArgument):
        session.lock("", timeout=0)
    with pytest.raises(ValueError):
        session.lock("k" * 300, timeout=0)
    for _ in range(2):  # refused every time, not only before a cache saw it
        with pytest.raises(ValueError):
            session.lock("a\0b", timeout=0)
    # Keys of every accepted type name the same key.
    with session.lock("bytes/key", timeout=0) as h:
        assert session.held(b"bytes/key") == h.token
        assert session.held(bytearray(b"bytes/key")) == h.token
        assert session.held(memoryview(b"bytes/key")) == h.token


def test_no_broker_is_broker_unavailable(tmp_path: object) -> None:
    with pytest.raises(shmlock.BrokerUnavailable) as e:
        shmlock.Session(f"{tmp_path}/nothing.sock", broker_wait=0)
    assert e.value.code == errors.ENOSOCKET
    assert e.value.message == shmlock.strerror(errors.ENOSOCKET)
    assert isinstance(e.value, ConnectionError)


def test_admin_calls(session: shmlock.Session, other: shmlock.Session, broker,
                     key: str) -> None:
    sock = broker.sock
    with session.lock(key, value=b"v1") as hold:
        waiting = other.enqueue(key)
        st = shmlock.admin.stats(sock)
        assert st.holds >= 1 and st.quarantined_keys == 0 and st.uptime > 0
        assert session.stats().max_value == 4096
        ks = shmlock.admin.keys("pytest/", sock, holders=True)
        assert ks[key].holder_list[0].token == hold.token
        assert shmlock.admin.keys("pytest/", sock)[key].holder_list == []
        assert session.keys("pytest/")[key].token == hold.token
        ki = shmlock.admin.info(key, sock)
        assert ki.value == b"v1" and ki.waiters == 1 and not ki.quarantined
        assert [h.session for h in shmlock.admin.holders(key, sock)] == [session.id]
        ws = shmlock.admin.waiters(key, sock)
        assert [(w.session, w.position) for w in ws] == [(other.id, 1)]
        ids = {s.id for s in shmlock.admin.sessions(sock)}
        assert {session.id, other.id} <= ids
        assert {s.id for s in session.sessions()} == ids
        shmlock.admin.force_release(key, None, sock)
        assert waiting.wait(5).token > hold.token
        with pytest.raises(shmlock.NotHeld):
            hold.release()
    with shmlock.Session(name="doomed") as doomed:
        shmlock.admin.destroy_session(doomed.id, sock)
        with pytest.raises(shmlock.SessionEnded):
            doomed.renew()
    with pytest.raises(shmlock.NotFound):
        shmlock.admin.reset(key, sock)


def test_versions_agree() -> None:
    """The package's version follows the tree's VERSION (and pyproject.toml)."""
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    assert f'version = "{shmlock.__version__}"' in (root / "pyproject.toml").read_text()
    tree = root.parent / "VERSION"
    if tree.exists():
        assert tree.read_text().strip() == shmlock.__version__


def test_every_error_code_has_a_family_and_a_message() -> None:
    """Each LOCAL_E* code maps to a subclass of ShmlockError, with local_strerror()'s text."""
    from shmlock._lib import EBASE, ECLUSTER
    for code in range(EBASE, ECLUSTER + 1):
        err = errors.error_for(-code, "local_x")
        assert type(err) is not shmlock.ShmlockError, code
        assert err.code == code and err.message == shmlock.strerror(code)
        assert str(err) == f"local_x: {err.message}"
        assert not err.message.startswith("error ")
    assert isinstance(errors.error_for(-errno.ETIMEDOUT), shmlock.NotAcquired)
    assert isinstance(errors.error_for(-errno.EBUSY), shmlock.NotAcquired)
    assert isinstance(errors.error_for(-shmlock.errors.EEXPIRED), shmlock.NotHeld)
    assert type(errors.error_for(-errno.ENOMEM)) is shmlock.ShmlockError


def test_default_session_configure_and_reopen(broker, key: str) -> None:
    shmlock.configure(name="configured", lock_delay=0)
    try:
        s = shmlock.default_session()
        assert any(i.id == s.id and i.name == "configured" for i in shmlock.sessions())
        shmlock.close_default_session()
        assert s.closed
        with shmlock.lock(key, timeout=1):
            assert shmlock.default_session().id != s.id
    finally:
        shmlock.configure()


@ctypes_path
def test_lock_goes_through_a_key_handle(session: shmlock.Session, other: shmlock.Session,
                                        key: str) -> None:
    """with s.lock(k): opens the key's handle once and goes through it: the same
    holds, tokens and errors as by name."""
    from shmlock import session as session_mod
    kb = key.encode()
    with session.lock(key, timeout=5) as hold:
        kh = session._handles[kb]
        assert hold._kh == kh
        assert session.held(key) == hold.token
        assert session.info(key).token == hold.token
        assert session.lock(key, timeout=0).token == hold.token  # re-acquire
        assert other.try_lock(key) is None
    assert not session.check_token(key, hold.token)
    with session.lock(key) as again:
        assert session._handles[kb] == kh  # the same handle, not another
        assert again.token > hold.token
    with pytest.raises(shmlock.NotHeld):
        session.release(key)
    sem = key + "/sem"
    with session.semaphore(sem, 2) as s1, other.semaphore(sem, 2) as s2:
        assert s1._kh == session._handles[sem.encode()]
        assert s2.token > s1.token
        with pytest.raises(shmlock.KindMismatch):
            session.lock(sem, timeout=0)
    # Beyond the bound, keys go by name and work as well.
    assert 0 < len(session._handles) <= session_mod._HANDLES_MAX


@ctypes_path
def test_handles_are_bounded_and_keys_beyond_go_by_name(
        session: shmlock.Session, key: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from shmlock import session as session_mod
    monkeypatch.setattr(session_mod, "_HANDLES_MAX", len(session._handles) + 1)
    with session.lock(key + "/a") as a:
        assert a._kh is not None
    with session.lock(key + "/b") as b:
        assert b._kh is None
        assert session.held(key + "/b") == b.token
    assert (key + "/b").encode() not in session._handles


def test_a_forked_child_cannot_use_the_parents_handles(session: shmlock.Session,
                                                       key: str) -> None:
    import os
    with session.lock(key) as hold:
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child's exit status is the verdict
            code = 1
            try:
                session.lock(key, timeout=0)
            except shmlock.Forked:
                code = 0
            except BaseException:
                code = 2
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
        assert session.held(key) == hold.token
