"""Translation with CTranslate2 on an exported directory, under nmt's own contract: the same
normalisation, source cap, output budgets, GNMT length penalty and n-best lists as
:class:`nmt.inference.translate.Translator`, so that the two engines' outputs and scores can
be compared line for line.

How CTranslate2 is asked so that its search is nmt's:
- Sentences go in length-sorted batches, as nmt sorts them, each call given its longest
  budget. A sentence whose own, smaller budget could have changed its result (its search ran
  up to that budget) is decoded again alone with its budget: rare, since budgets are generous.
- Beam search stops a sentence once ``beam`` hypotheses have ended, nmt's (and fairseq's)
  rule. CTranslate2 follows it only under a length penalty, so it is given a negligible one
  (1e-9: scores are divided by pieces ** 1e-9) and nmt's GNMT penalty is applied to the
  log-probabilities recovered from them.
- Hypotheses keep their EOS (``return_end_token``), so that lengths count it as nmt's do;
  EOS may come first (``min_decoding_length`` 0), as nmt allows an empty output.
"""
from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass

import torch

from nmt.data.tokenizer import EOS_ID
from nmt.errors import NmtError, SettingError
from nmt.export.converter import require_ctranslate2
from nmt.export.exported import Exported
from nmt.inference.search import DEFAULT_BATCH, Hypothesis, gnmt_length_penalty
from nmt.inference.settings import SearchOptions
from nmt.inference.translate import SentenceTranslator

# nmt's precision names as CTranslate2's compute types; "auto" is what the export stored.
COMPUTE_TYPES = {"auto": "default", "fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "int8": "int8"}
_NEGLIGIBLE_PENALTY = 1e-9  # turns on CTranslate2's "stop after beam hypotheses" rule


@dataclass
class _Request:
    """One sentence to decode: its position in the input, its pieces, its budget."""

    index: int
    pieces: list[str]
    budget: int


class CTranslate2Translator(SentenceTranslator):
    """:class:`~nmt.inference.translate.SentenceTranslator` over a ``ctranslate2.Translator``.

    ``precision`` is one of :data:`COMPUTE_TYPES` or a CTranslate2 compute type (``int8_float32``,
    ``int16`` …). ``workers`` batches are decoded at once (CTranslate2's ``inter_threads``), each
    on its share of torch's threads (``intra_threads``); 0: as nmt's own on CPU, two batches on
    one thread each where there are two threads or more (on 2 cores CTranslate2 is then up to
    several times faster than one batch on two threads: docs/ctranslate2.md), one on a GPU.
    Hypotheses carry no attention.
    """

    def __init__(self, exported: Exported, device: str = "auto", precision: str = "auto",
                 options: SearchOptions = SearchOptions(), workers: int = 0) -> None:
        _refuse_sampling(options)
        ctranslate2 = require_ctranslate2()
        kind, index = _device(device, ctranslate2)
        compute_type = _compute_type(precision, kind, ctranslate2)
        threads = torch.get_num_threads()
        workers = workers or (min(2, threads) if kind == "cpu" else 1)
        threads = max(1, threads // workers)
        self.target_pieces = _vocabulary(exported, "target")
        try:
            self.engine = ctranslate2.Translator(str(exported.directory), device=kind, device_index=index,
                                                 compute_type=compute_type, inter_threads=workers,
                                                 intra_threads=threads)
        except (RuntimeError, ValueError) as e:  # a damaged file in an export made before nmt_export.json's record
            raise NmtError(f"{exported.directory}: CTranslate2 cannot load this model ({_first_line(e)}); "
                           "export the run again") from None
        super().__init__(exported.tokenizer, options, precision=self.engine.compute_type)
        self.exported, self.workers = exported, workers
        self.device = torch.device("cpu") if kind == "cpu" else torch.device(kind, index)
        self._check_beam()

    def with_options(self, options: SearchOptions) -> CTranslate2Translator:
        """This translator (its loaded model shared) searching by ``options``."""
        _refuse_sampling(options)
        other = copy.copy(self)
        other.options = options
        other._check_beam()
        return other

    def _check_beam(self) -> None:
        beam, outputs = self.options.beam, len(self.target_pieces)
        if beam > 1 and 2 * beam > outputs:
            raise NmtError(f"beam size {beam} is too large for this model: it outputs {outputs} "
                           f"pieces, so the beam can hold at most {outputs // 2}")

    def nbest_of_ids(self, ids: list[list[int]], batch_size: int = DEFAULT_BATCH,
                     with_scores: bool = True, with_attention: bool = True) -> list[list[Hypothesis]]:
        """:meth:`nbest` of sources already encoded; ``with_attention`` is not kept."""
        piece = self.tokenizer.sp.id_to_piece
        requests = [_Request(i, [piece(t) for t in seq], 0) for i, seq in enumerate(ids) if seq]
        budgets = self.budgets(torch.tensor([len(r.pieces) + 1 for r in requests], dtype=torch.long))
        for request, budget in zip(requests, budgets.tolist()):
            request.budget = budget
        requests.sort(key=lambda r: len(r.pieces))
        results: list[list[Hypothesis]] = [[] for _ in ids]
        # A few batches a worker a call: CTranslate2 balances them over its workers (one batch
        # each left a worker idle at every call's end: 12% of greedy search's time), and
        # Ctrl-C still waits for one call only
        step = batch_size * self.workers * 4
        for start in range(0, len(requests), step):
            self._decode(requests[start:start + step], batch_size, self.options.nbest, with_scores, results)
        return results

    def _decode(self, requests: list[_Request], batch_size: int, n: int, with_scores: bool,
                results: list[list[Hypothesis]]) -> None:
        """Decode ``requests`` at their longest budget; those whose own budget could have
        changed what they found go again, together with the others of the same budget."""
        budget = max(r.budget for r in requests)
        found = self._search([r.pieces for r in requests], budget, batch_size, with_scores)
        again: dict[int, list[_Request]] = {}
        for request, hyps in zip(requests, found):
            if request.budget == budget or self._within_budget(hyps, request.budget):
                results[request.index] = hyps[:n]
            else:
                again.setdefault(request.budget, []).append(request)
        for group in again.values():
            self._decode(group, batch_size, n, with_scores, results)

    def _within_budget(self, hyps: list[Hypothesis], budget: int) -> bool:
        """Whether a search run to a larger budget found what one run to ``budget`` would:
        greedy, when its output fits; beam, when ``beam`` hypotheses ended before the budget's
        last step (the search then stopped before it)."""
        lengths = [h.pieces for h in hyps]
        if self.options.beam == 1:
            return lengths[0] <= budget
        return len(lengths) == self.options.beam and max(lengths) < budget

    def _search(self, sources: list[list[str]], budget: int, batch_size: int, with_scores: bool
                ) -> list[list[Hypothesis]]:
        """Each source's hypotheses, best first by nmt's score; their ``pieces`` count EOS."""
        size = self.options.beam
        beam = size > 1
        outputs = self.engine.translate_batch(
            sources, max_batch_size=batch_size, beam_size=size, num_hypotheses=size,
            length_penalty=_NEGLIGIBLE_PENALTY if beam else 0.0, max_decoding_length=budget,
            min_decoding_length=0, max_input_length=0, return_scores=with_scores or beam,
            return_end_token=True)
        return [self._hypotheses(output, with_scores or beam) for output in outputs]

    def _hypotheses(self, output: object, scored: bool) -> list[Hypothesis]:
        to_id = self.tokenizer.sp.piece_to_id
        hyps = []
        for tokens, score in zip(output.hypotheses, output.scores if scored else [math.nan] * len(output.hypotheses)):
            ids = [to_id(t) for t in tokens]
            length = len(ids)
            if self.options.beam > 1:  # back to the log-probability, then nmt's length penalty
                score = score * length ** _NEGLIGIBLE_PENALTY / gnmt_length_penalty(length,
                                                                                    self.options.length_penalty)
            hyps.append(_Scored(ids[:-1] if ids and ids[-1] == EOS_ID else ids, score, None, length))
        return sorted(hyps, key=lambda h: -h.score) if self.options.beam > 1 else hyps


@dataclass
class _Scored(Hypothesis):
    """A hypothesis and the pieces it was scored over (EOS included when it ended)."""

    pieces: int = 0


def _refuse_sampling(options: SearchOptions) -> None:
    if options.sampling is not None:
        raise SettingError("sample", None, "runs on nmt's own engine, whose draws do not depend on the "
                           "batching; leave out --engine ctranslate2")


def _vocabulary(exported: Exported, side: str) -> list[str]:
    for name in (f"{side}_vocabulary.json", "shared_vocabulary.json"):
        path = exported.directory / name
        if path.is_file():
            try:
                pieces = json.loads(path.read_text(encoding="utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as e:
                raise NmtError(f"{path}: not valid JSON ({e}); export the run again") from None
            if not pieces or not isinstance(pieces, list) or not all(isinstance(p, str) for p in pieces):
                raise NmtError(f"{path}: not a list of pieces; export the run again")
            return pieces
    raise NmtError(f"{exported.directory}: no {side} vocabulary; export the run again")


def _first_line(error: Exception) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def _device(spec: str, ctranslate2: object) -> tuple[str, int]:
    """CTranslate2's device and index for nmt's ``--device``: auto (CUDA when there is one),
    cpu, cuda or cuda:N."""
    if spec == "auto":
        return ("cuda", 0) if ctranslate2.get_cuda_device_count() > 0 else ("cpu", 0)
    kind, _, number = spec.partition(":")
    if kind == "cpu" and not number:
        return "cpu", 0
    if kind == "cuda" and (not number or number.isdigit()):
        if ctranslate2.get_cuda_device_count() <= int(number or 0):
            raise SettingError("device", spec, "CTranslate2 sees no such CUDA device")
        return "cuda", int(number or 0)
    raise SettingError("device", spec, "the ctranslate2 engine runs on auto, cpu, cuda or cuda:N")


def _compute_type(precision: str, device: str, ctranslate2: object) -> str:
    compute_type = COMPUTE_TYPES.get(precision, precision)
    supported = sorted(ctranslate2.get_supported_compute_types(device))
    if compute_type != "default" and compute_type not in supported:
        raise SettingError("precision", precision, f"CTranslate2 cannot compute in {compute_type} on this "
                           f"{device}; it can in {', '.join(supported)} (or auto: as exported)")
    return compute_type
