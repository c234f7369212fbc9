import os
import subprocess
import sys

import pytest

from nmt.runtime import devices
from nmt.runtime.precision import cpu_bf16_flags


def test_configure_cpu_bounds_the_kernel_caches_and_keeps_the_users_setting(monkeypatch):
    monkeypatch.setenv("LRU_CACHE_CAPACITY", "7")
    monkeypatch.delenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", raising=False)
    threads = devices.torch.get_num_threads()
    try:
        devices.configure_cpu(1)
    finally:
        devices.torch.set_num_threads(threads)
    assert os.environ["LRU_CACHE_CAPACITY"] == "7"
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == devices.KERNEL_CACHES["ONEDNN_PRIMITIVE_CACHE_CAPACITY"]


_GROWTH = """
import torch
from nmt.runtime.devices import configure_cpu
from nmt.runtime.allocator import heap_in_use
configure_cpu(1)
w = torch.randn(64, 64, dtype=torch.bfloat16)
torch.ones(1, 64, dtype=torch.bfloat16) @ w
start = heap_in_use()
for rows in range(1, 401):
    torch.ones(rows, 64, dtype=torch.bfloat16) @ w
print((heap_in_use() - start) / 2**20)
"""


@pytest.mark.skipif(not cpu_bf16_flags() or sys.platform != "linux", reason="needs native bf16 and glibc")
def test_many_matmul_shapes_leave_bounded_memory():
    """400 shapes compiled 400 kernels; unbounded, the caches kept about 200 MB of them."""
    env = {k: v for k, v in os.environ.items() if k not in devices.KERNEL_CACHES}
    grown = float(subprocess.run([sys.executable, "-c", _GROWTH], env=env, capture_output=True,
                                 text=True, check=True).stdout)
    assert grown < 100, f"{grown:.0f} MB"



_WORKER_HEAP = """
import ctypes, threading
from nmt.runtime.devices import configure_cpu
configure_cpu(1)
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
found = []
worker = threading.Thread(target=lambda: found.append(libc.malloc(4096)))
worker.start()
worker.join()
maps = open("/proc/self/maps").read().splitlines()
start, end = (int(x, 16) for x in next(m for m in maps if m.endswith("[heap]")).split()[0].split("-"))
print(start <= found[0] < end)
"""


@pytest.mark.skipif(sys.platform != "linux", reason="glibc's allocator")
def test_worker_threads_allocate_where_freed_blocks_are_kept():
    """A decoding worker's thread takes memory from the main heap, whose freed blocks the
    thresholds keep; an arena of its own gave them back, and beam search page-faulted 0.5-1.2
    GB in again per 1,000 sentences."""
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    out = subprocess.run([sys.executable, "-c", _WORKER_HEAP], env=env, capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == "True"
