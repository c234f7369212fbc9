"""One writer per run directory: an exclusive lock, held while a run trains."""
from __future__ import annotations

import fcntl
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from nmt.errors import NmtError

LOCK_FILE = "train.lock"


class RunInUse(NmtError):
    """Another process holds the run directory's lock."""


@contextmanager
def run_lock(run_dir: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``run_dir`` for the body; a second holder gets RunInUse.

    It is an ``flock`` on ``train.lock``: the kernel drops it when the holding process ends,
    however it ends (``kill -9`` too), so a lock file left behind never blocks a resume. The
    file names the holder's PID for the error message.
    """
    path = run_dir / LOCK_FILE
    try:
        with tempfile.TemporaryFile(dir=run_dir):  # an old lock file opens in a read-only directory too
            pass
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise NmtError(f"{run_dir}: cannot write in the run directory ({e.strerror}); "
                       f"training needs it writable") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", errors="replace").strip() or "unknown"
            raise RunInUse(f"{run_dir}: in use by another nmt process (PID {holder}) that is "
                           f"training in it; wait for it to end, or stop it first") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


def lock_holder(run_dir: Path) -> str | None:
    """The PID (as the lock file gives it) of the process training in ``run_dir`` now, or
    None where none holds its lock. A shared lock is tried and dropped at once."""
    try:
        fd = os.open(run_dir / LOCK_FILE, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return None
    except BlockingIOError:
        return os.pread(fd, 32, 0).decode("ascii", errors="replace").strip() or "unknown"
    finally:
        os.close(fd)
