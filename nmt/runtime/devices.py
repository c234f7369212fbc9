"""Choosing the device; CPU threads and allocator settings."""
from __future__ import annotations

import ctypes
import os
import platform

import torch

from nmt.errors import SettingError
from nmt.runtime.allocator import in_use as allocator_in_use


def pick_device(spec: str) -> torch.device:
    """``auto`` picks CUDA, then Apple MPS, then CPU; ``cpu``, ``cuda``, ``cuda:N``, ``mps`` are explicit."""
    if spec == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        device = torch.device(spec)
    except RuntimeError:
        raise SettingError("device", spec, "not a device; use auto, cpu, cuda, cuda:N or mps") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise SettingError("device", spec, f"CUDA is not available on this machine (torch "
                               f"{torch.__version__}); use {{device}} cpu or auto", ("device",))
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise SettingError("device", spec, f"only {torch.cuda.device_count()} CUDA device(s) here")
    elif device.type == "mps" and not torch.backends.mps.is_available():
        raise SettingError("device", spec, "Apple MPS is not available on this machine")
    elif device.type not in ("cpu", "cuda", "mps"):
        raise SettingError("device", spec, "unsupported device type; use auto, cpu, cuda, cuda:N or mps")
    return device


def describe(device: torch.device) -> str:
    """A human-readable name, e.g. ``cuda:0 (NVIDIA H200)`` or ``cpu (2 threads, tcmalloc)``:
    on CPU, the malloc too (:mod:`nmt.runtime.allocator`), since it sets the memory a run takes."""
    if device.type == "cuda":
        return f"{device} ({torch.cuda.get_device_name(device)})"
    if device.type == "cpu":
        threads = torch.get_num_threads()
        malloc = allocator_in_use()
        return f"cpu ({threads} thread{'s' if threads != 1 else ''}, {'system malloc' if malloc == 'system' else malloc})"
    return str(device)


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work, so a timer around it measures it (a no-op on CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def configure_cpu(threads: int, processes: int = 1) -> None:
    """Use ``threads`` intra-op threads (when 0: the available cores shared by ``processes``
    on this machine, at least one), keep freed memory and bound the compiled-kernel caches.

    glibc hands every large block (a (vocab, tokens) logits matrix, say) straight back to the
    OS and page-faults it in again on the next step; on this project's 2-core CPU that made
    a 41 MB softmax 3x slower than the arithmetic. Raising its mmap and trim thresholds
    keeps the blocks for reuse, the fix PyTorch's CPU tuning guide gets from jemalloc or
    tcmalloc. Training went from 283 to 309 sentences/s at the reference size (40-step profile).
    All threads share the main arena, where those thresholds hold.
    """
    if threads == 0:
        threads = max(1, available_cores() // processes)
    torch.set_num_threads(threads)
    _keep_freed_memory()
    _bound_kernel_caches()


def available_cores() -> int:
    """The CPU cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _keep_freed_memory() -> None:
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return
    m_trim_threshold, m_mmap_threshold, m_arena_max = -1, -3, -8  # from glibc's malloc.h
    libc = ctypes.CDLL("libc.so.6")
    libc.mallopt(m_mmap_threshold, 1 << 30)
    libc.mallopt(m_trim_threshold, (1 << 31) - 1)
    # The thresholds hold in the main arena only. Threads (translation's decoding workers)
    # would each get an arena of their own, which hands freed blocks back regardless: beam
    # search page-faulted 0.5-1.2 GB in again per 1,000 sentences, 10% of its time.
    libc.mallopt(m_arena_max, 1)


# oneDNN and PyTorch's layer over it (ideep) each cache a compiled bf16 matmul per shape, about
# 0.27 and 0.25 MB, up to 1,024 of them by default. Every batch length is a new shape: over 300
# training steps they held about half a GB. 64 each held 41 MB less than 128 at the peak of 300
# steps, at no measured cost in speed (docs/performance.md).
KERNEL_CACHES = {"ONEDNN_PRIMITIVE_CACHE_CAPACITY": "64", "LRU_CACHE_CAPACITY": "64"}


def _bound_kernel_caches() -> None:
    """Both libraries read their capacity from the environment when first used; a value the
    user set is kept."""
    for name, capacity in KERNEL_CACHES.items():
        os.environ.setdefault(name, capacity)
