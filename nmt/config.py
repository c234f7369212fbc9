"""Typed, frozen configuration for a run, read from flags or YAML and saved with every run.

A config file may be flat (keys named like the ``nmt train`` flags, with ``_`` for ``-``) or
sectioned as the saved ``config.yaml`` is (``data:``, ``model:``, ``train:``).
"""
from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from nmt.defaults import ARCH_DEFAULTS, BY_CORPUS_SIZE, DEFAULT_MAX_EPOCHS, DEFAULT_PATIENCE, choose_by_corpus_size
from nmt.errors import ConfigError
from nmt.setting_checks import at_least, check, check_corpora, check_type, choice
from nmt.yaml_file import read_yaml_file


@dataclass(frozen=True)
class Corpus:
    """One corpus of several: a TSV file and its weight, the times its pairs are drawn in an
    epoch (2: each twice; 0.5: a random half, another each epoch); and its tag, a token put
    before each of its sources (tagged back-translation, Caswell et al. 2019: the model learns
    which sources are synthetic), whose pairs are never held out."""

    path: str
    weight: float = 1.0
    tag: str = ""


@dataclass(frozen=True)
class DataConfig:
    """Where the parallel text comes from and how it is split and tokenised."""

    # fra-eng style TSV, plain or gzipped; several: a list of paths or of {path, weight, tag}
    corpus: str | list | None = None  # default data/fra-eng/fra.txt
    src_file: str | None = None
    tgt_file: str | None = None
    valid_src: str | None = None  # a given validation set (aligned files) replaces the carved one
    valid_tgt: str | None = None
    test_src: str | None = None  # a given test set, likewise; nmt eval then scores it line by line
    test_tgt: str | None = None
    valid_size: int = 1000  # held-out source sentences (groups), capped at 10% of the groups
    test_size: int = 2000
    max_pieces: int = 64  # training pairs longer than this on either side are dropped
    vocab_size: int = 8000  # one joint SentencePiece vocabulary; 8k beat 2k after 20 minutes (README)
    allow_overlap: bool = False  # accept given valid/test sets whose every source is also in training
    # sentences SentencePiece trains on at most, drawn at random (both sides): it holds ~0.8 KB a
    # sentence, so 500,000 keep nmt prepare of any corpus within 1.5x of fra-eng's peak (docs/performance.md)
    spm_sample: int = 500_000
    dedup: bool = False  # drop exact duplicate pairs (the first is kept)
    # read the corpus the other way round (TGT<TAB>SRC; --tgt-file as the source): the reverse
    # direction, e.g. to back-translate; given held-out files are the model's source and target
    reverse: bool = False
    max_length_ratio: float = 0.0  # drop training pairs whose sides' piece counts differ more (0: off)
    data: str | None = None  # prepared data (nmt prepare) to train on, instead of preparing it in the run
    data_sha256: str = ""  # of that data's data.json, checked on every resume; set by nmt train

    FILES = ("corpus", "src_file", "tgt_file", "valid_src", "valid_tgt", "test_src", "test_tgt")
    # What shapes prepared data: with ``data``, these come from its data.json
    PREPARED = FILES + ("valid_size", "test_size", "max_pieces", "vocab_size", "allow_overlap", "spm_sample",
                        "dedup", "max_length_ratio", "reverse")

    def corpora(self) -> list[Corpus]:
        """The corpora ``corpus`` names, each with its weight; [] when it names none."""
        if self.corpus is None:
            return []
        entries = self.corpus if isinstance(self.corpus, list) else [self.corpus]
        return [Corpus(e) if isinstance(e, str) else Corpus(**e) for e in entries]

    def tags(self) -> dict[int, str]:
        """The tagged corpora: their numbers (from 0, as read) and tags."""
        return {k: c.tag for k, c in enumerate(self.corpora()) if c.tag}

    def files(self) -> dict[str, str]:
        """The data files this config names, by what they are: the corpus (``corpus``, or
        ``corpus 1``, ``corpus 2``, ... of several) or source/target files, given held-out sets."""
        corpora = self.corpora()
        named = {"corpus" if len(corpora) == 1 else f"corpus {k}": c.path for k, c in enumerate(corpora, start=1)}
        return named | {name: getattr(self, name) for name in self.FILES[1:] if getattr(self, name) is not None}


@dataclass(frozen=True)
class ModelConfig:
    """Sizes of the encoder-decoder."""

    arch: str = "gru"  # or "transformer" (nmt/models/transformer/)
    embed_size: int | None = 256  # None: by the training-pair count (BY_CORPUS_SIZE), as hidden_size
    hidden_size: int | None = 256
    layers: int = 2
    bidirectional: bool = True  # each direction gets hidden_size // 2 units, concatenated
    dropout: float | None = 0.2  # None: by the training-pair count (BY_CORPUS_SIZE)
    decoder: str = "input_feeding"  # or "bahdanau" (d2l.ai's); see nmt/models/rnn/decoders.py
    attention: str = "additive"  # or "dot" (scaled dot product); see nmt/models/attention.py
    init_range: float = 0.1  # weights start uniform in +-init_range; 0: PyTorch's defaults
    vocab: int = 0  # pieces in the trained tokenizer; set by nmt train, not by the user
    source_pieces: int = 0  # pieces with encoder rows (those in training sources, and specials)
    target_pieces: int = 0  # pieces with decoder and generator rows (in training targets, specials)
    #                         both set by nmt train; 0 = every piece (runs made before that)
    heads: int = 4  # transformer: attention heads
    ff_size: int = 1024  # transformer: feed-forward inner size
    norm: str = "post"  # transformer: layer norm after each sub-layer's residual sum ("post") or before it ("pre")
    tie_embeddings: bool | None = False  # the decoder's input embedding is its output layer's
    #                                      weight; None: by the training-pair count (BY_CORPUS_SIZE)
    tokenizer_sha256: str = ""  # of the run's spm.model, checked on every load; set by nmt train


# Settings whose value is one of a few words; a word's hyphens and underscores are one
CHOICES = ("decoder", "arch", "norm", "attention", "kernels", "schedule", "precision")

# What nmt train records from the data and its choices: in a run's config.yaml, never a user's --config
SET_BY_TRAIN = ("vocab", "source_pieces", "target_pieces", "tokenizer_sha256", "data_sha256", "by_corpus_size")
# Settings with no flag of their own: YAML-only, or set by nmt train
NO_FLAG = ("init_range", *SET_BY_TRAIN)

@dataclass(frozen=True)
class TrainConfig:
    """The optimisation loop and its budget."""

    epochs: int | None = None  # None: DEFAULT_MAX_EPOCHS, unless max_steps or max_minutes is given
    max_steps: int | None = None
    max_minutes: float | None = None
    batch_size: int = 128  # sentences per batch (of all processes together), unless batch_tokens is set
    batch_tokens: int | None = None  # target pieces per batch (ditto)
    accum: int = 1  # batches whose gradients add up to one optimiser step
    max_pass_pieces: int = 0  # padded pieces a forward pass holds; a longer batch runs in parts, 0 = no limit
    lr: float = 2e-3
    lr_decay: float = 0.5  # multiply lr by this when validation loss stops improving
    clip: float = 1.0
    label_smoothing: float | None = 0.1  # None: by the training-pair count (BY_CORPUS_SIZE)
    # subword regularisation (Kudo 2018's l-best sampling): each training pair segmented anew at
    # every step, drawn from its nbest best segmentations with probability P ** alpha (0: off);
    # validation and translation always take the best one. -1 (the whole lattice) only in runs
    # of an older nmt: SentencePiece's lattice sampler is not reproducible (nmt/data/segmentation.py)
    subword_alpha: float = 0.0
    subword_nbest: int = 16
    source_word_dropout: float | None = 0.0  # training source pieces read as <unk> at this rate (token
    #                                          masking); None: by the training-pair count (BY_CORPUS_SIZE)
    # R-Drop (Liang et al. 2021): each training batch runs twice, through other dropout masks,
    # and the two output distributions' symmetric KL divergence, times alpha / 4, joins the loss
    # (0: off; a step costs about twice as much); None: by the training-pair count (BY_CORPUS_SIZE)
    rdrop_alpha: float | None = 0.0
    valid_every: int = 0  # steps between validations; 0 = once per epoch
    valid_bleu_size: int = 1000  # validation sentences decoded for BLEU
    patience: int | None = None  # validations without a better BLEU before stopping; 0 = never;
    #                                None: DEFAULT_PATIENCE when no budget is given, else 0
    keep_checkpoints: int = 0  # weights of the last N validations kept as checkpoints/step-K.safetensors
    # the last N validations' weights averaged when a run ends (averaged.safetensors), the run's
    # default weights where that scores better on validation than best; 0: off (docs/choices.md,
    # "Averaging at the end")
    average_last: int = 5
    tensorboard: bool = False  # TensorBoard event files in RUN/tensorboard/ (nmt/training/tensorboard.py)
    init_from: str | None = None  # the run whose weights, tokenizer and model this one started from
    seed: int = 1
    device: str = "auto"
    threads: int = 0  # 0 = one per CPU core
    kernels: str = "fast"  # or "reference": plain PyTorch, no hand-written paths (nmt/models/kernels.py)
    schedule: str = "plateau"  # lr decays by lr_decay on a stalled validation loss; or "noam" (nmt/training/schedule.py)
    warmup_steps: int = 4000  # noam: steps of linear warm-up to lr, then inverse-square-root decay
    precision: str = "auto"  # fp32, bf16 or fp16 autocast; auto: bf16 where native (nmt/runtime/precision.py)
    by_corpus_size: str = ""  # the settings nmt train chose by the training-pair count, in words

    @property
    def default_budget(self) -> bool:
        """No budget given: train until validation stalls (DEFAULT_PATIENCE, DEFAULT_MAX_EPOCHS)."""
        return self.epochs is None and self.max_steps is None and self.max_minutes is None

    @property
    def epoch_limit(self) -> float:
        """The epochs to train: ``epochs`` when given; else DEFAULT_MAX_EPOCHS when no other
        budget is given, and no limit when one is (it must not be cut short by a default)."""
        if self.epochs is not None:
            return self.epochs
        return DEFAULT_MAX_EPOCHS if self.default_budget else math.inf

    @property
    def patience_limit(self) -> int:
        """Validations without a better BLEU that stop the run (0: never): ``patience`` when
        given; else DEFAULT_PATIENCE under the default budget, and never under one given."""
        if self.patience is not None:
            return self.patience
        return DEFAULT_PATIENCE if self.default_budget else 0

    def budget_text(self) -> str:
        """The budget in words, as ``nmt train`` logs it and ``nmt info`` shows it."""
        limits = [f"{self.epochs} epochs" if self.epochs is not None else "",
                  f"{self.max_steps:,} steps" if self.max_steps is not None else "",
                  f"{self.max_minutes:g} minutes" if self.max_minutes is not None else ""]
        if self.default_budget:
            limits = [f"at most {DEFAULT_MAX_EPOCHS} epochs"]
        given = ", ".join(limit for limit in limits if limit)
        if not self.patience_limit:
            return given
        return f"until validation BLEU has not improved for {self.patience_limit} validations, {given}"


@dataclass(frozen=True)
class RunConfig:
    """Everything that defines a run; saved as ``config.yaml`` in the run directory."""

    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def to_dict(self) -> dict[str, dict[str, Any]]:
        return dataclasses.asdict(self)

    def for_corpus(self, pairs: int) -> RunConfig:
        """This config with each setting left to the corpus size (None) chosen for ``pairs``
        training pairs (:func:`nmt.defaults.choose_by_corpus_size`), recorded in ``by_corpus_size``."""
        keys = (*BY_CORPUS_SIZE[self.model.arch], "embed_size", "hidden_size", "tie_embeddings")
        current = {key: getattr(getattr(self, _section_of(key)), key) for key in keys}
        if "patience" in current and not self.train.default_budget:  # a budget given sets its own
            current["patience"] = self.train.patience_limit
        chosen, words = choose_by_corpus_size(self.model.arch, current, pairs)
        return self.replace(**chosen, by_corpus_size=words) if chosen else self

    def replace(self, **flat: Any) -> RunConfig:
        """Return a copy with flat keys (``hidden_size=512``) replaced, validated."""
        sections = {s: {} for s in _SECTIONS}
        for key, value in flat.items():
            if key in CHOICES and isinstance(value, str):  # input-feeding, as the CLI spells words
                value = value.replace("-", "_")
            sections[_section_of(key)][key] = value
        new = RunConfig(**{s: dataclasses.replace(getattr(self, s), **kw)
                           for s, kw in sections.items()})
        new.validate()
        return new

    def validate(self) -> None:
        """Raise ConfigError on values no run could use, naming each setting as a
        :class:`~nmt.errors.SettingError` does (the CLI shows flags)."""
        for section in (self.data, self.model, self.train):
            for f in fields(section):
                check_type(f.name, getattr(section, f.name), f.type)
        self._validate_data()
        self._validate_model()
        self._validate_train()

    def _validate_data(self) -> None:
        d = self.data
        check_corpora(d.corpus)
        check(d.max_length_ratio == 0 or d.max_length_ratio >= 1, "max_length_ratio", d.max_length_ratio,
               "must be 0 (off) or at least 1")
        check(d.corpus is None or (d.src_file is None and d.tgt_file is None), None, None,
               "give either {corpus} or {src_file}/{tgt_file}, not both", ("corpus", "src_file", "tgt_file"))
        check((d.src_file is None) == (d.tgt_file is None), None, None,
               "{src_file} and {tgt_file} go together", ("src_file", "tgt_file"))
        for part in ("valid", "test"):
            check((getattr(d, f"{part}_src") is None) == (getattr(d, f"{part}_tgt") is None), None, None,
                   f"{{{part}_src}} and {{{part}_tgt}} go together", (f"{part}_src", f"{part}_tgt"))
        at_least(d, "valid_size", 0)
        at_least(d, "test_size", 0)
        at_least(d, "max_pieces", 4)
        at_least(d, "vocab_size", 16)
        at_least(d, "spm_sample", 2)

    def _validate_model(self) -> None:
        m = self.model
        for name in ("embed_size", "hidden_size", "layers"):
            at_least(m, name, 1)
        check(not m.bidirectional or (m.hidden_size or 0) % 2 == 0, "hidden_size", m.hidden_size,
               "a bidirectional encoder needs an even size")
        check(m.dropout is None or 0 <= m.dropout < 1, "dropout", m.dropout, "must be in [0, 1)")
        choice(m, "decoder", ("input_feeding", "bahdanau"))
        choice(m, "arch", ("gru", "transformer"))
        if m.arch == "transformer":
            check(m.hidden_size is not None, "hidden_size", None, "a transformer's size does not follow the "
                  "corpus size: give one")
            check(m.embed_size == m.hidden_size, "embed_size", m.embed_size,
                   f"a transformer has one size, d_model: it must equal {{hidden_size}} ({m.hidden_size})",
                   ("hidden_size",))
            at_least(m, "heads", 1)
            check(m.hidden_size % m.heads == 0, "hidden_size", m.hidden_size,
                   f"must be a multiple of {{heads}} ({m.heads})", ("heads",))
            check(m.hidden_size % 2 == 0, "hidden_size", m.hidden_size, "a transformer needs an even size")
            at_least(m, "ff_size", 1)
        choice(m, "norm", ("pre", "post"))
        check(not m.tie_embeddings or None in (m.embed_size, m.hidden_size) or m.embed_size == m.hidden_size,
              "tie_embeddings", None,
               f"the output layer reads {{hidden_size}} ({m.hidden_size}) values: tying needs "
               f"{{embed_size}} ({m.embed_size}) equal to it", ("hidden_size", "embed_size"))
        choice(m, "attention", ("additive", "dot"))
        check(0 <= m.init_range <= 1, "init_range", m.init_range,
               "must be in [0, 1] (weights start uniform in ±init_range; 0: PyTorch's own)")
        for name in ("source_pieces", "target_pieces"):
            check(0 <= getattr(m, name) <= m.vocab or not m.vocab, name, getattr(m, name),
                   f"must be in [0, vocab {m.vocab}]")

    def _validate_train(self) -> None:
        t = self.train
        for name in ("epochs", "max_steps", "batch_size", "accum", "batch_tokens", "valid_bleu_size",
                     "warmup_steps"):
            at_least(t, name, 1)
        for name in ("max_pass_pieces", "valid_every", "patience", "threads", "keep_checkpoints"):
            at_least(t, name, 0)
        at_least(t, "average_last", 0)
        check(t.average_last != 1, "average_last", t.average_last, "must be 0 (off) or at least 2")
        check(t.max_minutes is None or t.max_minutes > 0, "max_minutes", t.max_minutes, "must be > 0")
        check(t.lr > 0, "lr", t.lr, "must be > 0")
        check(0 < t.lr_decay <= 1, "lr_decay", t.lr_decay, "must be in (0, 1]")
        check(t.clip > 0, "clip", t.clip, "must be > 0")
        check(t.label_smoothing is None or 0 <= t.label_smoothing < 1, "label_smoothing", t.label_smoothing,
              "must be in [0, 1)")
        check(t.subword_alpha is None or 0 <= t.subword_alpha <= 1, "subword_alpha", t.subword_alpha,
              "must be in [0, 1] (0: off)")
        check(t.source_word_dropout is None or 0 <= t.source_word_dropout < 1, "source_word_dropout", t.source_word_dropout, "must be in [0, 1)")
        check(t.rdrop_alpha is None or t.rdrop_alpha >= 0, "rdrop_alpha", t.rdrop_alpha, "must be >= 0 (0: off)")
        check(t.subword_nbest == -1 or t.subword_nbest >= 2, "subword_nbest", t.subword_nbest,
              "must be at least 2")
        choice(t, "kernels", ("fast", "reference"))
        choice(t, "schedule", ("plateau", "noam"))
        from nmt.runtime.precision import PRECISIONS  # here: config itself needs no torch

        choice(t, "precision", PRECISIONS)


_SECTIONS = {"data": DataConfig, "model": ModelConfig, "train": TrainConfig}


def _section_of(key: str) -> str:
    for section, cls in _SECTIONS.items():
        if key in {f.name for f in fields(cls)}:
            return section
    valid = sorted({f.name for cls in _SECTIONS.values() for f in fields(cls)} - set(SET_BY_TRAIN))
    raise ConfigError(None, None, f"unknown config key '{key}'; valid keys: {', '.join(valid)}")


def default_of(key: str) -> Any:
    """The dataclass default of a flat key, for help texts."""
    section = _SECTIONS[_section_of(key)]
    return {f.name: f.default for f in fields(section)}[key]


def flatten(raw: dict[str, Any], source: str) -> dict[str, Any]:
    """Turn a sectioned or flat mapping into flat keys; ``source`` names it in errors."""
    if not isinstance(raw, dict):
        raise ConfigError(None, None, f"{source}: expected a mapping of option: value")
    flat: dict[str, Any] = {}
    for key, value in raw.items():
        key = str(key).replace("-", "_")
        if key in _SECTIONS and isinstance(value, dict):
            flat.update(flatten(value, source))
        else:
            _section_of(key)
            flat[key] = value
    return flat


def load_config_file(path: Path) -> dict[str, Any]:
    """Read a user's YAML config file into flat keys, without what nmt train records from the
    data (a run's config.yaml is a valid --config: train works those out again)."""
    flat = flatten(read_yaml_file(path, "config file") or {}, str(path))
    if recorded := sorted(flat.keys() & set(SET_BY_TRAIN)):
        logging.getLogger(__name__).warning("%s: %s recorded by nmt train from the data, not settings; ignored",
                                            path, ", ".join(recorded))
    return {key: value for key, value in flat.items() if key not in SET_BY_TRAIN}


def build_config(file_options: dict[str, Any], cli_options: dict[str, Any]) -> RunConfig:
    """Defaults (the architecture's where they differ), overridden by a config file,
    overridden by explicit flags."""
    given = {**file_options, **cli_options}
    try:
        return RunConfig().replace(**{**ARCH_DEFAULTS.get(given.get("arch", "gru"), {}), **given})
    except TypeError as e:
        raise ConfigError(None, None, f"invalid config value: {e}") from None


def save_config(config: RunConfig, path: Path) -> None:
    from nmt.runtime.fileio import atomic_write_text
    atomic_write_text(path, yaml.safe_dump(config.to_dict(), sort_keys=False))


EXPORT_MANIFEST = "nmt_export.json"  # what nmt export writes beside the model (nmt.export.exported)


def read_run_config(path: Path) -> RunConfig:
    """Load a saved ``config.yaml``; unknown keys mean another version of nmt wrote it."""
    if not path.exists():
        if (path.parent / EXPORT_MANIFEST).is_file():
            raise ConfigError(None, None, f"{path.parent}: a model made by nmt export, not a run; nmt translate "
                                          "and nmt eval decode it with --engine ctranslate2")
        raise ConfigError(None, None, f"{path}: missing; is this an nmt run directory?")
    raw = read_yaml_file(path, "run config")
    try:
        flat = flatten(raw, str(path))
        if flat.get("arch") == "transformer":
            flat.setdefault("norm", "pre")  # saved before the key existed, when pre-norm was the only one
        return RunConfig().replace(**flat)
    except TypeError as e:
        raise ConfigError(None, None, f"{path}: unreadable run config ({str(e).splitlines()[0]})") from None
    except ConfigError as e:
        raise ConfigError(None, None, f"{path}: written by an incompatible nmt version? {e}") from None
