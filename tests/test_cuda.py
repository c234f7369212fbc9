"""CUDA code paths: device placement, bfloat16 and float16 autocast (with loss scaling), pinned copies.
Skipped without CUDA; benchmarks/gpu_check.sh runs them on a GPU machine."""
import json

import pytest
import torch
from conftest import tiny_model
from conftest import tiny_config

from nmt.data.batching import make_batch
from nmt.inference.beam import beam_search
from nmt.inference.greedy import greedy_search
from nmt.inference.settings import SearchOptions
from nmt.inference.translate import Translator
from nmt.tools.flops import matmul_peak_flops

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@cuda
def test_batches_move_to_cuda_through_pinned_memory():
    batch = make_batch([[5, 6], [7]], [[8], [9, 10]]).to(torch.device("cuda"))
    assert batch.src.is_cuda and batch.tgt_mask.is_cuda and batch.n_tokens == 5


@cuda
def test_cuda_decoding_matches_cpu(tokenizer):
    cpu_model = tiny_model(tokenizer.vocab_size)
    gpu = Translator(tiny_model(tokenizer.vocab_size).cuda(), tokenizer, torch.device("cuda"), SearchOptions(3))
    cpu = Translator(cpu_model, tokenizer, torch.device("cpu"), SearchOptions(3))
    lines = ["Tom sees the cat.", "Mary likes the big dog today."]
    assert gpu.translate(lines) == cpu.translate(lines)


@cuda
def test_cuda_matmul_peak_is_measured_in_training_precision():
    flops, dtype = matmul_peak_flops(torch.device("cuda"), "fp16", size=1024)
    assert flops > 1e9 and dtype == "float16"
    assert matmul_peak_flops(torch.device("cuda"), "bf16", size=1024)[1] == "bfloat16"


@cuda
def test_cuda_search_returns_cpu_attention():
    model = tiny_model(vocab=30).cuda()
    batch = make_batch([[5, 6, 7]]).to(torch.device("cuda"))
    budget = torch.tensor([6])
    assert greedy_search(model, batch.src, batch.src_len, budget)[0].attention.device.type == "cpu"
    assert beam_search(model, batch.src, batch.src_len, budget, beam=2)[0][0].attention.device.type == "cpu"


@cuda
def test_training_on_cuda_with_amp_and_resume(tmp_path, corpus_file):
    from nmt.training.runs import resume_run, train_new_run
    state = train_new_run(tiny_config(corpus_file, device="cuda", max_steps=6, precision="fp16"), tmp_path / "run")
    assert state.step == 6 and state.scaler  # the loss scaler's state is saved for resuming
    assert resume_run(tmp_path / "run", {"max_steps": 9}).step == 9


@cuda
def test_auto_precision_on_cuda_is_bf16_where_the_gpu_has_it(tmp_path, corpus_file):
    from nmt.runtime.precision import resolve
    from nmt.training.runs import train_new_run
    auto = resolve("auto", torch.device("cuda"))
    assert auto == ("bf16" if torch.cuda.is_bf16_supported() else "fp16")
    state = train_new_run(tiny_config(corpus_file, device="cuda", max_steps=4, precision="auto"), tmp_path / "run")
    assert state.step == 4 and bool(state.scaler) == (auto == "fp16")
    summary = json.loads((tmp_path / "run" / "run.json").read_text())
    assert summary["precision"] == auto


def _transformer(seed: int = 0):
    from nmt.config import ModelConfig
    from nmt.models.build import build_model

    torch.manual_seed(seed)
    cfg = ModelConfig(arch="transformer", embed_size=32, hidden_size=32, layers=2, heads=4, ff_size=48,
                      dropout=0.0, vocab=40, tie_embeddings=True)
    return build_model(cfg, 0).eval()


@cuda
def test_the_fused_attention_kernel_runs_on_cuda_and_equals_the_explicit_form():
    from nmt.models.transformer.multihead import attend, causal_mask

    q, k, v = (torch.randn(2, 4, 7, 16, device="cuda") for _ in range(3))
    mask = causal_mask(7, q.device) & (torch.arange(7, device="cuda") < torch.tensor([[7], [4]], device="cuda")
                                       )[:, None, None, :]
    fused, none = attend(q, k, v, mask, need_weights=False)  # fused: chosen on CUDA
    explicit, _ = attend(q, k, v, mask, fused=False)
    assert none is None
    torch.testing.assert_close(fused, explicit, rtol=1e-4, atol=1e-4)
    with torch.autocast("cuda", dtype=torch.float16):
        half, _ = attend(q.half(), k.half(), v.half(), mask, need_weights=False)
    torch.testing.assert_close(half.float(), explicit, rtol=2e-2, atol=2e-2)


@cuda
def test_a_transformer_decodes_on_cuda_as_on_cpu():
    model = _transformer()
    batch = make_batch([[5, 9, 11, 6], [7, 8]])
    budget = torch.full((2,), 8)
    cpu = beam_search(model, batch.src, batch.src_len, budget, beam=3)
    gpu_batch = batch.to(torch.device("cuda"))
    gpu = beam_search(model.cuda(), gpu_batch.src, gpu_batch.src_len, budget, beam=3)
    assert [h[0].tokens for h in gpu] == [h[0].tokens for h in cpu]


@cuda
def test_a_transformer_trains_on_cuda_with_amp_and_resumes(tmp_path, corpus_file):
    from nmt.training.runs import resume_run, train_new_run
    config = tiny_config(corpus_file, device="cuda", max_steps=6, arch="transformer", embed_size=12, heads=2,
                     ff_size=16)
    assert train_new_run(config, tmp_path / "run").step == 6
    assert resume_run(tmp_path / "run", {"max_steps": 9}).step == 9
