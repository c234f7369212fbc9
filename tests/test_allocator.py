import os
import subprocess
import sys

import pytest
import torch

from nmt import __version__
from nmt.errors import NmtError
from nmt.runtime.allocator import ENV, TCMALLOC, find_tcmalloc, in_use, preload_environment
from nmt.runtime.devices import describe


@pytest.fixture
def library_dir(tmp_path):
    (tmp_path / TCMALLOC).write_bytes(b"")
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


def _allocators(env_value: str) -> list[str]:
    """What the process reports before and after ``nmt``'s entry point (``--version``)."""
    code = ("from nmt.runtime.allocator import in_use; print(in_use(), flush=True); "
            "from nmt.__main__ import main; main()")
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", ENV)}
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
