import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from nmt import __version__
from nmt.errors import NmtError
from nmt.runtime.allocator import ENV, MARKER, TCMALLOC, find_tcmalloc, in_use, preload_environment
from nmt.runtime.devices import describe


@pytest.fixture
def library_dir(tmp_path):
    (tmp_path / TCMALLOC).symlink_to(_a_loaded_library())
    return (str(tmp_path),)


def test_tcmalloc_is_preloaded_before_what_was_there(library_dir):
    environ = preload_environment({"LD_PRELOAD": "libfoo.so", "PATH": "/bin"}, "linux", library_dir)
    assert environ["LD_PRELOAD"] == f"{library_dir[0]}/{TCMALLOC} libfoo.so"
    assert environ["PATH"] == "/bin"


def test_nothing_is_preloaded_where_it_cannot_be_or_should_not_be(library_dir, tmp_path):
    assert preload_environment({}, "darwin", library_dir) is None
    assert preload_environment({ENV: "system"}, "linux", library_dir) is None
    assert preload_environment({"LD_PRELOAD": "/usr/lib/libjemalloc.so.2"}, "linux", library_dir) is None
    assert preload_environment({}, "linux", (str(tmp_path / "empty"),)) is None
    assert find_tcmalloc((str(tmp_path / "empty"),)) is None


def test_a_named_library_must_exist(tmp_path, library_dir):
    chosen = f"{library_dir[0]}/{TCMALLOC}"
    assert preload_environment({ENV: chosen}, "linux", ())["LD_PRELOAD"] == chosen
    with pytest.raises(NmtError, match=f"^{ENV}=.*nope: no such library file"):
        preload_environment({ENV: str(tmp_path / "nope")}, "linux")


def _nmt_version(env_value: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", ENV, MARKER)}
    return subprocess.run([sys.executable, "-m", "nmt", "--version"], env=env | {ENV: env_value},
                          capture_output=True, text=True, timeout=60)


def test_a_named_file_that_is_no_shared_library_is_one_line(tmp_path):
    (tmp_path / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    for path, problem in [(tmp_path / "passwd", "not a shared library"), (tmp_path, "is a directory")]:
        done = _nmt_version(str(path))
        assert done.returncode == 1 and done.stdout == ""
        assert done.stderr.startswith(f"error: {ENV}={path}: {problem}") and done.stderr.count("\n") == 1


def _a_loaded_library() -> str:
    """The path of a real shared library this process has mapped (tcmalloc where installed)."""
    maps = Path("/proc/self/maps").read_text().split()
    return find_tcmalloc() or next(p for p in maps if re.search(r"/lib(c|m|pthread)[.-].*so", p))


@pytest.mark.skipif(sys.platform != "linux", reason="LD_PRELOAD is Linux's")
def test_the_command_runs_itself_again_at_most_once_whatever_the_library_is_named(tmp_path):
    alias = tmp_path / "fastalloc.so"  # no "malloc" in the name: once the loop's trigger
    alias.symlink_to(_a_loaded_library())
    done = _nmt_version(str(alias))
    assert done.returncode == 0 and done.stdout == f"nmt {__version__}\n" and done.stderr == ""
    assert preload_environment({ENV: str(alias), MARKER: str(alias), "LD_PRELOAD": str(alias)}, "linux") is None


def test_an_empty_setting_is_no_setting(library_dir):
    environ = preload_environment({ENV: ""}, "linux", library_dir)
    assert environ == {ENV: "", **preload_environment({}, "linux", library_dir)}
    assert environ["LD_PRELOAD"] == f"{library_dir[0]}/{TCMALLOC}"


@pytest.mark.skipif(sys.platform != "linux", reason="LD_PRELOAD is Linux's")
def test_a_command_started_with_stdout_closed_runs_itself_again_without_a_traceback(tmp_path):
    alias = tmp_path / "fastalloc.so"  # a library to preload, so that the command runs itself again
    alias.symlink_to(_a_loaded_library())
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", ENV, MARKER)}
    done = subprocess.run(["bash", "-c", f'"{sys.executable}" -m nmt --version >&-'], env=env | {ENV: str(alias)},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stderr == ""


def _allocators(env_value: str) -> list[str]:
    """What the process reports before and after ``nmt``'s entry point (``--version``)."""
    code = ("from nmt.runtime.allocator import in_use; print(in_use(), flush=True); "
            "from nmt.__main__ import main; main()")
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", ENV, MARKER)}
    out = subprocess.run([sys.executable, "-c", code, "--version"], env=env | {ENV: env_value},
                         capture_output=True, text=True, check=True).stdout.split()
    assert out[-2:] == ["nmt", __version__]
    return out[:-2]


@pytest.mark.skipif(find_tcmalloc() is None, reason="tcmalloc is not installed (Debian: libtcmalloc-minimal4)")
def test_the_command_runs_itself_again_on_tcmalloc_once():
    assert _allocators("auto") == ["system", "tcmalloc"]
    assert _allocators("system") == ["system"]


def test_the_cpu_is_described_with_its_malloc():
    expected = "system malloc" if in_use() == "system" else in_use()
    assert describe(torch.device("cpu")).endswith(f", {expected})")
