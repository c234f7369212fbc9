"""``nmt train --nproc N``: the same command on N processes of this machine, started by
PyTorch's own launcher (``torch.distributed.run``, what ``torchrun --standalone`` runs).

The launcher stays in this process: it starts the workers (``python -m nmt train ...``),
forwards SIGINT and SIGTERM to them (they stop together and save, see
:class:`nmt.training.trainer.Trainer`), and stops them all when one fails. A worker whose
launcher is gone (``kill -9``) stops as on SIGTERM (:func:`watch_launcher`).
"""
from __future__ import annotations

import logging
import os
import signal
import threading
import time

from nmt.errors import NmtError, SettingError

log = logging.getLogger(__name__)

LAUNCHER_PID = "NMT_LAUNCHER_PID"  # set by launch(): a worker orphaned before it looked knows


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


def check_process_count(nproc: int, device_spec: str, oversubscribe: bool = False) -> None:
    """Refuse more training processes than this machine can run side by side: on CUDA, one
    GPU each; on CPU, one core each (each rank's threads wait for the others' at every
    all-reduce, so an oversubscribed run crawls while every rank holds a model and its data),
    unless ``oversubscribe``."""
    import torch

    if device_spec.startswith("cuda"):
        from nmt.runtime.devices import pick_device
        pick_device(device_spec)  # no CUDA here: that error, not one about cores
    gpus = torch.cuda.device_count() if device_spec == "auto" or device_spec.startswith("cuda") else 0
    if gpus:
        if nproc > gpus:
            raise SettingError("nproc", nproc, f"only {gpus} CUDA device(s) here; a training process "
                                               "needs one GPU of its own")
        return
    from nmt.runtime.devices import available_cores

    cores = available_cores()
    if nproc > cores and not oversubscribe:
        raise SettingError("nproc", nproc, f"this machine gives nmt {cores} CPU core(s); more processes than "
                           "cores wait for each other at every step while each holds a whole model. Use "
                           "{nproc} " + f"{cores} or fewer, or {{oversubscribe}} to run them anyway",
                           ("nproc", "oversubscribe"))


def watch_launcher(poll_s: float = 0.5) -> None:
    """In a worker: once the process that started it is gone (the launcher killed with
    ``kill -9``, which cannot forward a signal), send this process SIGTERM, so training stops
    after its step and saves, as on a SIGTERM to the launcher; every rank sees it and they stop
    together. Without it the workers, re-parented to init, trained on and held the run's lock."""
    # The launcher is the worker's parent: torch's elastic agent starts workers with Popen
    parent = int(os.environ.get(LAUNCHER_PID, 0)) or os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        # every rank says it: the first to notice stops them all, maybe before rank 0 notices
        log.warning("the launcher (pid %d) is gone: stopping after this step, saving", parent)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="nmt-launcher-watch", daemon=True).start()


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
    os.environ[LAUNCHER_PID] = str(os.getpid())
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
