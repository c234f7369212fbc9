"""Safe file writes: a crash at any moment leaves either the old file or the new one, and a
write never replaces what is not a plain file (a device, a FIFO) or loses a file's mode; a
directory appears whole or not at all."""
from __future__ import annotations

import errno
import glob
import os
import shutil
import signal
import stat
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from nmt.errors import SettingError


@contextmanager
def atomic_path(path: Path, keep_links: bool = False) -> Iterator[Path]:
    """Yield the path to write ``path``'s new content to.

    - A new or regular file: a temporary file beside it, fsynced and renamed over it on
      success, with the old file's mode (and owner, where allowed).
    - A symlink is followed: its target gets the new content, the link stays.
    - Anything else (a device, a FIFO), and any path under /dev or /proc (``/dev/stdout``
      may lead to a regular file), is written in place: renaming over it would replace the
      device, pipe or redirected file instead of writing to it.
    - With ``keep_links`` (a user's output file), a file with other hard links is written in
      full beside it first, then copied into it, so every link sees the new content (only
      that last copy is not atomic). Run files keep the rename: a hard-linked snapshot of a
      run must not change, nor be cut short by a crash.
    """
    path = Path(path)
    old = _stat(path)
    if _in_place(path, old):
        yield path
        return
    target = Path(os.path.realpath(path))
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        if keep_links and old is not None and old.st_nlink > 1:
            shutil.copyfile(tmp, target)  # same inode: every hard link sees it
        else:  # the old mode only now: a read-only one would have stopped the writes above
            os.chmod(tmp, stat.S_IMODE(old.st_mode) if old else 0o666 & ~_umask())
            _keep_owner(tmp, old)
            os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def _in_place(path: Path, old: os.stat_result | None) -> bool:
    """Whether ``path`` is written in place: a device, a FIFO, or a path of the kernel's own
    trees (/dev/stdout, /proc/self/fd/1). A directory is an error."""
    if old is not None and stat.S_ISDIR(old.st_mode):
        raise IsADirectoryError(errno.EISDIR, "is a directory", str(path))
    special = Path(os.path.abspath(path)).parts[1:2] in (("dev",), ("proc",))
    return special or (old is not None and not stat.S_ISREG(old.st_mode))


def _stat(path: Path) -> os.stat_result | None:
    try:
        return os.stat(path)  # follows symlinks: what a write would reach
    except FileNotFoundError:
        return None


def _keep_owner(tmp: Path, old: os.stat_result | None) -> None:
    if old is not None and hasattr(os, "chown"):
        try:
            os.chown(tmp, old.st_uid, old.st_gid)
        except PermissionError:  # only root may give a file away; the mode is kept regardless
            pass


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def same_file(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` are one existing file (by device and inode, not by spelling)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def check_writable(path: Path) -> None:
    """Raise OSError now if a file cannot be created at ``path``'s place, before long work."""
    if _in_place(path, _stat(path)):
        return
    parent = Path(os.path.realpath(path)).parent
    with tempfile.TemporaryFile(dir=parent):
        pass


def atomic_write_text(path: Path, text: str, keep_links: bool = False) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically (see :func:`atomic_path`)."""
    with atomic_path(path, keep_links) as tmp:
        tmp.write_text(text, encoding="utf-8")


def atomic_write_lines(path: Path, lines: list[str]) -> None:
    """Write one line per item, each ended by a newline."""
    atomic_write_text(path, "".join(line + "\n" for line in lines))


PARTIAL = ".partial-"  # .OUT.partial-PID: where a directory OUT is built, beside it


@contextmanager
def whole_directory(out: Path) -> Iterator[Path]:
    """Yield a directory to build ``out``'s content in, renamed to ``out`` (new, or an empty
    directory) when the block ends well and removed when it does not: on an error, Ctrl-C or
    SIGTERM (``timeout``, schedulers, systemd). What a killed process could not remove, a
    later call for the same ``out`` removes first.

    :raises SettingError: for ``output``, when ``out`` is not a new or empty directory
    """
    if out.exists() and not out.is_dir():
        raise SettingError("output", out, "exists and is not a directory (a file or a device); name a new directory")
    if out.exists() and any(out.iterdir()):
        raise SettingError("output", out, "exists and is not empty; choose another directory")
    remove_orphaned_partials(out)
    partial = out.parent / f".{out.name}{PARTIAL}{os.getpid()}"
    try:
        partial.mkdir(parents=True)
    except OSError as e:
        raise SettingError("output", out, f"cannot create ({e.strerror})") from None
    try:
        with _sigterm_as_interrupt():
            yield partial
            if out.exists():
                out.rmdir()
            partial.rename(out)
    finally:
        shutil.rmtree(partial, ignore_errors=True)


def remove_orphaned_partials(out: Path) -> None:
    """Delete ``out``'s partial directories whose process is gone (killed before it could clean
    up); one whose process lives is another's, still at work."""
    for partial in out.parent.glob(f".{glob.escape(out.name)}{PARTIAL}*"):
        pid = partial.name.rpartition(PARTIAL)[2]
        if pid.isdigit() and not _process_lives(int(pid)):
            shutil.rmtree(partial, ignore_errors=True)


def _process_lives(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's
        return True
    return True


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt, as Ctrl-C does, so that cleanup runs; only the main
    thread may set a handler, and elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
