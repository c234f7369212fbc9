import json

import pytest
import torch
from conftest import nmt, tiny_model
from test_transformer_cli import one_size

from nmt.data.batching import make_batch
from nmt.inference.greedy import greedy_search
from nmt.models.build import count_parameters


def _decode(model, seqs):
    batch = make_batch(seqs)
    return greedy_search(model, batch.src, batch.src_len, torch.full((len(seqs),), 12))


def test_padding_and_neighbours_do_not_change_a_sentences_attention_or_decoding():
    model = tiny_model(vocab=30)
    sentence = [5, 9, 11]
    alone = _decode(model, [sentence])[0]
    together = _decode(model, [list(range(4, 20)), sentence, [7]])[1]
    assert together.tokens == alone.tokens
    torch.testing.assert_close(together.attention, alone.attention, rtol=1e-5, atol=1e-6)
    assert abs(together.score - alone.score) < 1e-4


def test_teacher_forced_outputs_ignore_padding():
    model = tiny_model(vocab=30)
    one = make_batch([[5, 6]], [[7, 8, 9]])
    two = make_batch([[5, 6], [4, 4, 4, 4, 4]], [[7, 8, 9], [10, 11, 12, 13, 14, 15]])
    out1, attn1 = model(one.src, one.src_len, one.tgt_in)
    out2, attn2 = model(two.src, two.src_len, two.tgt_in)
    torch.testing.assert_close(out2[0, :4], out1[0], rtol=1e-5, atol=1e-6)  # BOS + 3 pieces
    torch.testing.assert_close(attn2[0, :4, :3], attn1[0], rtol=1e-5, atol=1e-6)  # 2 pieces + EOS
    assert torch.all(attn2[0, :, 3:] == 0)


def test_attention_rows_sum_to_one_over_real_source_positions():
    model = tiny_model(vocab=30)
    batch = make_batch([[5, 6], [4, 4, 4, 4, 4]], [[7, 8, 9], [10, 11]])
    _, attn = model(batch.src, batch.src_len, batch.tgt_in)  # (batch, tgt_len, src_len)
    torch.testing.assert_close(attn.sum(-1), torch.ones(2, 4))
    assert torch.all(attn[0, :, 3:] == 0)


def test_unidirectional_single_layer_model_builds_and_runs():
    model = tiny_model(vocab=30, bidirectional=False, layers=1)
    rnn = model.encoder.rnn  # one direction of the full hidden size 8, not two of 4
    assert not rnn.bidirectional and rnn.num_layers == 1 and rnn.weight_hh_l0.shape == (3 * 8, 8)
    both = tiny_model(vocab=30, bidirectional=True, layers=1)
    assert count_parameters(model) - count_parameters(both) == (
        sum(p.numel() for p in rnn.parameters()) - sum(p.numel() for p in both.encoder.rnn.parameters()))
    hyp = _decode(model, [[5, 6, 7]])[0]  # attends over 3 pieces and the source's EOS
    assert len(hyp.tokens) <= 12 and hyp.attention.shape[1] == 4
    torch.testing.assert_close(hyp.attention.sum(-1), torch.ones(hyp.attention.size(0)))


@pytest.mark.parametrize("decoder", ["input_feeding", "bahdanau"])
@pytest.mark.parametrize("layers", [1, 2])
def test_teacher_forcing_computes_what_step_by_step_decoding_computes(decoder, layers):
    model = tiny_model(vocab=30, layers=layers, decoder=decoder).eval()
    batch = make_batch([[5, 6, 7], [8, 9]], [[10, 11, 12, 13], [14, 15]])
    outputs, attn = model(batch.src, batch.src_len, batch.tgt_in)
    state = model.encode(batch.src, batch.src_len)
    for i in range(batch.tgt_in.size(1)):
        output, state, weights = model.step(batch.tgt_in[:, i], state)
        torch.testing.assert_close(outputs[:, i], output, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(attn[:, i], weights, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("decoder", ["input_feeding", "bahdanau"])
def test_both_decoders_mask_padding_and_decode(decoder):
    model = tiny_model(vocab=30, decoder=decoder)
    sentence = [5, 9, 11]
    alone = _decode(model, [sentence])[0]
    together = _decode(model, [list(range(4, 20)), sentence, [7]])[1]
    assert together.tokens == alone.tokens


def test_uniform_init_keeps_padding_rows_zero():
    model = tiny_model(vocab=30)
    assert torch.all(model.encoder.embedding.weight[0] == 0)
    assert torch.all(model.decoder.embedding.weight[0] == 0)
    assert all(p.abs().max() <= 0.1 for p in model.parameters())


@pytest.mark.parametrize("family, embedding", [([], "decoder.embedding"),
                                               (["--arch", "transformer", "--heads", "2", "--ff-size", "16"],
                                                "tgt_embedding")])
def test_tied_embeddings_are_one_matrix_stored_once_and_tied_again_on_loading(corpus, tmp_path, family, embedding):
    from safetensors.torch import load_file

    from nmt.inference.loading import load_run

    run = tmp_path / "run"
    sizes = one_size()
    result = nmt("train", "--corpus", str(corpus), "--run-dir", str(run), "--max-steps", "3", *family,
                 "--tie-embeddings", *sizes)
    assert result.returncode == 0, result.stderr
    stored = load_file(run / "last.safetensors")
    assert "model.generator.proj.weight" not in stored and f"model.{embedding}.weight" in stored
    _, model, _ = load_run(run, torch.device("cpu"))
    tied = model.get_submodule(embedding).weight
    assert model.generator.proj.weight is tied
    torch.testing.assert_close(tied, stored[f"model.{embedding}.weight"])
    card = json.loads(nmt("info", "--checkpoint", str(run), "--json").stdout)
    assert "tied" in card["architecture"] and "counted above" in card["parameters per block"]["generator"]
    hidden = sizes[sizes.index("--hidden-size") + 1]
    untied = nmt("train", "--corpus", str(corpus), "--run-dir", str(tmp_path / "untied"), "--max-steps", "1",
                 *family, "--no-tie-embeddings", *sizes)
    assert untied.returncode == 0, untied.stderr
    counts = [json.loads(nmt("info", "--checkpoint", str(r), "--json").stdout)["parameters"]
              for r in (tmp_path / "untied", run)]
    assert counts[0] - counts[1] == tied.numel() == tied.size(0) * int(hidden)
