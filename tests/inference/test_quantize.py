import pytest
import torch
from conftest import tiny_model
from torch import nn

from nmt.data.tokenizer import BOS_ID
from nmt.errors import NmtError
from nmt.inference.quantize import decoding_device, quantizable, quantize_int8
from nmt.inference.settings import SearchOptions
from nmt.inference.translate import Translator


def _log_probs(model, src, src_len, steps=4):
    """Teacher-free log-probabilities of a few steps fed the same previous pieces."""
    state = model.encode(src, src_len)
    prev = torch.full((src.size(0),), BOS_ID)
    out = []
    for step in range(steps):
        output, state, _ = model.step(prev, state)
        out.append(torch.log_softmax(model.logits(output), -1))
        prev = (prev + step + 3) % 50 + 5
    return torch.stack(out)


@pytest.mark.parametrize("decoder", ["input_feeding", "bahdanau"])
def test_int8_copy_quantizes_matmul_layers_and_leaves_the_model_alone(tokenizer, decoder):
    model = tiny_model(tokenizer.vocab_size, decoder=decoder)
    q = quantize_int8(model)
    dynamic = torch.ao.nn.quantized.dynamic
    assert isinstance(q.generator.proj, dynamic.Linear) and isinstance(q.decoder.rnn, dynamic.GRU)
    assert isinstance(q.encoder.rnn, dynamic.GRU)
    assert isinstance(q.decoder.attention.query_proj, dynamic.Linear)
    assert type(q.decoder.embedding.weight) is nn.Parameter  # embeddings stay float
    assert type(model.generator.proj) is nn.Linear and type(model.decoder.rnn) is nn.GRU


def test_int8_log_probabilities_stay_close_to_fp32(tokenizer):
    torch.manual_seed(0)
    model = tiny_model(tokenizer.vocab_size)
    src = torch.randint(5, tokenizer.vocab_size, (3, 7))
    src_len = torch.tensor([7, 5, 2])
    with torch.inference_mode():
        want = _log_probs(model, src, src_len)
        got = _log_probs(quantize_int8(model), src, src_len)
    spread = (want - want.mean(-1, keepdim=True)).abs().max()  # small: the weights start small
    assert (got - want).abs().max() < 0.02 * spread  # measured 0.002; a zeroed generator gives 0.17
    assert not torch.equal(got, want)  # it really decodes with other weights


def test_int8_translates_as_fp32_on_a_decisive_model_and_keeps_lines(tokenizer):
    """Weights 3x the tiny model's leave its logits no near-ties for int8's rounding to flip,
    so every piece of every output is fp32's (a zeroed or misquantized layer changes them);
    the empty line stays an empty line."""
    model = tiny_model(tokenizer.vocab_size, seed=3)
    with torch.no_grad():
        for param in model.parameters():
            param.mul_(3)
    lines = ["Tom sees the cat.", "", "Mary likes the dog today.", "The big red bird chases the mouse now."]
    cpu = torch.device("cpu")
    fp32 = Translator(model, tokenizer, cpu, SearchOptions(3)).translate(lines, batch_size=2)
    int8 = Translator(quantize_int8(model), tokenizer, cpu, SearchOptions(3)).translate(lines, batch_size=2)
    assert int8 == fp32 and int8[1] == ""
    assert all(len(out) > 10 for k, out in enumerate(fp32) if k != 1)  # outputs with pieces to compare


@pytest.mark.parametrize("attention", ["additive", "dot"])
def test_int8_walks_module_types_and_refuses_a_model_with_nothing_to_quantize(attention):
    model = tiny_model(50, attention=attention)
    names = quantizable(model)
    linear = {name for name, m in model.named_modules() if isinstance(m, nn.Linear)}
    assert "decoder.attention.score" not in names  # v is read as a vector, never called
    assert set(names) == {"encoder.rnn", "decoder.rnn"} | linear - {"decoder.attention.score"}
    with pytest.raises(NmtError, match="no GRU or linear layer to quantize"):
        quantize_int8(nn.Sequential(nn.Embedding(4, 2)))


def test_decoding_device_int8_is_cpu_only(monkeypatch):
    assert decoding_device("int8", "auto") == torch.device("cpu")
    assert decoding_device("fp32", "cpu") == torch.device("cpu")
    with pytest.raises(NmtError, match="^precision int16: use auto, fp32, bf16, fp16, int8"):
        decoding_device("int16", "cpu")
    with pytest.raises(NmtError, match="^precision fp16: float16 autocast runs on CUDA only"):
        decoding_device("fp16", "cpu")
    import nmt.runtime.devices
    monkeypatch.setattr(nmt.runtime.devices, "pick_device", lambda spec: torch.device("cuda"))
    with pytest.raises(NmtError, match=r"^precision int8: runs on CPU only, not device cuda; use device cpu "
                                       r"or precision auto"):
        decoding_device("int8", "cuda")


def test_score_table_title_names_int8_decoding():
    from nmt.cli.output import score_table

    info = {"test_set": "t.tsv", "sentences": 2, "references": 1, "beam": 1, "length_penalty": None,
            "precision": "int8"}
    assert score_table(info, []).title.endswith("greedy, int8 weights")
    assert score_table(info | {"precision": "fp32"}, []).title.endswith("greedy")
