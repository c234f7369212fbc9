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
