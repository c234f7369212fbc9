import math

import pytest
import torch
from conftest import tiny_model

from nmt.data.batching import make_batch
from nmt.data.tokenizer import BOS_ID, EOS_ID
from nmt.inference.beam import beam_search, beam_searches
from nmt.inference.greedy import greedy_search, greedy_searches
from nmt.inference.search import max_output_lengths
from nmt.models.interface import sentence_rows


def test_greedy_matches_a_manual_step_by_step_argmax():
    model = tiny_model(vocab=30, seed=3)
    batch = make_batch([[5, 6, 7, 8]])
    hyp = greedy_search(model, batch.src, batch.src_len, torch.tensor([10]))[0]
    state = model.encode(batch.src, batch.src_len)
    prev, tokens = torch.tensor([BOS_ID]), []
    for _ in range(10):
        out, state, _ = model.step(prev, state)
        prev = model.logits(out).argmax(-1)
        if int(prev) == EOS_ID:
            break
        tokens.append(int(prev))
    assert hyp.tokens == tokens
    assert hyp.attention.shape == (min(len(tokens) + 1, 10), 5)


def test_length_budget_is_respected_per_sentence():
    model = tiny_model(vocab=30, seed=4)
    batch = make_batch([[5, 6], [7, 8, 9, 10]])
    hyps = greedy_search(model, batch.src, batch.src_len, torch.tensor([2, 5]))
    assert len(hyps[0].tokens) <= 2 and len(hyps[1].tokens) <= 5


def test_max_output_lengths():
    assert max_output_lengths(torch.tensor([1, 10, 100]), 2.0, 5, cap=50).tolist() == [7, 25, 50]


def _sequence_log_prob(model, src_ids, tokens, ended):
    """Log-probability of ``tokens`` (+ EOS when ``ended``) under teacher forcing."""
    from nmt.data.tokenizer import BOS_ID
    batch = make_batch([src_ids])
    state = model.encode(batch.src, batch.src_len)
    total, prev = 0.0, BOS_ID
    for tok in tokens + ([EOS_ID] if ended else []):
        out, state, _ = model.step(torch.tensor([prev]), state)
        total += float(torch.log_softmax(model.logits(out), -1)[0, tok].detach())
        prev = tok
    return total


SOURCES = [[5, 6, 7, 8], [9], [10, 11, 12, 13, 14, 15, 16], [17, 5]]


def test_beam_one_equals_greedy():
    for seed in range(3):
        model = tiny_model(vocab=30, seed=seed)
        batch = make_batch(SOURCES)
        budget = max_output_lengths(batch.src_len, 2.0, 3, cap=40)
        greedy = greedy_search(model, batch.src, batch.src_len, budget)
        beam = beam_search(model, batch.src, batch.src_len, budget, beam=1, length_penalty=0.6)
        for g, (b,) in zip(greedy, beam):
            assert b.tokens == g.tokens
            torch.testing.assert_close(b.attention, g.attention)


def test_nbest_is_sorted_distinct_and_scores_are_true_log_probs():
    model = tiny_model(vocab=30, seed=1)
    batch = make_batch(SOURCES)
    budget = max_output_lengths(batch.src_len, 2.0, 3, cap=40)
    results = beam_search(model, batch.src, batch.src_len, budget, beam=4, nbest=4)
    for src, hyps in zip(SOURCES, results):
        assert len(hyps) == 4
        assert len({tuple(h.tokens) for h in hyps}) == 4
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
        for h in hyps:
            ended = h.attention.size(0) == len(h.tokens) + 1
            assert abs(h.score - _sequence_log_prob(model, src, h.tokens, ended)) < 1e-3
            assert h.attention.shape[1] == len(src) + 1


def test_batched_beam_search_equals_one_sentence_at_a_time():
    """Sentences finish at different steps and leave the batch; the others must not notice."""
    model = tiny_model(vocab=30, seed=2)
    batch = make_batch(SOURCES)
    budget = max_output_lengths(batch.src_len, 2.0, 3, cap=40)
    together = beam_search(model, batch.src, batch.src_len, budget, beam=3, length_penalty=1.0, nbest=3)
    for i, src in enumerate(SOURCES):
        single = make_batch([src])
        alone = beam_search(model, single.src, single.src_len, budget[i:i + 1], beam=3,
                            length_penalty=1.0, nbest=3)[0]
        assert [h.tokens for h in alone] == [h.tokens for h in together[i]]
        for a, b in zip(alone, together[i]):
            assert abs(a.score - b.score) < 1e-4


def test_beam_search_finds_at_least_the_greedy_score():
    model = tiny_model(vocab=30, seed=5)
    batch = make_batch(SOURCES)
    budget = torch.full((len(SOURCES),), 60)
    greedy = greedy_search(model, batch.src, batch.src_len, budget)
    beams = beam_search(model, batch.src, batch.src_len, budget, beam=5, length_penalty=0.0)
    for g, (b,) in zip(greedy, beams):
        if g.attention.size(0) == len(g.tokens) + 1:  # greedy ended with EOS
            assert b.score >= g.score - 1e-4


def test_greedy_without_scores_picks_the_same_pieces():
    model = tiny_model(vocab=30)
    batch = make_batch([[5, 9, 11], [7, 8], [4]])
    budget = torch.full((3,), 10)
    scored = greedy_search(model, batch.src, batch.src_len, budget)
    bare = greedy_search(model, batch.src, batch.src_len, budget, with_scores=False)
    assert [h.tokens for h in bare] == [h.tokens for h in scored]
    assert all(math.isnan(h.score) for h in bare) and not any(math.isnan(h.score) for h in scored)


def test_searches_without_attention_find_the_same_hypotheses():
    model = tiny_model(vocab=30, seed=6)
    batch = make_batch([[5, 6, 7], [8, 9, 10, 11, 12], [13]])
    budget = torch.tensor([8, 9, 4])
    for search in (lambda **kw: [[h] for h in greedy_search(model, batch.src, batch.src_len, budget, **kw)],
                   lambda **kw: beam_search(model, batch.src, batch.src_len, budget, beam=3, nbest=3, **kw)):
        kept, skipped = search(), search(with_attention=False)
        assert [[(h.tokens, h.score) for h in hs] for hs in kept] == \
               [[(h.tokens, h.score) for h in hs] for hs in skipped]
        assert all(h.attention is None for hs in skipped for h in hs)
        assert all(h.attention is not None for hs in kept for h in hs)


def test_early_stop_keeps_the_nbest_lists_and_saves_steps(monkeypatch):
    """A sentence stops once no live beam can enter its n-best list; the lists must be those
    of searching on to ``beam`` finished hypotheses, and the stop must have fired."""
    import nmt.inference.beam as beam_module

    sources = [[5, 6, 7, 8], [9], [10, 11, 4, 5, 6, 7, 8], [11, 5]]
    batch = make_batch(sources)
    budget = max_output_lengths(batch.src_len, 2.0, 8, cap=40)

    def run(model, alpha, nbest):
        rows, step = [0], model.decoder.step

        def counting(prev, state, need_attention=True):
            rows[0] += prev.numel()
            return step(prev, state, need_attention)
        with monkeypatch.context() as patch:
            patch.setattr(model.decoder, "step", counting)
            hyps = beam_search(model, batch.src, batch.src_len, budget, beam=4,
                               length_penalty=alpha, nbest=nbest)
        return [[(h.tokens, round(h.score, 5)) for h in hs] for hs in hyps], rows[0]

    saved = {0.0: 0, 1.0: 0, 3.0: 0}  # at alpha 3 longer hypotheses score better
    for seed in range(6):
        model = tiny_model(vocab=12, seed=seed)  # few pieces, so EOS is often a candidate
        for alpha in saved:
            for nbest in (1, 3):
                early, early_rows = run(model, alpha, nbest)
                with monkeypatch.context() as patch:
                    patch.setattr(beam_module, "_settled", lambda *args: False)
                    full, full_rows = run(model, alpha, nbest)
                assert early == full
                saved[alpha] += full_rows - early_rows
    assert saved[0.0] > 0, saved


# --- search over the interface alone ------------------------------------------------------

class _BigramState:
    """A fake model's state: each row's source length, the padded width (for attention) and
    the rows per sentence."""

    def __init__(self, src_len, width, beams=1):
        self.src_len, self.width, self.beams = src_len, width, beams

    def select(self, index):
        return _BigramState(self.src_len[sentence_rows(index, self.beams)], self.width, self.beams)

    def repeat_beams(self, beams):
        return _BigramState(self.src_len.repeat_interleave(beams), self.width, self.beams * beams)

    def reorder_beams(self, index):
        return _BigramState(self.src_len[index], self.width, self.beams)

    def join(self, other):
        src_len = torch.cat([self.src_len, other.src_len])
        return _BigramState(src_len, max(self.width, other.width), self.beams)


class _BigramModel:
    """Implements only nmt.models.interface.TranslationModel's decoding half: the next piece's
    probabilities depend on the previous piece alone, from a table. Logit position p is
    piece id p + 2 (positions need not be ids). Attention is uniform over the real source."""

    kernels, training = "reference", False
    A, B, C = 4, 5, 6  # piece ids

    def __init__(self):
        probs = torch.full((7, 7), 1e-6)
        probs[BOS_ID, [self.A, self.B, EOS_ID]] = torch.tensor([0.5, 0.4, 0.1])
        probs[self.A, [self.A, self.C, EOS_ID]] = torch.tensor([0.325, 0.325, 0.35])
        probs[self.B, [EOS_ID, self.C]] = torch.tensor([0.9, 0.1])
        probs[self.C, [self.C, EOS_ID]] = torch.tensor([0.5, 0.5])
        self.table = (probs / probs.sum(1, keepdim=True)).log()[:, 2:]  # positions: ids 2..6

    def encode(self, src, src_len):
        return _BigramState(src_len, src.size(1))

    def step(self, prev, state, need_attention=True):
        attention = (torch.arange(state.width) < state.src_len.unsqueeze(1)).float()
        return self.table[prev], state, attention / state.src_len.unsqueeze(1)

    def logits(self, outputs):
        return outputs  # the table's rows are already log-probabilities

    def piece_ids(self, positions):
        return positions + 2


def test_greedy_and_beam_search_need_only_the_model_interface():
    model = _BigramModel()
    src_len = torch.tensor([3, 1, 2])
    src = torch.full((3, 3), 7)
    budget = torch.tensor([6, 6, 6])
    greedy = greedy_search(model, src, src_len, budget)
    # greedy takes A (0.5), then EOS (0.35 beats 0.325): 0.175 in all
    assert [h.tokens for h in greedy] == [[model.A]] * 3
    assert greedy[0].score == pytest.approx(math.log(0.5 * 0.35), abs=1e-5)
    assert greedy[1].attention.shape == (2, 1) and torch.allclose(greedy[0].attention, torch.tensor(1 / 3))
    beams = beam_search(model, src, src_len, budget, beam=2, nbest=2)
    # beam 2 keeps B (0.4), whose EOS (0.9) gives 0.36; the runner-up is greedy's A, EOS
    assert [[h.tokens for h in hyps] for hyps in beams] == [[[model.B], [model.A]]] * 3
    assert beams[2][0].score == pytest.approx(math.log(0.4 * 0.9), abs=1e-5)
    assert beams[2][0].attention.shape == (2, 2)
    cut = greedy_search(model, src, src_len, torch.tensor([1, 6, 6]))
    assert cut[0].tokens == [model.A] and cut[0].attention.shape == (1, 3)  # budget ends it
    two_batches = [(src[:1], src_len[:1], budget[:1]), (src[1:, :2], src_len[1:], budget[1:])]
    streamed = greedy_searches(model, two_batches, join_below=1)
    assert [[(h.tokens, h.score) for h in hyps] for hyps in streamed] == \
           [[(h.tokens, h.score) for h in greedy[:1]], [(h.tokens, h.score) for h in greedy[1:]]]
    assert [h.attention.shape for hyps in streamed for h in hyps] == [(2, 3), (2, 1), (2, 2)]
    # A middle batch whose budget ends it in its first step leaves the stream at once.
    three_batches = two_batches[:1] + [(src[:1], src_len[:1], torch.tensor([1]))] + two_batches[1:]
    streamed = beam_searches(model, three_batches, beam=2, nbest=2, join_below=1)
    assert [[[(h.tokens, h.score) for h in hyps] for hyps in batch] for batch in streamed] == \
           [[[(h.tokens, h.score) for h in hyps] for hyps in beams[:1]],
            [[([model.A], pytest.approx(math.log(0.5), abs=1e-5)),
              ([model.B], pytest.approx(math.log(0.4), abs=1e-5))]],
            [[(h.tokens, h.score) for h in hyps] for hyps in beams[1:]]]
    assert [h.attention.shape for batch in streamed for hyps in batch for h in hyps] == \
           [(2, 3)] * 2 + [(1, 3)] * 2 + [(2, 1)] * 2 + [(2, 2)] * 2


class RowCounter:
    """``model`` whose steps record their row counts."""

    def __init__(self, model):
        self.model, self.rows = model, []

    def __getattr__(self, name):
        return getattr(self.model, name)

    def step(self, prev, state, need_attention=True):
        self.rows.append(prev.numel())
        return self.model.step(prev, state, need_attention)


@pytest.mark.parametrize("beam", [1, 3])
def test_rows_kept_to_a_multiple_decode_the_same_hypotheses(beam):
    """Ended sentences that stay in the batch to pad it change nothing, and do pad it."""
    model = tiny_model(vocab=30, seed=5)
    batch = make_batch(SOURCES + [[6, 7], [8, 9, 10, 11, 12], [13]])  # 7 sentences
    budget = max_output_lengths(batch.src_len, 2.0, 3, cap=40)
    found, rows = {}, {}
    for multiple in (1, 4):
        counted = RowCounter(model)
        if beam == 1:
            found[multiple] = [[h] for h in greedy_search(counted, batch.src, batch.src_len, budget,
                                                           row_multiple=multiple)]
        else:
            found[multiple] = beam_search(counted, batch.src, batch.src_len, budget, beam, nbest=2,
                                          row_multiple=multiple)
        rows[multiple] = counted.rows
    for plain, padded in zip(found[1], found[4]):
        assert [h.tokens for h in plain] == [h.tokens for h in padded]
        for a, b in zip(plain, padded):
            assert a.score == pytest.approx(b.score, abs=1e-5)
            torch.testing.assert_close(a.attention, b.attention)
    # All 7 sentences (beam search: first 1 row each, then 3), or the batch cut to 4 sentences
    # once 4 rows (4 sentences of 3 beams: 12) hold every one still going.
    allowed = {7, 4} if beam == 1 else {7, 21, 12}
    assert set(rows[4]) <= allowed and 4 in {n // beam for n in rows[4]}
    assert set(rows[1]) - allowed  # unpadded, the batch went through other counts


def assert_one_stream_finds_what_each_batch_finds_alone(model, batches, multiple, beam=1):
    """Greedy search (``beam`` 1) or beam search (its 2-best, with a length penalty) of
    ``batches`` (lists of sources) as one stream, each batch joining the last sentences of the
    one before, against each batch searched alone: the same pieces, scores and attention; and
    joined steps did run (more rows than any batch has)."""
    made = [make_batch(sources) for sources in batches]
    budgets = [max_output_lengths(b.src_len, 2.0, 3, cap=40) for b in made]
    counted = RowCounter(model)
    sources = [(b.src, b.src_len, max_len) for b, max_len in zip(made, budgets)]
    if beam == 1:
        streamed = [[[h] for h in hyps] for hyps in greedy_searches(counted, sources, row_multiple=multiple,
                                                                     join_below=3)]
    else:
        streamed = beam_searches(counted, sources, beam, 1.0, 2, row_multiple=multiple, join_below=3)
    for (src, src_len, max_len), found in zip(sources, streamed):
        if beam == 1:
            alone = [[h] for h in greedy_search(model, src, src_len, max_len, row_multiple=multiple)]
        else:
            alone = beam_search(model, src, src_len, max_len, beam, 1.0, 2, row_multiple=multiple)
        assert [[h.tokens for h in hyps] for hyps in found] == [[h.tokens for h in hyps] for hyps in alone]
        for a, h in zip((h for hyps in alone for h in hyps), (h for hyps in found for h in hyps)):
            assert h.score == pytest.approx(a.score, abs=1e-5)
            torch.testing.assert_close(h.attention, a.attention, rtol=1e-5, atol=1e-6)
    assert max(counted.rows) > max(map(len, batches)) * beam


STREAM = [SOURCES + [[6, 7], [8, 9, 10]], [[13, 14, 15], [16], [5, 5, 6, 7, 8, 9], [10, 11], [12]],
          [[17, 18, 19, 20, 21, 22, 23, 24, 25], [26, 27], [4, 5, 6]]]


@pytest.mark.parametrize("beam", [1, 3])
@pytest.mark.parametrize("multiple", [1, 4])
@pytest.mark.parametrize("decoder", ["input_feeding", "bahdanau"])
def test_batches_joined_in_one_stream_decode_as_each_batch_alone(decoder, multiple, beam):
    assert_one_stream_finds_what_each_batch_finds_alone(tiny_model(vocab=30, seed=7, decoder=decoder),
                                                        STREAM, multiple, beam)
