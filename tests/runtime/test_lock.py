"""One writer per run directory."""
import os
import subprocess
import sys

import pytest

from nmt.runtime.lock import LOCK_FILE, RunInUse, run_lock

HOLD = "import sys, time; from pathlib import Path; from nmt.runtime.lock import run_lock\n" \
       "with run_lock(Path(sys.argv[1])):\n    print('held', flush=True); time.sleep(60)\n"


def test_a_second_holder_is_refused_with_the_first_ones_pid(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(RunInUse, match=f"PID {holder.pid}"):
            with run_lock(tmp_path):
                pass
    finally:
        holder.kill()
        holder.wait()
    with run_lock(tmp_path):  # the kernel dropped the killed holder's lock: the file is no obstacle
        assert (tmp_path / LOCK_FILE).read_text() == f"{os.getpid()}\n"
