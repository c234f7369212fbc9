"""Do the defaults hold on a small corpus? Trains on a random sample of fra-eng (30,000 pairs
unless told) with validation and test sets drawn from the rest, and prints test BLEU and wall
time for each configuration.

    python benchmarks/small_corpus.py --corpus ../shared/data/fra-eng/fra.txt --work /tmp/small
                                      [--pairs 30000] [--epochs 10] [--patience 3]
                                      [--max-minutes 30] [--only gru,transformer]

The split: the corpus's distinct English sources are shuffled (seed 1); the first 2,000 give
the test set and the next 1,000 the validation set (each with its first translation), and
the training pairs are a random sample of the pairs whose source is in neither.

Each configuration trains once, in a process of its own, with validation at every epoch,
``--patience P --max-minutes M`` and every validation's weights kept. Training is the same
step by step whatever the budget (the schedule and the batches do not depend on it), so the
first N epochs of that run are the run a ``--epochs N`` budget trains, and its rows are
scored on the best weights of those epochs (``--weights step-K``) and on the average of
the last 5 of them, beside the rows of the whole run (patience or minutes). Run it alone on the
machine: a second CPU-heavy job on 2 cores distorts every time.
"""
from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
AVERAGED = 5  # checkpoints in an average, as docs/after-training.md measured

OLD = ["--no-tie-embeddings", "--label-smoothing", "0.1"]  # a Transformer's settings from 50,000 pairs on
CONFIGS = {
    "gru": [],
    # under 50,000 pairs: the decoder's input and output embeddings tied, label smoothing 0.2
    "transformer": ["--arch", "transformer"],
    "transformer-large-corpus": ["--arch", "transformer", *OLD],
    # what small-data Transformers are known to need (Araabi & Monz 2020; Sennrich & Zhang
    # 2019 for RNNs): more dropout and a narrower feed-forward layer
    "transformer-small": ["--arch", "transformer", *OLD, "--dropout", "0.3", "--ff-size", "512"],
    "transformer-dropout": ["--arch", "transformer", *OLD, "--dropout", "0.3"],
    # each of the small-corpus settings alone
    "transformer-tied-only": ["--arch", "transformer", "--tie-embeddings", "--label-smoothing", "0.1"],
    "transformer-smoothing-only": ["--arch", "transformer", "--no-tie-embeddings", "--label-smoothing", "0.2"],
}


def split(corpus: Path, pairs: int, work: Path) -> None:
    """Write train.tsv, valid.{en,fr} and test.{en,fr} into ``work`` unless written already."""
    if (work / "train.tsv").exists():
        return
    lines = [line.split("\t")[:2] for line in corpus.read_text(encoding="utf-8").splitlines() if "\t" in line]
    sources = sorted({src for src, _ in lines})
    random.Random(1).shuffle(sources)
    test, valid = set(sources[:2000]), set(sources[2000:3000])
    for name, chosen in (("test", test), ("valid", valid)):
        first: dict[str, str] = {}
        for src, tgt in lines:
            if src in chosen:
                first.setdefault(src, tgt)
        (work / f"{name}.en").write_text("".join(s + "\n" for s in first), encoding="utf-8")
        (work / f"{name}.fr").write_text("".join(t + "\n" for t in first.values()), encoding="utf-8")
    rest = [(s, t) for s, t in lines if s not in test and s not in valid]
    sample = random.Random(2).sample(rest, pairs)
    (work / "train.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in sample), encoding="utf-8")


def nmt(*args: str) -> str:
    """Run ``nmt ARGS`` in its own process; its stdout."""
    done = subprocess.run([sys.executable, str(ROOT / "cli.py"), *args], cwd=ROOT, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if done.returncode:
        sys.exit(f"nmt {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return done.stdout


def test_bleu(run: Path, weights: str) -> tuple[float, float]:
    """Test BLEU, greedy and beam 5, of the run's ``weights``."""
    scores = []
    for beam in ("1", "5"):
        out = nmt("eval", "--checkpoint", str(run), "--weights", weights, "--beam", beam, "--json")
        scores.append(json.loads(out)["scores"]["bleu"]["score"])
    return scores[0], scores[1]


def rows_of(name: str, run: Path, epochs: int) -> list[dict]:
    """The first ``epochs`` epochs' best and averaged weights, and the whole run's."""
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    rows = []
    for label, kept in ((f"{epochs} epochs", [r for r in records if r["epoch"] <= epochs]),
                        ("until patience", records)):
        best = max(kept, key=lambda r: (r["valid_bleu"], r["step"]))
        last = kept[-AVERAGED:]
        tag = f"avg{kept[-1]['step']}"
        nmt("average", str(run), "--steps", ",".join(str(r["step"]) for r in last), "-o", tag)
        base = {"config": name, "budget": label, "epochs": kept[-1]["epoch"],
                "minutes": round(kept[-1]["elapsed_s"] / 60, 1)}
        for weights, step in ((f"step-{best['step']}", best["step"]), (tag, None)):
            greedy, beam = test_bleu(run, weights)
            rows.append({**base, "weights": "best" if step else f"average of last {len(last)}",
                         "best_valid_bleu": best["valid_bleu"], "test_bleu": greedy, "test_bleu_beam5": beam})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--work", type=Path, default=Path("/tmp/small-corpus"))
    parser.add_argument("--pairs", type=int, default=30000)
    parser.add_argument("--epochs", type=int, default=10, help="the epoch budget scored as well")
    parser.add_argument("--patience", type=int, default=3)
    parser.add_argument("--max-minutes", type=float, default=30)
    parser.add_argument("--only", default=",".join(CONFIGS))
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    split(args.corpus, args.pairs, args.work)
    data = args.work / "data"
    if not data.exists():
        w = str(args.work)
        nmt("prepare", "--corpus", f"{w}/train.tsv", "--valid-src", f"{w}/valid.en", "--valid-tgt",
            f"{w}/valid.fr", "--test-src", f"{w}/test.en", "--test-tgt", f"{w}/test.fr", "-o", str(data))
    rows = []
    for name in args.only.split(","):
        run = args.work / name
        if not (run / "run.json").exists():
            start = time.monotonic()
            nmt("train", "--data", str(data), "--run-dir", str(run), "--patience", str(args.patience),
                "--max-minutes", str(args.max_minutes), "--keep-checkpoints", "1000", *CONFIGS[name])
            print(f"{name}: trained in {(time.monotonic() - start) / 60:.1f} min", flush=True)
        rows.extend(rows_of(name, run, args.epochs))
        for row in rows[-4:]:
            print(json.dumps(row), flush=True)
    print(f"\n{'config':<26} {'budget':<15} {'epochs':>6} {'min':>5}  {'weights':<20} {'valid':>6} {'test':>6} "
          f"{'beam 5':>6}")
    for r in rows:
        print(f"{r['config']:<26} {r['budget']:<15} {r['epochs']:>6} {r['minutes']:>5}  {r['weights']:<20} "
              f"{r['best_valid_bleu']:>6} {r['test_bleu']:>6} {r['test_bleu_beam5']:>6}")
    if args.json_out:
        args.json_out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
