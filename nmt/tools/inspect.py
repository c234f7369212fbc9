"""Looking inside a run: attention panels of decoded sentences and the model card."""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from nmt.config import ModelConfig, RunConfig, read_run_config
from nmt.data.passes import share
from nmt.data.batching import make_batch
from nmt.errors import NmtError, SettingError
from nmt.inference.loading import skeleton
from nmt.runtime.weights import weights_path
from nmt.inference.search import Hypothesis
from nmt.inference.translate import Translator
from nmt.models.build import count_parameters, describe, parameters_per_block
from nmt.models.transformer.model import Transformer
from nmt.report.plotting import AttentionPanel
from nmt.runtime.checkpoint import read_header_checked
from nmt.runtime.lock import lock_holder
from nmt.training.state import read_metrics

log = logging.getLogger(__name__)


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


def _parent(config: RunConfig, summary: dict) -> str:
    """A fine-tuned run's parent, its tokenizer's hash (checked when the run started), and the
    tokens of the new data it had no row for."""
    unknown = (summary.get("init_from") or {}).get("unknown_tokens") or {}
    rows = (f"; new-data tokens without a row (read as <unk>): {unknown.get('source', 0):,} source, "
            f"{unknown.get('target', 0):,} target" if unknown else "")
    return f"{config.train.init_from} (tokenizer sha256 {config.model.tokenizer_sha256[:12]}…, checked){rows}"


def _held_out(run_dir: Path, config: RunConfig, part: str, summary: dict[str, Any]) -> str:
    """Where a run's validation or test set came from, its size, and how many of its sources
    training also had (known once a training session has ended)."""
    path = run_dir / f"{part}.tsv"
    pairs = len(path.read_bytes().splitlines()) if path.is_file() else 0
    d = config.data
    if getattr(d, f"{part}_src"):
        origin = f"{pairs} pairs from {getattr(d, f'{part}_src')} + {getattr(d, f'{part}_tgt')}"
    else:
        origin = f"{pairs} pairs held out of the corpus (at most {getattr(d, f'{part}_size')} source sentences)"
    overlap = summary.get("held_out_overlap", {}).get(part)
    if isinstance(overlap, dict) and overlap.get("in_training_corpus"):
        shared, total = overlap["in_training_corpus"], overlap.get("sources") or 1
        origin += f"; {shared:,} of its {total:,} sources ({share(shared, total)}) also in the training corpus"
    return origin


def _default_weights(summary: dict[str, Any]) -> str:
    """Which weights translate, eval and serve use unless told (--weights), and why."""
    average, best = summary.get("averaged"), summary.get("best_valid_bleu")
    if not isinstance(average, dict) or not isinstance(best, (int, float)):
        return "best"
    steps = average.get("steps") or [0]
    mean = f"the average of the last {len(steps)} validations' weights (steps {steps[0]}-{steps[-1]})"
    best_text = f"best (step {summary.get('best_step')})"
    if summary.get("default_weights") == "averaged":
        return f"averaged: {mean}, validation BLEU {average['valid_bleu']:.2f}, above {best_text}'s {best:.2f}"
    return (f"{best_text}: validation BLEU {best:.2f}; {mean} scored {average['valid_bleu']:.2f}, not higher "
            "(--weights averaged)")


KINDS = {"cross": "encoder-decoder attention", "encoder": "encoder self-attention",
         "decoder": "decoder self-attention"}


@dataclass(frozen=True)
class AttentionView:
    """Which weights to draw: an attention ``kind`` (a key of :data:`KINDS`), a ``layer``
    (1-based; None: the last) and a ``head`` (1-based, ``mean`` of the layer's heads, or
    ``all``: a panel each)."""

    kind: str = "cross"
    layer: int | None = None
    head: int | str = "mean"

    @classmethod
    def from_flags(cls, kind: str, layer: int | None, head: str) -> AttentionView:
        """The view a user asked for, ``head`` as typed (a number, mean or all)."""
        if kind not in KINDS:
            raise NmtError(f"--kind must be {', '.join(KINDS)}; got {kind!r}")
        if head not in ("mean", "all") and not head.isdigit():
            raise NmtError(f"--head must be a number from 1, mean or all; got {head!r}")
        return cls(kind, layer, int(head) if head.isdigit() else head)

    def heads_of(self, weights: torch.Tensor, what: str) -> tuple[torch.Tensor, list[str]]:
        """From ``weights`` (layers, heads, queries, keys): the chosen maps, (panels, queries,
        keys), and a caption each; ``what`` names the model in errors."""
        layers, heads = weights.shape[:2]
        layer = self.layer if self.layer is not None else layers
        if not 1 <= layer <= layers:
            raise SettingError("layer", layer, f"{what} has layers 1 to {layers}")
        chosen = weights[layer - 1]
        where = f"layer {layer} of {layers}"
        if self.head == "mean":
            return chosen.mean(0, keepdim=True), [f"{where}, {heads} heads averaged" if heads > 1 else where]
        if self.head == "all":
            return chosen, [f"{where}, head {h + 1} of {heads}" for h in range(heads)]
        if not 1 <= self.head <= heads:
            raise SettingError("head", self.head, f"{what} has heads 1 to {heads}")
        return chosen[self.head - 1:self.head], [f"{where}, head {self.head} of {heads}"]


# Each kind's (query, key) axis labels.
AXES = {"cross": ("generated pieces", "source pieces"), "encoder": ("source pieces", "source pieces"),
        "decoder": ("generated pieces", "decoder input pieces")}


@dataclass(frozen=True)
class AttentionMaps:
    """Every attention's weights while the model reads ``source`` and one of its translations,
    ``text``: the teacher-forced pass over the hypothesis's pieces, which gives the weights
    decoding used (the same states: tests/models/test_transformer.py).

    ``weights`` by kind (a key of :data:`KINDS` the model has): (layers, heads, queries, keys),
    float32 on the CPU; ``pieces`` by kind: the (queries, keys) pieces, readable, with ``<s>``
    and ``</s>`` where the model reads or writes them.
    """

    source: str
    text: str
    score: float
    weights: dict[str, torch.Tensor]
    pieces: dict[str, tuple[list[str], list[str]]]


@torch.inference_mode()
def attention_maps(translator: Translator, source: str, source_ids: list[int], hyp: Hypothesis) -> AttentionMaps:
    """The weights of :class:`AttentionMaps` for ``hyp``, a hypothesis of ``source`` (its
    ``source_ids``) that kept its attention."""
    model, pieces = translator.model, translator.tokenizer.pieces
    rows = hyp.attention.size(0)  # one per generated piece, EOS included when generated
    batch = make_batch([source_ids], [hyp.tokens[:rows - 1]]).to(translator.device)
    was_training = model.training
    model.eval()
    try:
        maps = model.attention_maps(batch.src, batch.src_len, batch.tgt_in)
    finally:
        model.train(was_training)
    src = pieces(source_ids) + ["</s>"]
    generated = pieces(hyp.tokens) + (["</s>"] if rows > len(hyp.tokens) else [])
    axes = {"cross": (generated, src), "encoder": (src, src), "decoder": (generated, ["<s>"] + generated[:-1])}
    return AttentionMaps(source, translator.detokenize([hyp])[0], hyp.score,
                         {kind: w[0].float().cpu() for kind, w in maps.items()},
                         {kind: axes[kind] for kind in maps})


def attention_panels(translator: Translator, lines: list[str], view: AttentionView = AttentionView()
                     ) -> list[AttentionPanel]:
    """Decode each line, then draw ``view``'s weights (:func:`attention_maps`), labelled with
    readable pieces."""
    src_ids = translator.encode(lines)
    if not all(src_ids):
        raise NmtError("attn-plot needs sentences with some text in them")
    what = "this Transformer" if isinstance(translator.model, Transformer) else "this GRU model"
    panels = []
    for line, ids, [hyp] in zip(lines, src_ids, translator.nbest_of_ids(src_ids)):
        maps = attention_maps(translator, line, ids, hyp)
        if view.kind not in maps.weights:
            raise SettingError("kind", view.kind, f"{what} has {' and '.join(maps.weights)} attention only")
        weights, captions = view.heads_of(maps.weights[view.kind], what)
        queries, keys = maps.pieces[view.kind]
        query_label, key_label = AXES[view.kind]
        for panel_weights, caption in zip(weights, captions):
            title = f"{line}\n→ {maps.text}\n{KINDS[view.kind]}, {caption}"
            panels.append(AttentionPanel(panel_weights, keys, queries, title, key_label, query_label))
    return panels


def _known(values: dict) -> dict:
    """``values`` without those a run has not recorded (yet)."""
    return {key: value for key, value in values.items() if value is not None}


def _training_now(run_dir: Path, records: list[dict]) -> dict:
    """What a run that is training now has done so far (run.json is written at its end)."""
    holder = lock_holder(run_dir)
    if holder is None:
        return {}
    last = (f"step {records[-1]['step']:,}, epoch {records[-1]['epoch']}, {records[-1]['elapsed_s'] / 60:.0f} "
            "minutes, at its latest validation" if records else "not validated yet")
    return {"status": f"training now (PID {holder} holds its lock): {last}"}


def model_card(run_dir: Path) -> dict[str, Any]:
    """What a reader of a run wants to know, from its files alone (the weights are checked
    against config.yaml from their header, not loaded)."""
    if not run_dir.is_dir():
        raise NmtError(f"{run_dir}: not a run directory")
    config = read_run_config(run_dir / "config.yaml")
    summary = _summary(run_dir / "run.json")
    model = skeleton(config.model)
    path = weights_path(run_dir)
    read_header_checked(path, model)
    n_params = count_parameters(model)
    m = config.model
    records = read_metrics(run_dir / "metrics.jsonl")
    best = max(records, key=lambda r: (r["valid_bleu"], r["step"])) if records else {}  # a tie: the newer, as training keeps
    parent = {"fine-tuned from": _parent(config, summary)} if config.train.init_from else {}
    training_now = _training_now(run_dir, records)
    return training_now | {
        "run": str(run_dir),
        **parent,
        "architecture": describe(m),
        "sizes": ({"layers": m.layers, "d_model": m.hidden_size, "heads": m.heads, "feed-forward": m.ff_size}
                  if m.arch == "transformer" else
                  {"layers": m.layers, "embed": m.embed_size, "hidden": m.hidden_size}) | {"dropout": m.dropout},
        "parameters": n_params,
        "parameters per block": parameters_per_block(model),
        "vocabulary": (f"joint SentencePiece unigram, {m.vocab} pieces: rows for "
                       f"{m.source_pieces or m.vocab} in sources, {m.target_pieces or m.vocab} in targets"),
        "corpus": summary.get("corpus", config.data.corpus or config.data.src_file),
        "validation set": _held_out(run_dir, config, "valid", summary),
        "test set": _held_out(run_dir, config, "test", summary),
        "pairs": summary.get("pairs", "unknown (run unfinished)"),
        "training": _known({"steps": summary.get("steps", records[-1]["step"] if records else 0),
                     "epochs": summary.get("epochs_completed"), "budget": config.train.budget_text(),
                     **({"set by corpus size": config.train.by_corpus_size} if config.train.by_corpus_size else {}),
                     "subword sampling": (f"alpha {config.train.subword_alpha:g}, nbest {config.train.subword_nbest}"
                                          if config.train.subword_alpha else "off (the best segmentation)"),
                     **({"source word dropout": config.train.source_word_dropout}
                        if config.train.source_word_dropout else {}),
                     **({"R-Drop alpha": config.train.rdrop_alpha} if config.train.rdrop_alpha else {}),
                     **({"stopped by": summary.get("stopped_by", "unknown (run unfinished or older)"),
                         "precision": summary.get("precision", "fp32")} if not training_now else {}),
                     "seconds": summary.get("train_seconds"), "device": summary.get("device")}),
        "best validation BLEU": f"{best['valid_bleu']} at step {best['step']}" if best else "none yet",
        "default weights": _default_weights(summary),
        "throughput": _known({"target pieces/s": summary.get("train_tokens_per_s"),
                              "sentences/s": summary.get("train_sentences_per_s")}),
        "versions": summary.get("versions", {}),
    }


def export_card(directory: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """An exported model's card: the card of the run it came from (while that run is there),
    with what the export is: its directory, engine, quantization and weights."""
    run = Path(manifest["run"])
    card = {"architecture": describe(ModelConfig(**manifest["model"]))}
    if (run / "config.yaml").is_file():
        try:
            card = model_card(run)
        except NmtError as e:  # the export stands alone: a run damaged since does not stop it
            log.warning("%s: the card of the run it was exported from is not shown (%s)", directory, e)
    versions = {**card.get("versions", {}), "ctranslate2": manifest.get("ctranslate2_version")}
    return {"export": str(directory), "engine": "CTranslate2", "quantization": manifest.get("quantization"),
            "exported from": str(run), "exported weights": manifest["weights"]["file"],
            **{k: v for k, v in card.items() if k not in ("run", "default weights", "versions")},
            "versions": {k: v for k, v in versions.items() if v}}
