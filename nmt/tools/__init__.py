"""Looking at and measuring nmt: model cards and attention panels (``inspect``), throughput
and peak-memory measurements (``bench``), and a training step's matmul FLOPs against the
device's peak (``flops``).

May import anything below the CLI.
"""
