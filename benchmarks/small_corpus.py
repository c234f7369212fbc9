"""Do the defaults hold on a small corpus? Trains on a random sample of fra-eng (30,000 pairs
unless told) with validation and test sets drawn from the rest, and prints test BLEU and wall
time for each configuration.

    python benchmarks/small_corpus.py --corpus ../shared/data/fra-eng/fra.txt --work /tmp/small
                                      [--directions en-fr,fr-en] [--pairs 30000] [--epochs 10]
                                      [--patience 3] [--max-minutes 240] [--threads 0]
                                      [--only gru-old,gru,transformer-old,transformer]

The split, for each direction: the corpus's distinct sources on that direction's source side
are shuffled (English→French: seed 1; French→English: seed 3); the first 2,000 give the test
set and the next 1,000 the validation set (each with its first translation), and the training
pairs are a random sample (seed 2; seed 4) of the pairs whose source is in neither. Each
direction has its own slice, so a default is not tuned to one target language. A
configuration that sets data options (the vocabulary) has its own prepared data.

Each configuration trains once, in a process of its own, with validation at every epoch,
``--patience P --max-minutes M`` and every validation's weights kept. Training is the same
step by step whatever the budget (the schedule and the batches do not depend on it), so the
first N epochs of that run are the run a ``--epochs N`` budget trains, and its rows are
scored on the best weights of those epochs (``--weights step-K``) and on the average of
the last 5 of them, beside the rows of the whole run (patience or minutes). Run it alone on the
machine: a second CPU-heavy job on 2 cores distorts every time.

With no ``--only`` it trains what the last table needs: each family's defaults when issue 50
was filed and today's (``BEFORE_AFTER``), printed side by side for each direction.
"""
from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from pathlib import Path

from nmt.defaults import BY_CORPUS_SIZE

ROOT = Path(__file__).resolve().parents[1]
AVERAGED = 5  # checkpoints in an average, as docs/after-training.md measured

# the Transformer's defaults when issue 50 was filed (before R-Drop), on which its screening ran
TRANSFORMER = ["--arch", "transformer", "--rdrop-alpha", "0"]
OLD = ["--no-tie-embeddings", "--label-smoothing", "0.1"]  # a Transformer's settings from 50,000 pairs on
# the GRU's width before it followed the corpus size (docs/gru-width.md), on which its screening ran
W256 = ["--embed-size", "256", "--hidden-size", "256"]
# Each configuration's flags; those of nmt prepare (PREPARE_FLAGS) go to its prepared data
CONFIGS = {
    "gru": [],  # under 50,000 pairs: 512 wide, tied, dropout 0.3, word dropout 0.1, smoothing 0.2
    # the GRU's defaults before they followed the corpus size (the large-corpus values); each
    # family's earlier defaults are scored on their best weights (training did not average then)
    "gru-old": [*W256, "--dropout", "0.2", "--source-word-dropout", "0", "--label-smoothing", "0.1",
                "--no-tie-embeddings"],
    "gru-v4000": [*W256, "--vocab-size", "4000"],
    "gru-v2000": [*W256, "--vocab-size", "2000"],
    "transformer-v4000": [*TRANSFORMER, "--vocab-size", "4000"],
    # subword sampling (Kudo 2018) from the whole lattice
    "gru-v4000-sampled": [*W256, "--vocab-size", "4000", "--subword-alpha", "0.2"],
    "gru-v4000-a0.5": [*W256, "--vocab-size", "4000", "--subword-alpha", "0.5"],
    "transformer-v4000-sampled": [*TRANSFORMER, "--vocab-size", "4000", "--subword-alpha", "0.2"],
    # source word dropout as token masking (Sennrich and Zhang 2019), and the GRU's dropout
    "gru-v4000-worddrop": [*W256, "--vocab-size", "4000", "--source-word-dropout", "0.1"],
    "gru-v4000-dropout": [*W256, "--vocab-size", "4000", "--dropout", "0.3"],
    # Sennrich and Zhang 2019's regularisers together: dropout 0.3, source word dropout 0.1,
    # label smoothing 0.2
    "gru-regularised": [*W256, "--dropout", "0.3", "--source-word-dropout", "0.1", "--label-smoothing", "0.2",
                        "--no-tie-embeddings"],
    # and with the decoder's input and output embeddings tied (Press & Wolf 2017; one of Sennrich
    # and Zhang 2019's low-resource settings), the GRU's default under 50,000 pairs since
    "gru-tied": [*W256, "--tie-embeddings"],
    # R-Drop (Liang et al. 2021; alpha 5, the paper's for IWSLT translation) on each family's defaults
    "gru-rdrop": [*W256, "--rdrop-alpha", "5"],
    # half the batch, twice the updates an epoch (Sennrich and Zhang 2019 trained small corpora
    # on small batches)
    "gru-b64": [*W256, "--batch-size", "64"],
    # twice the width (embeddings and hidden state; tying needs them equal): 12.3 M parameters, not
    # 4.3 M; the GRU's default under 50,000 pairs since
    "gru-h512": ["--embed-size", "512", "--hidden-size", "512"],
    # and more dropout for the wider model (512 learns faster and stops sooner at 0.3)
    "gru-d0.4": ["--dropout", "0.4"],
    "transformer-rdrop": ["--arch", "transformer", "--rdrop-alpha", "5"],
    # and at R-Drop's paper's dropout for IWSLT (0.3): the two passes' masks differ more
    "transformer-rdrop-d0.3": ["--arch", "transformer", "--rdrop-alpha", "5", "--dropout", "0.3"],
    # the narrow, deeper Transformer published runs of this corpus size use
    "transformer-4x128": [*TRANSFORMER, "--layers", "4", "--embed-size", "128", "--hidden-size", "128",
                          "--ff-size", "512"],
    "transformer-4x128-pre": [*TRANSFORMER, "--layers", "4", "--embed-size", "128", "--hidden-size",
                              "128", "--ff-size", "512", "--norm", "pre"],
    # capacity, as the GRU gained from its width: a third layer on each side (8.0 M parameters
    # French→English, not 6.2 M); and the GRU's source word dropout
    "transformer-l3": [*TRANSFORMER, "--layers", "3"],
    "transformer-swd0.1": [*TRANSFORMER, "--source-word-dropout", "0.1"],
    # width, as the GRU gained from 512: d_model 384, 6 heads, feed-forward 1,536 (12.0 M parameters
    # French→English), 1.7 times the time of an epoch
    "transformer-w384": [*TRANSFORMER, "--embed-size", "384", "--hidden-size", "384", "--heads", "6",
                         "--ff-size", "1536"],
    # under 50,000 pairs: the decoder's input and output embeddings tied, label smoothing 0.2,
    # and R-Drop at alpha 5 (today's defaults); without R-Drop (the defaults when issue 50 was filed)
    # and patience 6, which follows the corpus size only under nmt's default budget: this runner
    # gives a budget, so it passes the small-corpus value itself
    "transformer": ["--arch", "transformer", "--patience", str(BY_CORPUS_SIZE["transformer"]["patience"][0])],
    "transformer-old": TRANSFORMER,
    "transformer-large-corpus": [*TRANSFORMER, *OLD],
    # what small-data Transformers are known to need (Araabi & Monz 2020; Sennrich & Zhang
    # 2019 for RNNs): more dropout and a narrower feed-forward layer
    "transformer-small": [*TRANSFORMER, *OLD, "--dropout", "0.3", "--ff-size", "512"],
    "transformer-dropout": [*TRANSFORMER, *OLD, "--dropout", "0.3"],
    # each of the small-corpus settings alone
    "transformer-tied-only": [*TRANSFORMER, "--tie-embeddings", "--label-smoothing", "0.1"],
    "transformer-smoothing-only": [*TRANSFORMER, "--no-tie-embeddings", "--label-smoothing", "0.2"],
}
# Issue 50's comparison, by family: the configuration of nmt's defaults when it was filed, scored
# on its best weights (training did not average then), and today's defaults, on the weights a run
# decodes with by default. The plain benchmark runs these.
BEFORE_AFTER = {"gru": ("gru-old", "gru"), "transformer": ("transformer-old", "transformer")}


PREPARE_FLAGS = ("--vocab-size",)
DIRECTIONS = {"en-fr": (False, 1, 2), "fr-en": (True, 3, 4)}  # reversed columns, split seed, sample seed


def split(corpus: Path, pairs: int, work: Path, direction: str) -> None:
    """Write train.tsv, valid.{src,tgt} and test.{src,tgt} into ``work`` unless written already."""
    if (work / "train.tsv").exists():
        return
    reverse, split_seed, sample_seed = DIRECTIONS[direction]
    lines = [line.split("\t")[:2] for line in corpus.read_text(encoding="utf-8").splitlines() if "\t" in line]
    lines = [pair[::-1] for pair in lines] if reverse else lines
    sources = sorted({src for src, _ in lines})
    random.Random(split_seed).shuffle(sources)
    test, valid = set(sources[:2000]), set(sources[2000:3000])
    for name, chosen in (("test", test), ("valid", valid)):
        first: dict[str, str] = {}
        for src, tgt in lines:
            if src in chosen:
                first.setdefault(src, tgt)
        (work / f"{name}.src").write_text("".join(s + "\n" for s in first), encoding="utf-8")
        (work / f"{name}.tgt").write_text("".join(t + "\n" for t in first.values()), encoding="utf-8")
    rest = [(s, t) for s, t in lines if s not in test and s not in valid]
    sample = random.Random(sample_seed).sample(rest, pairs)
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
    """The first ``epochs`` epochs' best and averaged weights, and the whole run's; the whole
    run's row of the weights nmt decodes it with by default (run.json) is marked so."""
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    default = json.loads((run / "run.json").read_text()).get("default_weights", "best")
    rows = []
    for label, kept in ((f"{epochs} epochs", [r for r in records if r["epoch"] <= epochs]),
                        ("until patience", records)):
        best = max(kept, key=lambda r: (r["valid_bleu"], r["step"]))
        last = kept[-AVERAGED:]
        tag = f"avg{kept[-1]['step']}"
        nmt("average", str(run), "--steps", ",".join(str(r["step"]) for r in last), "-o", tag)
        base = {"config": name, "budget": label, "epochs": kept[-1]["epoch"],
                "minutes": round(kept[-1]["elapsed_s"] / 60, 1)}
        for weights, kind in ((f"step-{best['step']}", "best"), (tag, "averaged")):
            greedy, beam = test_bleu(run, weights)
            shown = "best" if kind == "best" else f"average of last {len(last)}"
            if label == "until patience" and kind == default:
                shown += " (default)"
            rows.append({**base, "weights": shown, "best_valid_bleu": best["valid_bleu"], "test_bleu": greedy,
                         "test_bleu_beam5": beam})
    return rows


def prepared(work: Path, flags: list[str]) -> tuple[Path, list[str]]:
    """The prepared data for a configuration's data flags (prepared once), and its other flags."""
    data_flags, train_flags, k = [], [], 0
    while k < len(flags):
        if flags[k] in PREPARE_FLAGS:  # each takes a value
            data_flags.extend(flags[k:k + 2])
            k += 2
        else:
            train_flags.append(flags[k])
            k += 1
    data = work / "-".join(["data", *data_flags[1::2]])
    if not data.exists():
        w = str(work)
        nmt("prepare", "--corpus", f"{w}/train.tsv", "--valid-src", f"{w}/valid.src", "--valid-tgt",
            f"{w}/valid.tgt", "--test-src", f"{w}/test.src", "--test-tgt", f"{w}/test.tgt", *data_flags,
            "-o", str(data))
    return data, train_flags


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--work", type=Path, default=Path("/tmp/small-corpus"))
    parser.add_argument("--pairs", type=int, default=30000)
    parser.add_argument("--epochs", type=int, default=10, help="the epoch budget scored as well")
    parser.add_argument("--patience", type=int, default=3)
    parser.add_argument("--max-minutes", type=float, default=240, help="a cap far beyond patience")
    parser.add_argument("--only", default=",".join(dict.fromkeys(c for pair in BEFORE_AFTER.values() for c in pair)),
                        help="configurations, comma-separated (default: those of the before/after table)")
    parser.add_argument("--directions", default=",".join(DIRECTIONS))
    parser.add_argument("--threads", default="0", help="nmt train --threads")
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args()
    rows = []
    for direction in args.directions.split(","):
        work = args.work / direction
        work.mkdir(parents=True, exist_ok=True)
        split(args.corpus, args.pairs, work, direction)
        for name in args.only.split(","):
            run = work / name
            data, flags = prepared(work, CONFIGS[name])
            if not (run / "run.json").exists():
                start = time.monotonic()
                nmt("train", "--data", str(data), "--run-dir", str(run), "--patience", str(args.patience),
                    "--max-minutes", str(args.max_minutes), "--keep-checkpoints", "1000",
                    "--threads", args.threads, *flags)
                print(f"{direction} {name}: trained in {(time.monotonic() - start) / 60:.1f} min", flush=True)
            rows.extend({"direction": direction, **row} for row in rows_of(name, run, args.epochs))
            for row in rows[-4:]:
                print(json.dumps(row), flush=True)
    print(f"\n{'direction':<9} {'config':<26} {'budget':<15} {'epochs':>6} {'min':>5}  {'weights':<30} {'valid':>6} {'test':>6} "
          f"{'beam 5':>6}")
    for r in rows:
        print(f"{r['direction']:<9} {r['config']:<26} {r['budget']:<15} {r['epochs']:>6} {r['minutes']:>5}  {r['weights']:<30} "
              f"{r['best_valid_bleu']:>6} {r['test_bleu']:>6} {r['test_bleu_beam5']:>6}")
    print_before_after(rows)
    if args.json_out:
        args.json_out.write_text(json.dumps(rows, indent=1))


def print_before_after(rows: list[dict]) -> None:
    """Each family's earlier defaults against today's (:data:`BEFORE_AFTER`), by direction, where
    both were run: test BLEU greedy / beam 5."""
    def pick(direction: str, config: str, default: bool) -> dict | None:
        for r in rows:
            if (r["direction"], r["config"], r["budget"]) == (direction, config, "until patience") and (
                    r["weights"].endswith("(default)") if default else r["weights"].startswith("best")):
                return r
        return None

    lines = []
    for direction in dict.fromkeys(r["direction"] for r in rows):
        for family, (earlier, today) in BEFORE_AFTER.items():
            before, after = pick(direction, earlier, False), pick(direction, today, True)
            if before and after:
                b, a = (before["test_bleu"], before["test_bleu_beam5"]), (after["test_bleu"], after["test_bleu_beam5"])
                lines.append(f"{direction:<9} {family:<12} {b[0]:>6} / {b[1]:<6} {a[0]:>6} / {a[1]:<6} "
                             f"{a[0] - b[0]:+6.2f} / {a[1] - b[1]:+.2f}")
    if lines:
        print(f"\n{'direction':<9} {'family':<12} {'earlier defaults':<16} {'today':<15} {'gain':<6}")
        print("\n".join(lines))


if __name__ == "__main__":
    main()
