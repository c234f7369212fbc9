"""Safe writes: what is at the output path decides how it is written; a directory appears
whole or not at all."""
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from nmt.errors import SettingError
from nmt.runtime.fileio import PARTIAL, atomic_path, atomic_write_text, check_writable, same_file, whole_directory


def test_a_new_file_gets_the_usual_mode_and_no_temporary_is_left(tmp_path):
    atomic_write_text(tmp_path / "new.txt", "hello\n")
    assert (tmp_path / "new.txt").read_text() == "hello\n"
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE((tmp_path / "new.txt").stat().st_mode) == 0o666 & ~umask
    assert [p.name for p in tmp_path.iterdir()] == ["new.txt"]


@pytest.mark.parametrize("mode", [0o600, 0o444])  # 0444: replaced all the same, still read-only
def test_a_replaced_file_keeps_its_mode(tmp_path, mode):
    path = tmp_path / "kept.txt"
    path.write_text("old\n")
    path.chmod(mode)
    atomic_write_text(path, "new\n")
    assert path.read_text() == "new\n" and stat.S_IMODE(path.stat().st_mode) == mode


def test_a_symlink_is_followed_to_its_target(tmp_path):
    target = tmp_path / "real.txt"
    target.write_text("old\n")
    (tmp_path / "link.txt").symlink_to(target)
    atomic_write_text(tmp_path / "link.txt", "new\n")
    assert (tmp_path / "link.txt").is_symlink() and target.read_text() == "new\n"
    (tmp_path / "dangling").symlink_to(tmp_path / "created.txt")
    atomic_write_text(tmp_path / "dangling", "x\n")
    assert (tmp_path / "dangling").is_symlink() and (tmp_path / "created.txt").read_text() == "x\n"


def test_hard_links_see_a_users_output_but_not_a_run_file(tmp_path):
    path = tmp_path / "out.txt"
    path.write_text("old\n")
    os.link(path, tmp_path / "link.txt")
    atomic_write_text(path, "new\n", keep_links=True)  # an output file: every link sees it
    assert (tmp_path / "link.txt").read_text() == "new\n" and same_file(path, tmp_path / "link.txt")
    atomic_write_text(path, "newer\n")  # a run file: a hard-linked snapshot keeps its copy
    assert path.read_text() == "newer\n" and (tmp_path / "link.txt").read_text() == "new\n"


def test_a_path_through_proc_is_written_in_place(tmp_path):
    path = tmp_path / "redirected.txt"
    path.write_text("old\n")
    inode = path.stat().st_ino
    with open(path, "a") as f:  # like `nmt ... -o /dev/stdout >> redirected.txt`
        atomic_write_text(f"/proc/self/fd/{f.fileno()}", "new\n")
    assert path.stat().st_ino == inode and path.read_text() == "new\n"


def test_a_fifo_or_device_is_written_in_place_not_replaced(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        atomic_write_text(fifo, "through the pipe\n")
        assert os.read(reader, 100) == b"through the pipe\n"
    finally:
        os.close(reader)
    assert stat.S_ISFIFO(fifo.stat().st_mode)
    atomic_write_text(os.devnull, "gone\n")
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)


def test_a_failed_write_leaves_the_old_file(tmp_path):
    path = tmp_path / "keep.txt"
    path.write_text("old\n")
    with pytest.raises(RuntimeError):
        with atomic_path(path) as tmp:
            tmp.write_text("half")
            raise RuntimeError("crash")
    assert path.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["keep.txt"]


def test_same_file_compares_inodes_not_spelling(tmp_path):
    (tmp_path / "x").write_text("x")
    (tmp_path / "d").mkdir()
    assert same_file(tmp_path / "x", tmp_path / "d" / ".." / "x")
    assert not same_file(tmp_path / "x", tmp_path / "missing")


def test_check_writable_refuses_a_directory_and_a_missing_parent(tmp_path):
    check_writable(tmp_path / "fine.json")
    with pytest.raises(IsADirectoryError):
        check_writable(tmp_path)
    with pytest.raises(FileNotFoundError):
        check_writable(tmp_path / "no" / "such" / "dir.json")
    assert list(tmp_path.iterdir()) == []


def test_a_whole_directory_appears_only_when_its_block_ends_well(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(RuntimeError):
        with whole_directory(out) as partial:
            (partial / "a").write_text("a")
            raise RuntimeError("half way")
    assert not out.exists() and not list(tmp_path.iterdir())
    with whole_directory(out) as partial:
        (partial / "a").write_text("a")
        assert not out.exists()
    assert (out / "a").read_text() == "a" and list(tmp_path.iterdir()) == [out]


def test_a_whole_directory_refuses_a_file_or_a_full_directory(tmp_path):
    (tmp_path / "file").write_text("x")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    for name, says in (("file", "not a directory (a file or a device)"), ("full", "not empty")):
        with pytest.raises(SettingError, match=re.escape(says)):
            with whole_directory(tmp_path / name):
                pass
    with pytest.raises(SettingError, match=re.escape("not a directory")):
        with whole_directory(Path("/dev/null")):
            pass


def test_partials_of_processes_that_are_gone_are_removed_and_others_kept(tmp_path):
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    orphan = tmp_path / f".out{PARTIAL}{int(gone.stdout)}"
    alive = tmp_path / f".out{PARTIAL}{os.getppid()}"  # this test's parent: a process that lives
    other = tmp_path / f".outer{PARTIAL}{int(gone.stdout)}"  # another directory's
    for partial in (orphan, alive, other):
        partial.mkdir()
        (partial / "x").write_text("x")
    with whole_directory(tmp_path / "out"):
        pass
    assert not orphan.exists() and alive.exists() and other.exists()
