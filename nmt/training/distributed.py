"""Training on several processes with ``torch.distributed``, as ``torchrun`` starts them.

Every process (rank) holds a replica of the model, takes its share of each global batch and
DistributedDataParallel averages the gradients, so all replicas take the same optimiser
step. The backend follows the device: gloo on CPU, NCCL on CUDA with one GPU per rank
(``LOCAL_RANK``). Rank 0 alone writes and shows anything (:mod:`nmt.training.run_writer`).

:class:`Processes` is what the training loop asks of the group. A single process is the
same object with one member, where every collective returns its input, so the loop has one
code path for both.
"""
from __future__ import annotations

import contextlib
import datetime
import gc
import logging
import os
import re
import traceback
from dataclasses import dataclass
from typing import Any, Iterator, TypeVar

import torch
import torch.distributed as dist
from torch import nn

from nmt.errors import NmtError
from nmt.runtime.devices import pick_device
from nmt.training.launch import watch_launcher

log = logging.getLogger(__name__)

T = TypeVar("T")

# A collective that waits longer than this fails with an error instead of hanging; rank 0's
# longest lone task (training SentencePiece on a big corpus) must fit in it.
TIMEOUT = datetime.timedelta(minutes=15)


@dataclass(frozen=True)
class Processes:
    """The processes training one model together; by default one alone."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0  # this machine's ranks are 0 .. local_world - 1
    local_world: int = 1
    device: torch.device = torch.device("cpu")  # where collectives' tensors live

    @property
    def is_main(self) -> bool:
        """Whether this process writes the run directory and the terminal."""
        return self.rank == 0

    def shard(self, items: list[T]) -> list[T]:
        """This rank's share of ``items``: every ``world``-th, from its rank on."""
        return items[self.rank::self.world]

    def sum(self, values: list[float]) -> list[float]:
        """Each value summed over the ranks (in float64, so counts stay exact)."""
        if self.world == 1:
            return values
        tensor = torch.tensor(values, dtype=torch.float64, device=self.device)
        with lost_peers():
            dist.all_reduce(tensor)
        return tensor.tolist()

    def gather(self, value: T) -> list[T]:
        """Every rank's ``value`` (any picklable object), in rank order, on every rank."""
        if self.world == 1:
            return [value]
        gathered: list[Any] = [None] * self.world
        with lost_peers():
            dist.all_gather_object(gathered, value)
        return gathered

    def broadcast(self, value: T) -> T:
        """Rank 0's ``value``, on every rank."""
        if self.world == 1:
            return value
        box = [value]
        with lost_peers():
            dist.broadcast_object_list(box, src=0)
        return box[0]

    def barrier(self) -> None:
        """Wait until every rank gets here (rank 0 prepared the run's data, say)."""
        if self.world > 1:
            with lost_peers():
                dist.barrier()

    def replicate(self, model: nn.Module) -> nn.Module:
        """``model`` wrapped so that backward averages its gradients over the ranks (and rank
        0's weights are copied to all at the start); ``model`` itself with one rank."""
        if self.world == 1:
            return model
        ids = [self.device.index] if self.device.type == "cuda" else None
        # The models' buffers are constants (piece maps, position tables): nothing to broadcast
        # each step. The gradients live in DDP's buckets rather than in copies of them.
        return nn.parallel.DistributedDataParallel(model, device_ids=ids, forward_sync_buffers=False,
                                                   gradient_as_bucket_view=True)

    def close(self) -> None:
        """Leave the process group (if this process joined one)."""
        if dist.is_initialized():
            dist.destroy_process_group()


def no_sync(replica: nn.Module) -> contextlib.AbstractContextManager:
    """Accumulate gradients locally in a backward pass, without the all-reduce."""
    return replica.no_sync() if isinstance(replica, nn.parallel.DistributedDataParallel) \
        else contextlib.nullcontext()


def launched() -> bool:
    """Whether this process was started by torchrun (or ``nmt train --nproc``)."""
    return "TORCHELASTIC_RUN_ID" in os.environ or int(os.environ.get("WORLD_SIZE", "1")) > 1


def join(device_spec: str) -> Processes:
    """Join the process group torchrun describes in the environment (RANK, WORLD_SIZE,
    LOCAL_RANK, MASTER_ADDR, ...); one process alone when there is none. Picks the device
    from ``device_spec``, a CUDA rank taking GPU ``LOCAL_RANK``."""
    device = pick_device(device_spec)
    if not launched():
        return Processes(device=device)
    watch_launcher()
    env = {k: int(os.environ.get(k, default)) for k, default in
           (("RANK", 0), ("WORLD_SIZE", 1), ("LOCAL_RANK", 0), ("LOCAL_WORLD_SIZE", 1))}
    if device.type == "cuda":
        if device.index is None:
            device = torch.device("cuda", env["LOCAL_RANK"] % torch.cuda.device_count())
        torch.cuda.set_device(device)
    elif device.type != "cpu":
        raise NmtError(f"training on several processes runs on CPU or CUDA, not {device.type}")
    backend = "nccl" if device.type == "cuda" else "gloo"
    try:
        dist.init_process_group(backend, timeout=TIMEOUT)
    except (RuntimeError, ValueError) as e:
        raise NmtError(f"cannot join the training processes ({backend}): {e}") from None
    log.debug("rank %d of %d on %s (%s)", env["RANK"], env["WORLD_SIZE"], device, backend)
    return Processes(env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"], device)


# How gloo and NCCL say that a peer is gone or silent (some raise a plain RuntimeError)
_LOST = re.compile(r"Connection closed by peer|Connection reset|Broken pipe|timed out|Timeout|NCCL error", re.I)


@contextlib.contextmanager
def lost_peers() -> Iterator[None]:
    """A collective that fails because another rank died or stalled becomes one clear error."""
    try:
        yield
    except RuntimeError as e:
        if not (isinstance(e, dist.DistError) or _LOST.search(str(e))):
            raise
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        said = next((line for line in lines if _LOST.search(line)), lines[0] if lines else type(e).__name__)
        raise NmtError(f"lost contact with the other training processes (did one die?): {said}") from None


@contextlib.contextmanager
def joined(device_spec: str) -> Iterator[Processes]:
    """:func:`join` for the ``with`` block; the group is left at its end, also on an error."""
    processes = join(device_spec)
    try:
        yield processes
    except BaseException as e:
        # the traceback's frames hold the trainer and its replica: cleared, the collector frees them
        traceback.clear_frames(e.__traceback__)
        gc.collect()
        processes.close()
        raise
    # A DistributedDataParallel replica sits in a reference cycle (it outlives its last name
    # until the collector runs), so without this it is freed at interpreter exit, after the group
    # is gone: a finished worker once ended there in std::terminate (SIGABRT) on 2 busy cores.
    gc.collect()
    processes.barrier()  # no rank tears its connections down while another still uses them
    processes.close()


@contextlib.contextmanager
def leading(processes: Processes) -> Iterator[None]:
    """Rank 0 does the block's work alone (the block tests :attr:`Processes.is_main`); the
    others wait at its end for the outcome, and raise rank 0's error if it failed."""
    if processes.world == 1:
        yield
        return
    if not processes.is_main:
        yield
        failure = processes.broadcast(None)
        if failure:
            raise NmtError(failure)
        return
    try:
        yield
    except BaseException as e:
        processes.broadcast(str(e) or type(e).__name__)
        raise
    processes.broadcast(None)


def seed_rank(processes: Processes, seed: int, step: int) -> None:
    """Give ranks other than 0 their own random stream (dropout), a function of seed, step and
    rank; rank 0 keeps the one a single process would have."""
    if processes.rank:
        torch.manual_seed(seed * 1_000_003 + step * 1009 + processes.rank)
