"""CUDA code paths: device placement, float16 autocast with loss scaling, pinned copies.
Skipped without CUDA; benchmarks/gpu_check.sh runs them on a GPU machine."""
import pytest
import torch
from conftest import tiny_model
from test_train import _config

from nmt.data.batching import make_batch
from nmt.inference.search import beam_search, greedy_search
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
    gpu = Translator(tiny_model(tokenizer.vocab_size).cuda(), tokenizer, torch.device("cuda"), beam=3)
    cpu = Translator(cpu_model, tokenizer, torch.device("cpu"), beam=3)
    lines = ["Tom sees the cat.", "Mary likes the big dog today."]
    assert gpu.translate(lines) == cpu.translate(lines)


@cuda
def test_cuda_matmul_peak_is_measured_in_float16_as_training_runs():
    flops, dtype = matmul_peak_flops(torch.device("cuda"), size=1024)
    assert flops > 1e9 and dtype == "float16"


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
    state = train_new_run(_config(corpus_file, device="cuda", max_steps=6), tmp_path / "run")
    assert state.step == 6 and state.scaler  # the loss scaler's state is saved for resuming
    assert resume_run(tmp_path / "run", {"max_steps": 9}).step == 9
