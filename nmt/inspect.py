"""Looking inside a run: attention panels of decoded sentences and the model card."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nmt.checkpoint import load_model_weights, read, weights_file
from nmt.config import read_run_config
from nmt.errors import NmtError
from nmt.model import build_model, count_parameters
from nmt.plotting import AttentionPanel
from nmt.tokenizer import PAD_ID
from nmt.train import read_metrics
from nmt.translate import Translator


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
    """What a reader of a run wants to know, from its files alone."""
    config = read_run_config(run_dir / "config.yaml")
    summary_path = run_dir / "run.json"
    summary = json.loads(summary_path.read_text(encoding="utf-8")) if summary_path.exists() else {}
    path = weights_file(run_dir)
    model = build_model(config.model, PAD_ID)
    load_model_weights(model, read(path)[0], path)
    n_params = count_parameters(model)
    m = config.model
    records = read_metrics(run_dir / "metrics.jsonl")
    best = max(records, key=lambda r: r["valid_bleu"]) if records else {}
    return {
        "run": str(run_dir),
        "architecture": (f"{m.layers}-layer {'bi' if m.bidirectional else 'uni'}directional GRU "
                         f"encoder, {m.layers}-layer GRU decoder with additive attention, "
                         + ("input feeding (Luong)" if m.decoder == "input_feeding" else "Bahdanau (d2l)")),
        "sizes": {"embed": m.embed_size, "hidden": m.hidden_size, "dropout": m.dropout},
        "parameters": n_params,
        "vocabulary": (f"joint SentencePiece unigram, {m.vocab} pieces: rows for "
                       f"{m.source_pieces or m.vocab} in sources, {m.target_pieces or m.vocab} in targets"),
        "corpus": summary.get("corpus", config.data.corpus or config.data.src_file),
        "pairs": summary.get("pairs", "unknown (run unfinished)"),
        "training": {"steps": summary.get("steps", records[-1]["step"] if records else 0),
                     "seconds": summary.get("train_seconds"), "device": summary.get("device")},
        "best validation BLEU": f"{best['valid_bleu']} at step {best['step']}" if best else "none yet",
        "throughput": {"target pieces/s": summary.get("train_tokens_per_s"),
                       "sentences/s": summary.get("train_sentences_per_s")},
        "versions": summary.get("versions", {}),
    }
