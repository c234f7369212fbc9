"""The Python API: a trained run as an object that translates and scores sentences.

>>> from nmt import Sampling, load
>>> model = load(RUN)             # a run directory; load(): the newest run in checkpoints/
>>> best, second = model.translate(["Tom sees the cat."], beam=3, nbest=2, length_penalty=0)[0]
>>> best.score >= second.score
True
>>> [log_prob] = model.score(["Tom sees the cat."], ["Tom voit le chat."])
>>> log_prob < 0
True
>>> model.translate(["", "Tom sees the cat."])[0]          # an empty line has no translation
[]
>>> samples = model.translate(["Tom sees the cat."], nbest=3, sampling=Sampling(top_p=0.9, seed=7))[0]
>>> len(samples)                                             # three draws, the same for seed 7
3
>>> maps = model.attention("Tom sees the cat.")            # every layer's and head's weights
>>> layers, heads, rows, columns = maps.weights["cross"].shape
>>> (rows, columns) == tuple(map(len, maps.pieces["cross"]))
True

Both model families work alike, through the same :class:`nmt.inference.translate.Translator`
that ``nmt translate`` uses; ``load(EXPORT_DIR, engine="ctranslate2")`` gives an
:class:`ExportedModel`, the same interface over CTranslate2 (no attention, no sampling). A
model may be shared by threads: each call holds its lock, so calls run one at a time (a call
already spreads over the CPU's cores).
"""
from __future__ import annotations

import logging
import math
import threading
from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass
from pathlib import Path

import torch

from nmt.data.batching import make_batch
from nmt.data.corpus import normalize
from nmt.data.tokenizer import Tokenizer
from nmt.errors import NmtError, SettingError
from nmt.inference.ensemble import Ensemble
from nmt.inference.search import DEFAULT_BATCH, Hypothesis
from nmt.inference.settings import DEFAULT_LENGTH_PENALTY, Sampling, SearchOptions, check_count, check_search
from nmt.inference.translate import SentenceTranslator, Translator
from nmt.models.kernels import use_kernels
from nmt.runtime.precision import autocast
from nmt.tools.inspect import AttentionMaps, attention_maps

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Translation:
    """One translation of one source sentence.

    ``score`` is the search's: the log-probability of the pieces and the end of sentence (with
    a beam and a length penalty, divided by the GNMT penalty). ``attention``, when asked for,
    has a row per generated piece (the end of sentence included) over the source pieces (and
    the source's end of sentence).
    """

    text: str
    score: float
    pieces: tuple[str, ...]
    source_pieces: tuple[str, ...]
    attention: tuple[tuple[float, ...], ...] | None = None


class _Decoder:
    """What :class:`Model` and :class:`ExportedModel` share: n-best translations and scores of
    given targets through a translator (:meth:`translator`), one call at a time (``_lock``)."""

    run: Path
    _tokenizer: Tokenizer
    _lock: threading.Lock

    def translator(self, options: SearchOptions = SearchOptions(), kernels: str = "fast") -> SentenceTranslator:
        raise NotImplementedError

    def translate(self, sources: Iterable[str], beam: int = 1, nbest: int = 1,
                  length_penalty: float = DEFAULT_LENGTH_PENALTY, attention: bool = False,
                  batch_size: int = DEFAULT_BATCH, sampling: Sampling | None = None) -> list[list[Translation]]:
        """The ``nbest`` best translations of each source, best first, or with ``sampling``
        (:class:`nmt.inference.settings.Sampling`, beam 1) ``nbest`` samples in the order drawn;
        [] for an empty source."""
        lines = _lines(sources, "sources")
        options = SearchOptions(beam, nbest, length_penalty, sampling)
        check_count("batch_size", batch_size)
        with self._lock:
            translator = self.translator(options)
            source_ids = translator.encode(lines)
            results = translator.nbest_of_ids(source_ids, batch_size, with_attention=attention)
            return [[self._translation(h, ids, translator) for h in hyps]
                    for hyps, ids in zip(results, source_ids)]

    def score(self, sources: Iterable[str], targets: Iterable[str], batch_size: int = 64) -> list[float]:
        """The log-probability the model gives each target (its pieces and the end of sentence)
        after its source, teacher-forced: -inf for a target the model cannot output (holding a
        piece it has no output for, or longer than any search may give, which is not decoded,
        with a warning), 0.0 for an empty source."""
        sources, targets = _lines(sources, "sources"), _lines(targets, "targets")
        if len(sources) != len(targets):
            raise NmtError(f"score needs a target per source: {len(sources)} sources, {len(targets)} targets")
        check_count("batch_size", batch_size)
        with self._lock:
            translator = self.translator(SearchOptions())
            src_ids = translator.encode(sources)
            tgt_ids = self._tokenizer.encode([normalize(t) for t in targets])
            scores = [0.0 if not ids else -math.inf for ids in src_ids]
            todo = [i for i, ids in enumerate(src_ids) if ids and len(tgt_ids[i]) <= translator.max_output_pieces]
            if len(todo) < sum(map(bool, src_ids)):
                log.warning("targets longer than %d pieces, the longest output a search may give, score -inf",
                            translator.max_output_pieces)
            for start in range(0, len(todo), batch_size):
                chunk = todo[start:start + batch_size]
                for i, value in zip(chunk, self._log_probs([src_ids[i] for i in chunk], [tgt_ids[i] for i in chunk])):
                    scores[i] = value
            return scores

    def _log_probs(self, src: list[list[int]], tgt: list[list[int]]) -> list[float]:
        """Each target's teacher-forced log-probability, its end of sentence included."""
        raise NotImplementedError

    def _translation(self, hyp: Hypothesis, source_ids: list[int], translator: SentenceTranslator) -> Translation:
        weights = None
        if hyp.attention is not None:
            weights = tuple(tuple(round(float(w), 6) for w in row) for row in hyp.attention.tolist())
        return Translation(translator.detokenize([hyp])[0], hyp.score, tuple(self._tokenizer.pieces(hyp.tokens)),
                           tuple(self._tokenizer.pieces(source_ids)), weights)


class Model(_Decoder):
    """A trained run (None: the newest in checkpoints/) loaded for decoding on ``device`` at
    ``precision``, as ``nmt translate``'s flags say them (precision ``auto``, ``fp32``,
    ``bf16``, ``fp16`` or ``int8``), with the weights called ``weights`` (``default``: the
    run's, ``averaged`` or ``best``; or ``best``, ``last``, ``averaged``, ``step-K``); the settings are checked before the run is looked for."""

    def __init__(self, run: str | Path | None = None, device: str = "auto", precision: str = "auto",
                 weights: str = "default") -> None:
        from nmt.inference.loading import latest_run
        from nmt.inference.quantize import decoding_device, load_for_decoding
        from nmt.runtime.devices import configure_cpu
        from nmt.runtime.weights import DEFAULT, check_name, default_weights

        configure_cpu(0)
        self.device = decoding_device(precision, device)
        self.run = Path(run) if run is not None else latest_run()
        check_name(weights)
        self.weights = default_weights(self.run) if weights == DEFAULT else weights  # named as the files are
        self._model, self._tokenizer, self.precision = load_for_decoding(self.run, precision, self.device,
                                                                         self.weights)
        self._lock = threading.Lock()

    @property
    def attention_kinds(self) -> tuple[str, ...]:
        """The attentions :meth:`attention` returns: "cross" (encoder-decoder), and a
        Transformer's "encoder" and "decoder" self-attention."""
        from nmt.models.transformer.model import Transformer
        return ("cross", "encoder", "decoder") if isinstance(self._model, Transformer) else ("cross",)

    def attention(self, source: str, beam: int = 1, rank: int = 1,
                  length_penalty: float = DEFAULT_LENGTH_PENALTY) -> AttentionMaps:
        """Every attention's weights, every layer and head, while the model reads ``source`` and
        its ``rank``-th best translation by a search with ``beam``."""
        if not isinstance(source, str):
            raise TypeError(f"pass one sentence (str), not {type(source).__name__}")
        _check_text(source, "source")
        check_search(beam, length_penalty, rank, "rank")
        with self._lock:
            translator = self.translator(SearchOptions(beam, rank, length_penalty))
            [ids] = translator.encode([source])
            if not ids:
                raise NmtError("the sentence has no text to translate")
            hyps = translator.nbest_of_ids([ids], with_attention=True)[0]
            if len(hyps) < rank:
                raise NmtError(f"the search found {len(hyps)} translations, not {rank}")
            return attention_maps(translator, source, ids, hyps[rank - 1])

    @torch.inference_mode()
    def _log_probs(self, src: list[list[int]], tgt: list[list[int]]) -> list[float]:
        batch = make_batch(src, tgt).to(self.device)
        self._model.eval()
        with autocast(self.device, self.precision):
            outputs, _ = self._model(batch.src, batch.src_len, batch.tgt_in)
            log_probs = torch.log_softmax(self._model.logits(outputs).float(), dim=-1)  # (batch, tgt_len, outputs)
        ids = self._model.piece_ids(torch.arange(log_probs.size(-1), device=self.device))
        position = torch.full((self._tokenizer.vocab_size,), -1, dtype=torch.long, device=self.device)
        position[ids] = torch.arange(ids.numel(), device=self.device)
        gold = position[batch.tgt_out]  # (batch, tgt_len); -1 where the model has no output for it
        picked = log_probs.gather(-1, gold.clamp(min=0).unsqueeze(-1)).squeeze(-1)
        picked = picked.masked_fill(gold < 0, float("-inf")).masked_fill(~batch.tgt_mask, 0.0)
        return picked.sum(dim=1).tolist()

    def translator(self, options: SearchOptions = SearchOptions(), kernels: str = "fast") -> Translator:
        """The batch translator underneath, as ``nmt translate`` and ``nmt eval`` use it (not
        under the lock: for one thread)."""
        return Translator(use_kernels(self._model, kernels), self._tokenizer, self.device, options,
                          precision=self.precision)

    @staticmethod
    def ensemble(members: list[Model], options: SearchOptions = SearchOptions()) -> Translator:
        """A batch translator that decodes with the mean of ``members``' log-probabilities
        (:mod:`nmt.inference.ensemble`); they must share one tokenizer, and decode at one
        precision on one device."""
        first = members[0]
        for other in members[1:]:
            if other._tokenizer.sha256 != first._tokenizer.sha256:
                raise NmtError(f"{other.run}: not the tokenizer of {first.run} (sha256 "
                               f"{other._tokenizer.sha256[:12]}… against {first._tokenizer.sha256[:12]}…); "
                               "the members of an ensemble must share one spm.model")
            if (other.precision, other.device) != (first.precision, first.device):
                raise NmtError(f"{other.run} decodes at {other.precision} on {other.device}, {first.run} at "
                               f"{first.precision} on {first.device}; give --precision and --device")
        return Translator(Ensemble([m._model for m in members]), first._tokenizer, first.device, options,
                          precision=first.precision)


NO_ATTENTION = ("CTranslate2 computes no attention weights for nmt's models; load or serve the run itself "
                "(nmt's own engine) to see them")


class ExportedModel(_Decoder):
    """A directory made by ``nmt export``, decoded by CTranslate2 on ``device`` at
    ``precision`` (a CTranslate2 compute type, as ``nmt translate --engine ctranslate2`` names
    it; ``auto``: as exported), behind :class:`Model`'s interface: the same translations,
    samples refused, scores from CTranslate2's own scoring, no attention."""

    attention_kinds: tuple[str, ...] = ()

    def __init__(self, directory: str | Path, device: str = "auto", precision: str = "auto") -> None:
        from nmt.export.engine import CTranslate2Translator
        from nmt.export.exported import open_exported

        self.run = Path(directory)
        self.exported = open_exported(self.run)
        self._engine = CTranslate2Translator(self.exported, device, precision)
        self._tokenizer = self.exported.tokenizer
        self._outputs = frozenset(self._engine.target_pieces)
        self.device, self.precision = self._engine.device, self._engine.precision
        self.weights = Path(self.exported.manifest["weights"]["file"]).stem  # named as Model's are: best, step-K
        self._lock = threading.Lock()

    def translate(self, sources: Iterable[str], beam: int = 1, nbest: int = 1,
                  length_penalty: float = DEFAULT_LENGTH_PENALTY, attention: bool = False,
                  batch_size: int = DEFAULT_BATCH, sampling: Sampling | None = None) -> list[list[Translation]]:
        if attention:
            raise NmtError(NO_ATTENTION)
        return super().translate(sources, beam, nbest, length_penalty, False, batch_size, sampling)

    def attention(self, source: str, beam: int = 1, rank: int = 1,
                  length_penalty: float = DEFAULT_LENGTH_PENALTY) -> AttentionMaps:
        raise NmtError(NO_ATTENTION)

    def _log_probs(self, src: list[list[int]], tgt: list[list[int]]) -> list[float]:
        piece = self._tokenizer.sp.id_to_piece
        sources = [[piece(t) for t in ids] for ids in src]
        targets = [[piece(t) for t in ids] for ids in tgt]
        results = self._engine.engine.score_batch(sources, targets, max_input_length=0)
        return [sum(r.log_probs) if set(pieces) <= self._outputs else -math.inf
                for r, pieces in zip(results, targets)]

    def translator(self, options: SearchOptions = SearchOptions(), kernels: str = "fast") -> SentenceTranslator:
        """CTranslate2's batch translator under ``options`` (``kernels`` are nmt's own: unused)."""
        return self._engine.with_options(options)


def _lines(sentences: Iterable[str], name: str) -> list[str]:
    """``sentences`` as a list, read once (a generator gives its items once), each checked."""
    if isinstance(sentences, (str, bytes, Set, Mapping)):  # one sentence; no order to answer in
        raise TypeError(f"{name}: pass a list (or any ordered iterable) of sentences, not a "
                        f"{type(sentences).__name__}")
    try:
        items = iter(sentences)
    except TypeError:
        raise TypeError(f"{name}: pass a list (or any ordered iterable) of sentences, not "
                        f"{type(sentences).__name__}") from None
    lines = list(items)  # outside the try: a TypeError in the caller's generator is the caller's
    for k, line in enumerate(lines):
        if not isinstance(line, str):
            raise TypeError(f"{name}[{k}] is {type(line).__name__}, not a sentence (str)")
        _check_text(line, f"{name}[{k}]")
    return lines


def _check_text(text: str, name: str) -> None:
    """Text that cannot be UTF-8 (a lone surrogate, from ``surrogateescape`` or a JSON ``\\udc80``)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise NmtError(f"{name} {ascii(text[:40])}{'...' if len(text) > 40 else ''}: a lone surrogate "
                       f"{ascii(text[e.start])} at character {e.start + 1} is not text") from None


def load(run: str | Path | None = None, device: str = "auto", precision: str = "auto",
         weights: str = "default", engine: str = "nmt") -> Model | ExportedModel:
    """Load a run directory for translating and scoring (None: the newest run in checkpoints/),
    with its ``default``, ``best``, ``last``, ``averaged`` or ``step-K`` weights; with
    ``engine="ctranslate2"``, a directory made by ``nmt export`` (:class:`ExportedModel`)."""
    if engine == "ctranslate2":
        if weights != "default":
            raise SettingError("weights", weights, "chooses a run's weights; an export holds one set: "
                               "export the ones you want (nmt export --weights)")
        if run is None:
            raise SettingError("engine", engine, "needs the directory made by nmt export")
        return ExportedModel(run, device, precision)
    if engine != "nmt":
        raise SettingError("engine", engine, "must be one of nmt, ctranslate2")
    return Model(run, device, precision, weights)
