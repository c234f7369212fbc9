"""``nmt train --nproc N``: the same command on N processes of this machine, started by
PyTorch's own launcher (``torch.distributed.run``, what ``torchrun --standalone`` runs).

The launcher stays in this process: it starts the workers (``python -m nmt train ...``),
forwards SIGINT and SIGTERM to them (they stop together and save, see
:class:`nmt.training.trainer.Trainer`), and stops them all when one fails.
"""
from __future__ import annotations

import logging
import os
import signal

from nmt.errors import NmtError


def environment_rank() -> int:
    """This process's rank among those torchrun started (0 when it started none)."""
    return int(os.environ.get("RANK", "0"))


def without_flag(argv: list[str], name: str) -> list[str]:
    """``argv`` less ``name VALUE`` and ``name=VALUE``."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == name:
            skip = True
        elif not arg.startswith(name + "="):
            out.append(arg)
    return out


def launch(nproc: int, argv: list[str]) -> int:
    """Run ``nmt <argv>`` on ``nproc`` local processes; returns the exit status: 0 once they
    all finish (or stopped and saved on SIGTERM), 130 after SIGINT, 1 when one failed with
    an error it printed itself. A worker that died otherwise (``kill -9``, a crash) raises
    an NmtError naming it, after the others were stopped."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import get_args_parser, run

    from nmt.runtime.devices import available_cores

    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, available_cores() // nproc)))  # else torchrun warns
    # torchrun's own lines about stopping workers: this launcher reports the outcome itself
    for name in list(logging.root.manager.loggerDict):
        if name.startswith("torch.distributed.elastic"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
    args = get_args_parser().parse_args(["--standalone", f"--nproc-per-node={nproc}", "-m", "nmt", *argv])
    try:
        run(args)
    except SignalException as e:
        return 130 if e.sigval == signal.SIGINT else 0
    except ChildFailedError as e:
        rank, failure = e.get_first_failure()
        if failure.exitcode == 1:  # a user's mistake, which the worker has reported
            return 1
        how = (f"was killed by {failure.signal_name()}" if failure.exitcode < 0
               else f"exited with status {failure.exitcode}")
        raise NmtError(f"training process rank {rank} (pid {failure.pid}) {how}; the others were "
                       "stopped, and the run's last checkpoint is its last complete one") from None
    return 0
