"""How preparing and training scale with the corpus: time and peak memory of ``nmt prepare``
and of ``nmt train --data`` on fra.txt copied 1, 4 and 16 times.

    python benchmarks/data_scale.py --corpus ../shared/data/fra-eng/fra.txt [--copies 1,4,16]
                                    [--steps 50] [--work /tmp/data-scale] [--json-out scale.json]

Each copy's sources get a marker (`` [k]``, the single copy too, so that sentence lengths are
alike at every size), so that every pair is distinct and the held-out split has as many
sentences to choose from as pairs. For each size it runs, as a user would,
in a process of its own:
- ``nmt prepare --corpus C -o DATA``: wall time, peak resident memory, the time of each pass
  (from its log), and pairs a second end to end without SentencePiece's training on its
  sample (a fixed size, whatever the corpus);
- ``nmt train --data DATA --max-steps N --max-pass-pieces 2000``, once a seed: wall time, the
  time from launch to the first step (when the process says it is training) and its resident
  memory then, which holds what the data costs, and the peak over the steps, which holds the
  activations and the allocator's cache of the batches the seed happened to draw.
Peak memory is the process's own high-water mark (``ru_maxrss`` from ``wait4``). Run it alone
on the machine: a second CPU-heavy job on 2 cores distorts every time.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Training's peak memory is mostly the activations of the largest batch its steps happen to
# draw, which differs from run to run; passes of at most this many padded pieces (the same
# gradients: nmt train --max-pass-pieces) make the peaks comparable, leaving what the data costs.
MAX_PASS_PIECES = 2000
LAP = re.compile(r"(read, normalised and filtered|held out|trained SentencePiece|encoded|fingerprinted)"
                 r".*? in ([\d.]+) s")


def build(corpus: Path, copies: int, out: Path) -> Path:
    """``corpus`` repeated ``copies`` times, each copy's sources marked, unless built already."""
    if not out.exists():
        lines = corpus.read_text(encoding="utf-8").splitlines()
        tmp = out.with_suffix(".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            for k in range(copies):
                for line in lines:
                    cols = line.split("\t")
                    cols[0] = f"{cols[0]} [{k}]"
                    f.write("\t".join(cols) + "\n")
        tmp.replace(out)
    return out


def run(args: list[str], mark: str | None = None) -> dict:
    """``nmt ARGS`` in a process of its own: wall seconds, peak RSS (MB), its stderr, and the
    seconds from launch to the first stderr line holding ``mark`` and the resident memory then."""
    start = time.monotonic()
    process = subprocess.Popen([sys.executable, str(ROOT / "cli.py"), *args], cwd=ROOT, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, env=os.environ | {"COLUMNS": "200"})
    lines, marked, rss_then = [], None, None
    for line in process.stderr:
        lines.append(line)
        if mark is not None and marked is None and mark in line:
            marked, rss_then = time.monotonic() - start, _rss_mb(process.pid)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.monotonic() - start
    stderr = "".join(lines)
    if status:
        sys.exit(f"nmt {' '.join(args)} failed:\n{stderr}")
    return {"seconds": round(wall, 1), "peak_rss_mb": round(usage.ru_maxrss / 1024),
            "to_mark_s": None if marked is None else round(marked, 1), "rss_at_mark_mb": rss_then, "stderr": stderr}


def _rss_mb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1)) // 1024


def measure(corpus: Path, copies: int, work: Path, steps: int, seeds: int) -> dict:
    source = build(corpus, copies, work / f"fra{copies}x.tsv")
    data, run_dir = work / f"data{copies}x", work / f"run{copies}x"
    for path in (data, run_dir):
        subprocess.run(["rm", "-rf", str(path)], check=True)
    prepared = run(["-v", "prepare", "--corpus", str(source), "-o", str(data)])  # -v: each pass's time
    laps = {name.split(",")[0].split()[0]: float(seconds) for name, seconds in LAP.findall(prepared["stderr"])}
    pairs = json.loads((data / "data.json").read_text())["pairs"]
    without_spm = prepared["seconds"] - laps.get("trained", 0.0)
    trained = []
    for seed in range(1, seeds + 1):  # each draws other batches, whose shapes move the peak
        subprocess.run(["rm", "-rf", str(run_dir)], check=True)
        trained.append(run(["train", "--data", str(data), "--run-dir", str(run_dir), "--max-steps", str(steps),
                            "--valid-every", str(10 * steps), "--valid-bleu-size", "1", "--seed", str(seed),
                            "--max-pass-pieces", str(MAX_PASS_PIECES)], mark="training on"))
    return {"copies": copies, "pairs": pairs["read"], "train_pairs": pairs["train"],
            "prepare_s": prepared["seconds"], "prepare_peak_rss_mb": prepared["peak_rss_mb"], "prepare_laps_s": laps,
            "prepare_pairs_per_s_without_spm": round(pairs["read"] / without_spm),
            "train_s": [t["seconds"] for t in trained], "train_peak_rss_mb": [t["peak_rss_mb"] for t in trained],
            "train_rss_at_start_mb": [t["rss_at_mark_mb"] for t in trained],
            "train_first_step_s": [t["to_mark_s"] for t in trained]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--copies", default="1,4,16")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--seeds", type=int, default=3, help="Training runs per size, each with its own seed.")
    parser.add_argument("--work", type=Path, default=Path("/tmp/data-scale"))
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    rows = []
    for copies in map(int, args.copies.split(",")):
        rows.append(measure(args.corpus.resolve(), copies, args.work, args.steps, args.seeds))
        print(json.dumps(rows[-1]), flush=True)
    base = rows[0]
    print("\n| copies | pairs | prepare s | pairs/s without SentencePiece | prepare peak RSS MB | "
          "first step s | train RSS at its start MB | train peak RSS MB, each seed |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        start, base_start = max(r["train_rss_at_start_mb"]), max(base["train_rss_at_start_mb"])
        print(f"| x{r['copies']} | {r['pairs']:,} | {r['prepare_s']} | {r['prepare_pairs_per_s_without_spm']:,} | "
              f"{r['prepare_peak_rss_mb']:,} ({r['prepare_peak_rss_mb'] / base['prepare_peak_rss_mb']:.2f}x) | "
              f"{max(r['train_first_step_s'])} | {start:,} ({start / base_start:.2f}x) | "
              f"{', '.join(f'{m:,}' for m in r['train_peak_rss_mb'])} |")
    if args.json_out:
        args.json_out.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
