"""An exclusive lock per store key, for the processes and threads that share a local store
(a sweep's workers on one host, or hosts sharing a path whose filesystem honours flock),
so that a result two trials need at once is computed by one of them while the other waits
and reads it back (pipeline/store.py `Store.once`).

Why flock on a file beside the entry: the kernel drops the lock when its holder dies, even
by SIGKILL or the OOM killer, so a dead worker never leaves a lock to time out; every open()
is its own open file description, so threads of one process exclude each other too. The
holder removes the file before it lets go; a waiter that then finds its file gone from the
path (or another in its place) takes a lock on the new one instead, so two holders never
hold different files of one key."""
from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import socket

log = logging.getLogger(__name__)


def _same(fd: int, path: str) -> bool:
    try:
        st, cur = os.fstat(fd), os.stat(path)
    except FileNotFoundError:
        return False
    return (st.st_dev, st.st_ino) == (cur.st_dev, cur.st_ino)


@contextlib.contextmanager
def locked(path: str, what: str):
    """Hold an exclusive lock on `path` (created if absent) for the block; `what` names the
    result it guards in the one line logged when another holder makes this one wait. On a
    filesystem that has no locks the block runs unlocked (logged once a directory)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd = _acquire(path, what)
    if fd is None:
        yield
        return
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{socket.gethostname()} pid {os.getpid()}".encode(), 0)
        yield
    finally:
        try:
            os.unlink(path)             # before letting go: a waiter on this file retries
        except FileNotFoundError:
            pass
        os.close(fd)


_UNLOCKED: set[str] = set()


def _acquire(path: str, what: str) -> int | None:
    """An open descriptor of the file at `path`, locked; None where flock is refused."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 256, 0).decode(errors="replace") or "another process"
                log.info("store: waiting for %s, being computed by %s", what, holder)
                fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as e:            # ENOLCK, EOPNOTSUPP: a filesystem without locks
            os.close(fd)
            where = os.path.dirname(os.path.dirname(path))
            if where not in _UNLOCKED:
                _UNLOCKED.add(where)
                log.warning("store: %s refuses file locks (%s): trials that need one result at once "
                            "may both compute it", where, e.strerror or e)
            return None
        except BaseException:
            os.close(fd)
            raise
        if _same(fd, path):
            return fd
        os.close(fd)                    # its holder removed it: lock the file at the path now
