"""Raw text in, detokenised translations out, in input order, one line per input line."""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import torch

from nmt.data.batching import length_sorted_chunks, make_batch
from nmt.data.corpus import normalize
from nmt.data.tokenizer import Tokenizer
from nmt.errors import NmtError
from nmt.inference.argmax import LinearArgmax
from nmt.inference import beam, greedy, sampling
from nmt.inference.search import DEFAULT_BATCH, Execution, Hypothesis, SourceBatch, Strategy, max_output_lengths
from nmt.inference.settings import SearchOptions
from nmt.models.interface import TranslationModel
from nmt.runtime.precision import autocast

log = logging.getLogger(__name__)


class SentenceTranslator:
    """What every decoding engine shares: raw text to normalised, tokenised, length-capped
    piece ids; each output's budget; hypotheses back to detokenised text, one per line, in
    order. An engine (:class:`Translator`, nmt's own; :class:`nmt.export.engine.CTranslate2Translator`)
    gives :meth:`nbest_of_ids`.

    Every search follows ``options`` (:class:`nmt.inference.settings.SearchOptions`). Source
    lines are cut to ``max_src_pieces`` so one absurd line cannot exhaust memory; each output
    may have at most ``len_ratio * source pieces + len_extra`` pieces (its source's EOS and its
    own included). ``precision`` is what the engine decodes at, as the CLI names it.
    """

    def __init__(self, tokenizer: Tokenizer, options: SearchOptions = SearchOptions(), max_src_pieces: int = 256,
                 precision: str = "fp32") -> None:
        self.tokenizer, self.options, self.precision = tokenizer, options, precision
        self.max_src_pieces = max_src_pieces

    @property
    def max_output_pieces(self) -> int:
        """The most pieces any output may have: that of a source of ``max_src_pieces``."""
        return int(self.options.len_ratio * self.max_src_pieces) + self.options.len_extra

    def budgets(self, src_len: torch.Tensor) -> torch.Tensor:
        """Each output's most pieces, EOS included, from its source's length with EOS; shape
        (batch,)."""
        return max_output_lengths(src_len, self.options.len_ratio, self.options.len_extra,
                                  cap=self.max_output_pieces)

    def encode(self, lines: list[str]) -> list[list[int]]:
        """Normalised, tokenised and length-capped source ids of each line."""
        ids = self.tokenizer.encode([normalize(line) for line in lines])
        if any(len(seq) > self.max_src_pieces for seq in ids):
            log.warning("source lines longer than %d pieces were cut to that length",
                        self.max_src_pieces)
        return [seq[:self.max_src_pieces] for seq in ids]

    def nbest(self, lines: list[str], batch_size: int = DEFAULT_BATCH, with_scores: bool = True,
              with_attention: bool = True) -> list[list[Hypothesis]]:
        """The ``options.nbest`` hypotheses of each line (the best first, or the samples in the
        order drawn); [] for an empty (all-space) line.

        ``with_scores=False`` lets greedy search skip scoring (scores are then NaN);
        ``with_attention=False`` skips keeping attention (it is then None)."""
        return self.nbest_of_ids(self.encode(lines), batch_size, with_scores, with_attention)

    def nbest_of_ids(self, ids: list[list[int]], batch_size: int = DEFAULT_BATCH,
                     with_scores: bool = True, with_attention: bool = True) -> list[list[Hypothesis]]:
        """:meth:`nbest` of sources already encoded (:meth:`encode`)."""
        raise NotImplementedError

    def hypotheses(self, lines: list[str], batch_size: int = DEFAULT_BATCH, with_scores: bool = True,
                   with_attention: bool = True) -> list[Hypothesis | None]:
        """The first hypothesis of each line; None for an empty line."""
        return [hyps[0] if hyps else None for hyps in self.nbest(lines, batch_size, with_scores, with_attention)]

    def detokenize(self, hyps: list[Hypothesis]) -> list[str]:
        return self.tokenizer.decode([h.tokens for h in hyps])

    def translate(self, lines: list[str], batch_size: int = DEFAULT_BATCH) -> list[str]:
        """Detokenised translation of each line; an empty line gives an empty line."""
        hyps = self.hypotheses(lines, batch_size, with_scores=False, with_attention=False)
        texts = iter(self.detokenize([h for h in hyps if h is not None]))
        return [next(texts) if h is not None else "" for h in hyps]


class Translator(SentenceTranslator):
    """Batched translation with a trained model: greedy, beam search or sampling, as
    ``options.strategy`` says (:mod:`nmt.inference.greedy`, :mod:`~nmt.inference.beam`,
    :mod:`~nmt.inference.sampling`).

    On CPU, ``workers`` batches are decoded at once, each on its share of the threads (0: two
    when there are two threads or more, but one in bf16). A float32 decoder step's small ops
    keep one thread each, so two batches on one thread each beat one batch on two: on the
    2-core AVX2 CPU the GRU's greedy search went 22% faster and beam search 7%. In bf16 the ops
    are short enough that the two batches' threads wait for the interpreter lock instead
    (docs/performance.md, "Decoding with AMX"). Outputs do not depend on it. Each worker's
    batches decode as one stream, a batch's last sentences joined by the next batch
    (:func:`nmt.inference.search.greedy_searches`, :func:`~nmt.inference.beam.beam_searches`).
    Greedy search on CPU picks pieces with :class:`nmt.inference.argmax.LinearArgmax` when it need not
    score them: the same pieces as the float32 generator's (not with the model's ``kernels``
    ``reference``, see :mod:`nmt.models.kernels`).
    ``precision`` is what the model decodes at: fp32; bf16 or fp16, the autocast the search
    runs under (:mod:`nmt.runtime.precision`); or int8, a model from :func:`nmt.inference.quantize.quantize_int8`.
    """

    def __init__(self, model: TranslationModel, tokenizer: Tokenizer, device: torch.device,
                 options: SearchOptions = SearchOptions(), max_src_pieces: int = 256, workers: int = 0,
                 precision: str = "fp32") -> None:
        super().__init__(tokenizer, options, max_src_pieces, precision)
        self.model, self.device = model, device
        outputs, beam = model.output_layer.out_features, options.beam
        if beam > 1 and 2 * beam > outputs:  # each step ranks 2 * beam of the first step's outputs
            raise NmtError(f"beam size {beam} is too large for this model: it outputs {outputs} "
                           f"pieces, so the beam can hold at most {outputs // 2}")
        self.workers = workers
        self._argmax: tuple[tuple[int, int], LinearArgmax] | None = None  # (weights' identity, it)

    def nbest_of_ids(self, ids: list[list[int]], batch_size: int = DEFAULT_BATCH,
                     with_scores: bool = True, with_attention: bool = True) -> list[list[Hypothesis]]:
        """:meth:`nbest` of sources already encoded (:meth:`encode`). Sampling decodes each
        line ``nbest`` times, a row each, keyed by line and sample number."""
        copies = self.options.nbest if self.options.strategy == "sample" else 1
        todo = [(i, k) for i, seq in enumerate(ids) if seq for k in range(copies)]
        # Fewer lines than the workers' batches: one batch a worker still beats one batch on all
        # threads (16 lines, a service's batch: 20% faster on 2 cores)
        size = max(1, min(batch_size, -(-len(todo) // self.parallel_workers())))
        chunks = [[todo[k] for k in chunk] for chunk in length_sorted_chunks([len(ids[i]) for i, _ in todo], size)]
        argmax = None if with_scores else self._greedy_argmax()
        decoded = self._decode_all(chunks, lambda share, cancel: self._decode_batches(
            [[ids[i] for i, _ in chunk] for chunk in share], [[i * _SAMPLES + k for i, k in chunk] for chunk in share],
            with_scores, with_attention, argmax, size // 2, cancel))
        found: list[list[tuple[int, list[Hypothesis]]]] = [[] for _ in ids]
        for chunk, batch_hyps in zip(chunks, decoded):
            for (i, k), hyps in zip(chunk, batch_hyps):
                found[i].append((k, hyps))
        return [[h for _, hyps in sorted(line, key=lambda kh: kh[0]) for h in hyps] for line in found]

    def _greedy_argmax(self) -> LinearArgmax | None:
        """The generator's certified int8 argmax for greedy search on CPU, rebuilt only when
        its weights change (training updates them in place, which bumps their version)."""
        proj = self.model.output_layer
        if (self.options.strategy != "greedy" or self.device.type != "cpu" or self.model.kernels != "fast"
                or not LinearArgmax.available(proj)):
            return None
        key = (proj.weight.data_ptr(), proj.weight._version)
        if self._argmax is None or self._argmax[0] != key:
            self._argmax = key, LinearArgmax(proj)
        return self._argmax[1]

    def parallel_workers(self) -> int:
        """Batches decoded at once: 1 off CPU, and in bf16 on CPU, whose ops are short enough
        that two batches' Python threads mostly wait for each other's interpreter lock."""
        if self.device.type != "cpu":
            return 1
        return self.workers or (1 if self._bf16_on_cpu or torch.get_num_threads() < 2 else 2)

    @property
    def row_multiple(self) -> int:
        """What the search keeps its row count a multiple of (``greedy_search``): 16, one
        AMX tile's rows, in bf16 on CPU, whose kernels are compiled per shape; elsewhere 1,
        for padding rows cost their work."""
        return 16 if self._bf16_on_cpu else 1

    @property
    def _bf16_on_cpu(self) -> bool:
        return self.device.type == "cpu" and self.precision == "bf16"

    def _decode_all(self, chunks: list[list[int]],
                    decode: Callable[[list[list[int]], threading.Event | None], list[list[list[Hypothesis]]]]
                    ) -> list[list[list[Hypothesis]]]:
        """The hypotheses of each chunk, in order: ``decode`` of each worker's share of the
        chunks (every ``workers``-th, in order), in eval mode, on the workers' thread shares.
        Ctrl-C stops the workers' searches at their next step (a ``cancel`` event), so that
        it is not kept waiting until every share is decoded."""
        workers = max(1, min(self.parallel_workers(), len(chunks)))
        was_training, threads = self.model.training, torch.get_num_threads()
        if was_training:  # eval() and train() walk every module: 0.4 ms, 3% of a one-sentence call
            self.model.eval()
        share = max(1, threads // workers)
        torch.set_num_threads(share)
        try:
            if workers < 2:  # on this thread, which Ctrl-C interrupts itself
                decoded = [decode(chunks, None)]
            else:
                cancel = threading.Event()
                # each worker thread sets its own share: a new thread's MKL would take every core
                with ThreadPoolExecutor(workers, initializer=torch.set_num_threads, initargs=(share,)) as pool:
                    futures = [pool.submit(decode, chunks[w::workers], cancel) for w in range(workers)]
                    try:
                        decoded = [future.result() for future in futures]
                    except BaseException:
                        cancel.set()  # the pool waits for its workers on the way out
                        raise
        finally:
            torch.set_num_threads(threads)
            if was_training:
                self.model.train()
        results: list[list[list[Hypothesis]]] = [[] for _ in chunks]
        for w, share in enumerate(decoded):
            results[w::workers] = share
        return results

    def _decode_batches(self, batches: list[list[list[int]]], keys: list[list[int]], with_scores: bool,
                        with_attention: bool, argmax: LinearArgmax | None, join_below: int,
                        cancel: threading.Event | None) -> list[list[list[Hypothesis]]]:
        """Each batch's hypotheses, by the options' strategy. The search decodes the batches
        as one stream: a batch joins the one before once no more than ``join_below`` of the
        earlier one's sentences are going (:func:`nmt.inference.search.row_searches`,
        :func:`~nmt.inference.beam.beam_searches`; half a batch: docs/performance.md, "Joining
        batches"). ``keys`` number each batch's rows for sampling."""
        execution = Execution(with_scores, with_attention, argmax, self.row_multiple, join_below, cancel)
        with autocast(self.device, self.precision):
            return STRATEGIES[self.options.strategy](self.model, map(self._batch, batches, keys), self.options,
                                                     execution)

    def _batch(self, src_ids: list[list[int]], keys: list[int]) -> SourceBatch:
        """A batch of sources on the device, with each one's output budget and key."""
        batch = make_batch(src_ids).to(self.device)
        return batch.src, batch.src_len, self.budgets(batch.src_len), torch.tensor(keys, device=self.device)


_SAMPLES = 1 << 16  # a line's sample k has the key line * _SAMPLES + k
STRATEGIES: dict[str, Strategy] = {"greedy": greedy.decode, "beam": beam.decode, "sample": sampling.decode}
