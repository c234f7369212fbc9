"""The Transformer model: masking, causality, and cached decoding equal to teacher forcing."""
import torch
from conftest import TINY, nmt

from nmt.config import ModelConfig
from nmt.data.batching import make_batch
from nmt.data.tokenizer import PAD_ID
from nmt.inference.quantize import quantize_int8
from nmt.inference.search import beam_search, greedy_search
from nmt.models.build import build_model, describe

VOCAB = 40


def _model(seed: int = 0):
    torch.manual_seed(seed)
    cfg = ModelConfig(arch="transformer", embed_size=16, hidden_size=16, layers=2, heads=4, ff_size=24,
                      dropout=0.0, vocab=VOCAB)
    return build_model(cfg, PAD_ID).eval()


def test_cached_steps_equal_the_teacher_forced_pass():
    model = _model()
    batch = make_batch([[5, 9, 11, 6], [7, 8]], [[12, 13, 14], [15, 16, 17, 18, 19]])
    with torch.no_grad():
        forced, forced_attention = model(batch.src, batch.src_len, batch.tgt_in)
        state, steps, attention = model.encode(batch.src, batch.src_len), [], []
        for t in range(batch.tgt_in.size(1)):
            out, state, weights = model.step(batch.tgt_in[:, t], state)
            steps.append(out)
            attention.append(weights)
    torch.testing.assert_close(torch.stack(steps, 1), forced, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(torch.stack(attention, 1), forced_attention, rtol=1e-5, atol=1e-6)
    assert torch.all(forced_attention[1, :, 3:] == 0)  # the short source's padding: zero weight


def test_padding_and_later_targets_change_nothing_before_them():
    model = _model(1)
    one = make_batch([[5, 6, 7]], [[8, 9, 10]])
    two = make_batch([[5, 6, 7], list(range(4, 16))], [[8, 9, 10], list(range(20, 30))])
    with torch.no_grad():
        alone, _ = model(one.src, one.src_len, one.tgt_in)
        batched, _ = model(two.src, two.src_len, two.tgt_in)
        changed = one.tgt_in.clone()
        changed[0, 3] = 30
        later, _ = model(one.src, one.src_len, changed)
    torch.testing.assert_close(batched[0, :4], alone[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(later[0, :3], alone[0, :3])
    assert not torch.allclose(later[0, 3], alone[0, 3])


def test_search_runs_over_the_transformer_through_the_interface():
    model = _model(2)
    batch = make_batch([[5, 9, 11], list(range(4, 14)), [7]])
    budget = torch.full((3,), 8)
    greedy = greedy_search(model, batch.src, batch.src_len, budget)
    beams = beam_search(model, batch.src, batch.src_len, budget, beam=1)
    assert [h.tokens for h in greedy] == [hyps[0].tokens for hyps in beams]
    five = beam_search(model, batch.src, batch.src_len, budget, beam=4, nbest=2)
    assert all(len(hyps) == 2 and hyps[0].score >= hyps[1].score for hyps in five)
    assert all(h.score >= g.score - 1e-4 for hyps, g in zip(five, greedy) for h in hyps[:1])
    int8 = greedy_search(quantize_int8(model), batch.src, batch.src_len, budget)
    assert len(int8) == 3
    assert "Transformer" in describe(ModelConfig(arch="transformer"))


def test_a_transformer_trains_resumes_and_translates_through_the_cli(corpus, tmp_path):
    run = tmp_path / "run"
    sizes = [a for a in TINY]
    sizes[sizes.index("--embed-size") + 1] = sizes[sizes.index("--hidden-size") + 1]  # one size
    result = nmt("train", "--corpus", str(corpus), "--run-dir", str(run), "--max-steps", "6",
                 "--arch", "transformer", "--heads", "2", "--ff-size", "16", *sizes)
    assert result.returncode == 0, result.stderr
    assert nmt("train", "--resume", str(run), "--max-steps", "8").returncode == 0
    out = nmt("translate", "--checkpoint", str(run), "--beam", "2", "Tom sees the cat.", "")
    assert out.returncode == 0, out.stderr
    assert len(out.stdout.splitlines()) == 2
    card = nmt("info", "--checkpoint", str(run))
    assert "Transformer" in card.stdout
