"""Looking inside a run: attention panels of decoded sentences and the model card."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nmt.config import RunConfig, read_run_config
from nmt.errors import NmtError
from nmt.inference.loading import skeleton, weights_file
from nmt.inference.translate import Translator
from nmt.models.build import count_parameters, describe
from nmt.report.plotting import AttentionPanel
from nmt.runtime.checkpoint import read_header_checked
from nmt.training.trainer import read_metrics


def _summary(path: Path) -> dict[str, Any]:
    """run.json, written when a training session ends; {} while the first is still running."""
    if not path.exists():
        return {}
    try:
        summary = json.loads(path.read_bytes())
    except (OSError, ValueError) as e:
        raise NmtError(f"{path}: damaged run summary ({e}); delete it, or resume the run "
                       f"to write it again") from None
    if not isinstance(summary, dict):
        raise NmtError(f"{path}: damaged run summary (not a JSON object); delete it, or resume "
                       f"the run to write it again")
    return summary


def _held_out(run_dir: Path, config: RunConfig, part: str) -> str:
    """Where a run's validation or test set came from, and its size."""
    path = run_dir / f"{part}.tsv"
    pairs = len(path.read_bytes().splitlines()) if path.is_file() else 0
    d = config.data
    if getattr(d, f"{part}_src"):
        return f"{pairs} pairs from {getattr(d, f'{part}_src')} + {getattr(d, f'{part}_tgt')}"
    return f"{pairs} pairs held out of the corpus (at most {getattr(d, f'{part}_size')} source sentences)"


def attention_panels(translator: Translator, lines: list[str]) -> list[AttentionPanel]:
    """Decode each line and pair its attention with readable source and target pieces."""
    src_ids = translator.encode(lines)
    if not all(src_ids):
        raise NmtError("attn-plot needs sentences with some text in them")
    panels = []
    for line, ids, hyp in zip(lines, src_ids, translator.hypotheses(lines)):
        pieces = translator.tokenizer.pieces
        tgt = pieces(hyp.tokens) + (["</s>"] if hyp.attention.size(0) > len(hyp.tokens) else [])
        text = translator.detokenize([hyp])[0]
        panels.append(AttentionPanel(hyp.attention, pieces(ids) + ["</s>"], tgt, f"{line}\n→ {text}"))
    return panels


def model_card(run_dir: Path) -> dict[str, Any]:
    """What a reader of a run wants to know, from its files alone (the weights are checked
    against config.yaml from their header, not loaded)."""
    if not run_dir.is_dir():
        raise NmtError(f"{run_dir}: not a run directory")
    config = read_run_config(run_dir / "config.yaml")
    summary = _summary(run_dir / "run.json")
    model = skeleton(config.model)
    path = weights_file(run_dir)
    read_header_checked(path, model)
    n_params = count_parameters(model)
    m = config.model
    records = read_metrics(run_dir / "metrics.jsonl")
    best = max(records, key=lambda r: r["valid_bleu"]) if records else {}
    return {
        "run": str(run_dir),
        "architecture": describe(m),
        "sizes": {"embed": m.embed_size, "hidden": m.hidden_size, "dropout": m.dropout},
        "parameters": n_params,
        "vocabulary": (f"joint SentencePiece unigram, {m.vocab} pieces: rows for "
                       f"{m.source_pieces or m.vocab} in sources, {m.target_pieces or m.vocab} in targets"),
        "corpus": summary.get("corpus", config.data.corpus or config.data.src_file),
        "validation set": _held_out(run_dir, config, "valid"),
        "test set": _held_out(run_dir, config, "test"),
        "pairs": summary.get("pairs", "unknown (run unfinished)"),
        "training": {"steps": summary.get("steps", records[-1]["step"] if records else 0),
                     "seconds": summary.get("train_seconds"), "device": summary.get("device")},
        "best validation BLEU": f"{best['valid_bleu']} at step {best['step']}" if best else "none yet",
        "throughput": {"target pieces/s": summary.get("train_tokens_per_s"),
                       "sentences/s": summary.get("train_sentences_per_s")},
        "versions": summary.get("versions", {}),
    }
