"""Training throughput and memory on 1 process vs N processes of this machine, and what gloo's
all-reduce of the gradient costs a step.

    python benchmarks/ranks.py train --corpus ../shared/data/fra-eng/fra.txt [--steps 60] [--arch gru]
    torchrun --standalone --nproc-per-node 2 benchmarks/ranks.py allreduce --numel 5843472

``train`` runs ``nmt train`` for ``--steps`` steps (no validation) three ways: one process with
one thread, one process with every core's thread, and ``--nproc`` processes with one thread
each; it prints each one's target pieces a second (from run.json: optimiser steps only, the
data preparation excluded) and the peak resident memory of each process and of all together,
sampled every 20 ms. ``allreduce`` times an all-reduce of one float32 tensor of ``--numel``
elements (the model's parameter count) over the ranks, as DDP reduces the gradient.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _descendants(pid: int) -> list[int]:
    """``pid`` and every process below it, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        todo.extend(children.get(p, []))
    return found


def _rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return 0.0


def run_measured(args: list[str]) -> tuple[dict, float, float]:
    """Run ``nmt <args>``; returns (run.json, peak RSS MB of one process, peak RSS MB of all)."""
    proc = subprocess.Popen([sys.executable, str(ROOT / "cli.py"), *args], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    one = total = 0.0
    while proc.poll() is None:
        sizes = [_rss_mb(p) for p in _descendants(proc.pid)[1:] or [proc.pid]]  # workers, not the launcher
        one, total = max(one, *sizes), max(total, sum(sizes))
        time.sleep(0.02)
    if proc.returncode:
        raise SystemExit(f"nmt {' '.join(args)} failed:\n{proc.stderr.read()}")
    run_dir = Path(args[args.index("--run-dir") + 1])
    return json.loads((run_dir / "run.json").read_text()), one, total


def train(ns: argparse.Namespace) -> None:
    common = ["train", "--corpus", ns.corpus, "--max-steps", str(ns.steps), "--valid-size", "0",
              "--arch", ns.arch, "--precision", ns.precision, "--device", "cpu"]
    ways = [("1 process, 1 thread", ["--threads", "1"]),
            (f"1 process, {os.cpu_count()} threads", ["--threads", "0"]),
            (f"{ns.nproc} processes, 1 thread each", ["--nproc", str(ns.nproc), "--threads", "1"])]
    print(f"{ns.arch}, {ns.steps} steps of 128 sentences, {ns.precision}, {time.strftime('%Y-%m-%d')}")
    base = None
    with tempfile.TemporaryDirectory() as tmp:
        for k, (name, extra) in enumerate(ways):
            summary, one, total = run_measured([*common, *extra, "--run-dir", f"{tmp}/run{k}"])
            speed = summary["train_tokens_per_s"]
            base = base or speed
            print(f"{name:28s} {speed:9,.0f} target pieces/s  {speed / base:5.2f}x of 1 thread  "
                  f"peak RSS {one:6,.0f} MB a process, {total:6,.0f} MB in all")


def allreduce(ns: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    grad = torch.randn(ns.numel)
    for _ in range(3):
        dist.all_reduce(grad)
    times = []
    for _ in range(ns.repeats):
        dist.barrier()
        start = time.perf_counter()
        dist.all_reduce(grad)
        times.append(time.perf_counter() - start)
    if dist.get_rank() == 0:
        times.sort()
        print(f"gloo all-reduce of {ns.numel:,} float32 ({ns.numel * 4 / 2**20:.1f} MB) over "
              f"{dist.get_world_size()} ranks: median {times[len(times) // 2] * 1e3:.1f} ms, "
              f"best {times[0] * 1e3:.1f} ms ({ns.repeats} runs)")
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    t = sub.add_parser("train")
    t.add_argument("--corpus", required=True)
    t.add_argument("--steps", type=int, default=60)
    t.add_argument("--arch", default="gru")
    t.add_argument("--precision", default="fp32")
    t.add_argument("--nproc", type=int, default=2)
    a = sub.add_parser("allreduce")
    a.add_argument("--numel", type=int, required=True)
    a.add_argument("--repeats", type=int, default=30)
    ns = parser.parse_args()
    (train if ns.what == "train" else allreduce)(ns)


if __name__ == "__main__":
    main()
