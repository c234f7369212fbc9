"""The Transformer model: masking, causality, cached decoding equal to teacher forcing, tied
embeddings, and its learning-rate schedule."""
import json

import pytest
import torch
from test_search import STREAM, assert_one_stream_finds_what_each_batch_finds_alone

from nmt.config import ModelConfig
from nmt.data.batching import Batch, make_batch
from nmt.data.tokenizer import PAD_ID
from nmt.inference.beam import beam_search
from nmt.inference.quantize import load_for_decoding, quantize_int8
from nmt.inference.greedy import greedy_search
from nmt.inference.translate import Translator
from nmt.models.attention import scaled_dot_product
from nmt.models.build import build_model, describe
from nmt.models.transformer.model import TransformerState
from nmt.models.transformer.multihead import attend

VOCAB = 40


def _model(seed: int = 0, **options):
    torch.manual_seed(seed)
    cfg = ModelConfig(arch="transformer", embed_size=16, hidden_size=16, layers=2, heads=4, ff_size=24,
                      dropout=0.0, vocab=VOCAB, **options)
    return build_model(cfg, PAD_ID).eval()


@pytest.mark.parametrize("options", [{}, {"norm": "post", "tie_embeddings": True}])
def test_cached_steps_equal_the_teacher_forced_pass(options):
    model = _model(**options)
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


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_step_asked_for_no_attention_returns_none_and_the_same_outputs(dtype):
    """Search that keeps no attention lets the last layer's encoder-decoder attention skip its
    weights too (in bf16 on CPU: the fused kernel, equal within bf16 rounding)."""
    model = _model().to(dtype)
    batch = make_batch([[5, 9, 11, 6], [7, 8]], [[12, 13], [14, 15]])
    with torch.inference_mode():
        state = model.encode(batch.src, batch.src_len)
        for prev in batch.tgt_in.unbind(1):
            out, _, attention = model.step(prev, state)
            bare, state, none = model.step(prev, state, need_attention=False)
            assert attention.shape == (2, 5) and none is None
            tolerance = 0 if dtype == torch.float32 else 3e-2  # bf16: fused against explicit products
            torch.testing.assert_close(bare.float(), out.float(), rtol=0, atol=tolerance)


def test_the_source_keys_and_values_are_laid_out_once_for_every_step():
    """Each step's products read the encoder-decoder keys and values in place: contiguous per
    (sentence, head), not views that every step would copy."""
    model = _model()
    batch = make_batch([[5, 9, 11, 6], [7, 8]], [[12], [13]])
    with torch.no_grad():
        state = model.encode(batch.src, batch.src_len)
    assert all(t.is_contiguous() and t.shape == (2, 4, 5, 4)  # (batch, heads, src_len + EOS, head size)
               for pair in state.cross for t in pair)


def test_beams_share_their_sentence_source_and_decode_as_if_each_had_a_copy():
    model = _model()
    batch = make_batch([[5, 9, 11, 6], [7, 8]], [[12], [13]])
    prev = torch.tensor([12, 13, 14, 15, 16, 17])  # three beams a sentence
    with torch.no_grad():
        state = model.encode(batch.src, batch.src_len)
        _, state, _ = model.step(batch.tgt_in[:, 0], state)
        shared = state.repeat_beams(3)
        copied = state.select(torch.tensor([0, 0, 0, 1, 1, 1]))  # six one-row sentences
        out_shared, shared, attn_shared = model.step(prev, shared)
        out_copied, _, attn_copied = model.step(prev, copied)
    assert all(t.size(0) == 2 for pair in shared.cross for t in pair)  # once per sentence
    assert all(t.size(0) == 6 for (pair,) in shared.past for t in pair)  # once per beam, one group
    torch.testing.assert_close(out_shared, out_copied, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(attn_shared, attn_copied, rtol=1e-5, atol=1e-6)
    kept = shared.select(torch.tensor([1]))  # the second sentence's three beams
    assert kept.src_mask.size(0) == 1 and kept.past[0][0][0].size(0) == 3
    torch.testing.assert_close(kept.past[0][0][0], shared.past[0][0][0][3:])


def test_joined_states_step_as_each_would_alone():
    """Rows of a state two steps in, joined after a new batch's: each row goes on from its own
    position over its own source, as in its own state; a row kept of either group too."""
    model = _model(3)
    first, second = make_batch([[5, 9, 11, 6], [7, 8]]), make_batch([list(range(4, 14)), [12]])
    with torch.no_grad():
        old = model.encode(first.src, first.src_len)
        for prev in ([1, 1], [20, 21]):
            _, old, _ = model.step(torch.tensor(prev), old)
        new = model.encode(second.src, second.src_len)
        joined = new.join(old)
        prev = torch.tensor([1, 1, 22, 23])
        out, joined, attn = model.step(prev, joined)
        out_new, new, attn_new = model.step(prev[:2], new)
        out_old, old, attn_old = model.step(prev[2:], old)
        torch.testing.assert_close(out, torch.cat([out_new, out_old]), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(attn[:2], attn_new)
        width = first.src.size(1)
        torch.testing.assert_close(attn[2:, :width], attn_old, rtol=1e-5, atol=1e-6)
        assert not attn[2:, width:].any()  # the shorter sources' padding
        assert [keys.size(2) for keys, _ in joined.past[0]] == [1, 3]  # positions per group
        kept = joined.select(torch.tensor([1, 3]))  # one row of each group
        out_kept, _, _ = model.step(torch.tensor([24, 25]), kept)
        out_one, _, _ = model.step(torch.tensor([24]), new.select(torch.tensor([1])))
        out_two, _, _ = model.step(torch.tensor([25]), old.select(torch.tensor([1])))
        torch.testing.assert_close(out_kept, torch.cat([out_one, out_two]), rtol=1e-5, atol=1e-6)
        assert len(joined.select(torch.tensor([2, 3])).past[0]) == 1  # a group with no row left drops out


def test_joined_beam_states_reorder_within_groups_as_each_would_alone():
    """Two beams a sentence, states at different positions, joined: rows reordered among their
    own sentence's beams step as in their own state, over their own source."""
    model = _model(5)
    first, second = make_batch([[5, 9, 11, 6], [7, 8]]), make_batch([list(range(4, 14)), [12]])

    def seeded(batch: Batch, steps: list[list[int]]) -> TransformerState:
        state = model.encode(batch.src, batch.src_len)
        _, state, _ = model.step(torch.tensor([1, 1]), state)
        state = state.repeat_beams(2)
        for prev in steps:
            _, state, _ = model.step(torch.tensor(prev), state)
        return state

    with torch.no_grad():
        old, new = seeded(first, [[20, 21, 22, 23], [24, 25, 26, 27]]), seeded(second, [])
        joined = new.join(old)
        assert [keys.size(2) for keys, _ in joined.past[0]] == [1, 3]
        order, prev = torch.tensor([1, 0, 3, 3, 5, 4, 6, 6]), torch.arange(20, 28)
        out, _, attn = model.step(prev, joined.reorder_beams(order))
        out_new, _, attn_new = model.step(prev[:4], new.reorder_beams(order[:4]))
        out_old, _, attn_old = model.step(prev[4:], old.reorder_beams(order[4:] - 4))
        torch.testing.assert_close(out, torch.cat([out_new, out_old]), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(attn[:4], attn_new, rtol=1e-5, atol=1e-6)
        width = first.src.size(1)
        torch.testing.assert_close(attn[4:, :width], attn_old, rtol=1e-5, atol=1e-6)
        assert not attn[4:, width:].any()  # the shorter sources' padding


@pytest.mark.parametrize("beam", [1, 3])
@pytest.mark.parametrize("multiple", [1, 4])
def test_batches_joined_in_one_stream_decode_as_each_batch_alone(multiple, beam):
    assert_one_stream_finds_what_each_batch_finds_alone(_model(4), STREAM, multiple, beam)


def test_a_bf16_search_fuses_attention_only_for_one_query_per_sentence_and_head(monkeypatch):
    """Beam search's encoder-decoder attention has a query per beam: there the CPU's fused
    kernel ran slower than the explicit products, so it runs them instead."""
    import nmt.models.transformer.multihead as multihead
    fused_queries, kernel = [], multihead.F.scaled_dot_product_attention

    def fused(q, k, v, **kwargs):
        fused_queries.append(q.size(2))
        return kernel(q, k, v, **kwargs)

    monkeypatch.setattr(multihead.F, "scaled_dot_product_attention", fused)
    torch.manual_seed(0)
    k, v = torch.randn(2, 4, 5, 8), torch.randn(2, 4, 5, 8)
    mask = torch.tensor([[True] * 5, [True, True, False, False, False]])[:, None, None, :]
    for queries in (3, 1):
        q = torch.randn(2, 4, queries, 8).bfloat16()
        with torch.inference_mode():
            context = attend(q, k, v, mask, need_weights=False)[0]
        torch.testing.assert_close(context.float(), scaled_dot_product(q.float(), k, v, mask)[0],
                                   rtol=0, atol=1e-2)  # bf16 rounding
    assert fused_queries == [1]


def test_a_bf16_search_multiplies_attention_in_float32():
    """oneDNN compiles a bf16 kernel per product shape, and each search step's key length is a
    new one: search's attention products take the bf16 inputs in float32 instead, from keys
    and values cast once when projected; the fused kernel where no weights are wanted and
    there is one query per sentence and head."""
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 4, 1, 8).bfloat16(), torch.randn(2, 4, 5, 8).bfloat16(), torch.randn(2, 4, 5, 8).bfloat16()
    mask = torch.tensor([[True] * 5, [True, True, False, False, False]])[:, None, None, :]
    with torch.inference_mode():
        context, weights = attend(q, k, v, mask)
        fused, none = attend(q, k, v, mask, need_weights=False)
    expected, expected_weights = scaled_dot_product(q.float(), k.float(), v.float(), mask)
    assert weights.dtype == torch.float32 and torch.equal(weights, expected_weights)
    assert context.dtype == torch.bfloat16 and torch.equal(context, expected.bfloat16())
    assert none is None and fused.dtype == torch.bfloat16
    torch.testing.assert_close(fused.float(), expected, rtol=0, atol=1e-2)  # bf16 rounding
    q, k, v = (torch.randn(4, 4, n, 64).bfloat16() for n in (1, 40, 40))
    with torch.inference_mode():
        alone = attend(q, k, v, None, need_weights=False)[0]
        with torch.autocast("cpu", dtype=torch.bfloat16):  # as search runs: still float32 inside
            assert torch.equal(attend(q, k, v, None, need_weights=False)[0], alone)
    model, src, src_len = _model().to(torch.bfloat16), torch.tensor([[5, 9, 3]]), torch.tensor([3])
    with torch.inference_mode():
        state = model.step(torch.tensor([1]), model.encode(src, src_len))[1]
    assert {t.dtype for kv in state.cross + [kv for (kv,) in state.past] for t in kv} == {torch.float32}
    state = model.encode(src, src_len)  # with autograd, as in training: half-width
    assert state.cross[0][0].dtype == torch.bfloat16


def test_a_transformer_decodes_in_bf16_weights_on_cpu_and_a_gru_under_autocast(transformer_run, tiny_run):
    """Autocast would cast every weight again at every step; bf16 decoding on CPU one batch
    at a time, its rows kept to multiples of an AMX tile's 16."""
    cpu = torch.device("cpu")
    model, tokenizer, precision = load_for_decoding(transformer_run, "bf16", cpu)
    assert precision == "bf16" and {p.dtype for p in model.parameters()} == {torch.bfloat16}
    gru, _, _ = load_for_decoding(tiny_run, "bf16", cpu)
    assert {p.dtype for p in gru.parameters()} == {torch.float32}
    translator = Translator(model, tokenizer, cpu, precision=precision)
    assert (translator.parallel_workers(), translator.row_multiple) == (1, 16)
    assert len(translator.translate(["Tom sees the cat.", "Go."])) == 2
    fp32 = Translator(load_for_decoding(transformer_run, "fp32", cpu)[0], tokenizer, cpu)
    assert fp32.row_multiple == 1 and fp32.parallel_workers() == min(2, torch.get_num_threads())


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


def test_the_noam_schedule_warms_up_then_decays_and_a_resumed_run_follows_it(tmp_path, corpus_file):
    from safetensors.torch import load_file

    from nmt.config import build_config
    from nmt.training.runs import resume_run, train_new_run
    from nmt.training.schedule import noam_factor

    assert [noam_factor(s, 4) for s in (1, 2, 4, 16)] == [0.25, 0.5, 1.0, 0.5]
    options = {"corpus": str(corpus_file), "arch": "transformer", "embed_size": 12, "hidden_size": 12,
               "heads": 2, "ff_size": 16, "layers": 1, "vocab_size": 60, "batch_size": 16, "max_steps": 10,
               "valid_every": 4, "valid_bleu_size": 10, "valid_size": 10, "test_size": 10, "device": "cpu",
               "warmup_steps": 6, "lr": 3e-3}
    full = build_config({}, options)
    assert (full.train.schedule, full.model.norm, full.model.dropout) == ("noam", "post", 0.1)
    train_new_run(full, tmp_path / "full")
    train_new_run(full.replace(max_steps=5), tmp_path / "part")
    resume_run(tmp_path / "part", {"max_steps": 10})
    a, b = load_file(tmp_path / "full" / "last.safetensors"), load_file(tmp_path / "part" / "last.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    lrs = [json.loads(line)["lr"] for line in (tmp_path / "full" / "metrics.jsonl").read_text().splitlines()]
    assert lrs[:2] == pytest.approx([3e-3 * 4 / 6, 3e-3 * (6 / 8) ** 0.5])


def test_the_fused_kernel_computes_the_explicit_attention():
    from nmt.models.transformer.multihead import attend, causal_mask

    torch.manual_seed(4)
    q, k, v = (torch.randn(2, 3, 5, 8) for _ in range(3))
    padding = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])[:, None, None, :]
    for mask in (padding, causal_mask(5) & padding, None):
        explicit, weights = attend(q, k, v, mask, fused=False)
        fused, none = attend(q, k, v, mask, fused=True)
        torch.testing.assert_close(fused, explicit, rtol=1e-5, atol=1e-5)
        assert none is None and weights.shape == (2, 3, 5, 5)
    assert attend(q, k, v, padding, need_weights=False)[1] is not None  # CPU: the explicit form


def test_attention_maps_hold_every_layer_and_head_and_match_decoding():
    model = _model(5)
    batch = make_batch([[5, 9, 11, 6], [7, 8]], [[12, 13, 14], [15, 16, 17, 18, 19]])
    with torch.no_grad():
        maps = model.attention_maps(batch.src, batch.src_len, batch.tgt_in)
        _, attention = model(batch.src, batch.src_len, batch.tgt_in)
    assert maps["encoder"].shape == (2, 2, 4, 5, 5)
    assert maps["decoder"].shape == (2, 2, 4, 6, 6) and maps["cross"].shape == (2, 2, 4, 6, 5)
    torch.testing.assert_close(maps["cross"][:, -1].mean(1), attention)
    assert torch.all(maps["encoder"][1, :, :, :, 3:] == 0)  # padded keys, every layer and head
    assert torch.all(maps["decoder"].triu(1) == 0)  # no position sees a later one
    sums = [w.sum(-1) for w in maps.values()]
    assert all(torch.allclose(s, torch.ones_like(s)) for s in sums)
    hyps = greedy_search(model, batch.src, batch.src_len, torch.full((2,), 6))
    for row, hyp in enumerate(hyps):
        one = make_batch([batch.src[row, :int(batch.src_len[row]) - 1].tolist()], [hyp.tokens[:hyp.attention.size(0) - 1]])
        cross = model.attention_maps(one.src, one.src_len, one.tgt_in)["cross"][0, -1].mean(0)
        torch.testing.assert_close(cross, hyp.attention, rtol=1e-4, atol=1e-5)


def test_a_transformer_run_saved_before_the_norm_key_reads_as_pre_norm(tmp_path):
    import yaml

    from nmt.config import RunConfig, read_run_config, save_config

    save_config(RunConfig().replace(arch="transformer"), tmp_path / "config.yaml")
    assert read_run_config(tmp_path / "config.yaml").model.norm == "post"
    saved = yaml.safe_load((tmp_path / "config.yaml").read_text())
    del saved["model"]["norm"]
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(saved))
    assert read_run_config(tmp_path / "config.yaml").model.norm == "pre"
