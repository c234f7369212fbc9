"""Sampling: each piece is drawn from the model's distribution, tempered and cut to top-k and
top-p as asked; a line's samples follow from the seed and its place in the input, not from its
batch, the workers or the other lines; it works through the API, an ensemble and
``nmt translate``."""
import math
from types import SimpleNamespace

import pytest
import torch
from conftest import clean_error, nmt, tiny_model

from nmt.api import Model, load
from nmt.errors import SettingError
from nmt.inference.sampling import Draw, uniforms
from nmt.inference.settings import Sampling, SearchOptions
from nmt.inference.translate import Translator

LOGITS = torch.log(torch.tensor([0.5, 0.25, 0.15, 0.07, 0.03]))
DRAWS = 40_000


def _frequencies(sampling: Sampling, logits: torch.Tensor = LOGITS) -> torch.Tensor:
    """How often each piece is drawn from ``logits`` over DRAWS rows (keys 0..DRAWS-1)."""
    identity = SimpleNamespace(logits=lambda output: output)  # the decoder output is the logits
    output = logits.expand(DRAWS, -1).clone()
    picked, logp = Draw(sampling)(identity, output, torch.arange(DRAWS), torch.zeros(DRAWS, dtype=torch.long))
    assert torch.allclose(logp, torch.log_softmax(logits, -1)[picked])  # the model's own log-probability
    return torch.bincount(picked, minlength=logits.numel()).double() / DRAWS


def test_draws_follow_the_distribution_and_its_cuts():
    probs = LOGITS.exp()
    assert torch.allclose(_frequencies(Sampling()), probs.double(), atol=0.01)
    tempered = torch.softmax(LOGITS / 2, -1).double()
    assert torch.allclose(_frequencies(Sampling(temperature=2.0)), tempered, atol=0.01)
    top2 = _frequencies(Sampling(top_k=2))
    assert top2[2:].sum() == 0 and top2[0] == pytest.approx(2 / 3, abs=0.01)
    nucleus = _frequencies(Sampling(top_p=0.8))  # 0.5 + 0.25 < 0.8: the third piece is in
    assert nucleus[3:].sum() == 0 and nucleus[2] == pytest.approx(0.15 / 0.9, abs=0.01)
    assert _frequencies(Sampling(top_p=0.4))[0] == 1.0  # the most likely piece alone
    assert _frequencies(Sampling(temperature=0.01))[0] == 1.0


def test_uniforms_are_uniform_and_follow_seed_key_and_step_only():
    keys, steps = torch.arange(DRAWS), torch.full((DRAWS,), 3)
    u = uniforms(5, keys, steps)
    assert u.min() >= 0 and u.max() < 1 and u.mean().item() == pytest.approx(0.5, abs=0.01)
    assert torch.histc(u.float(), bins=10, min=0, max=1).div(DRAWS).sub(0.1).abs().max() < 0.01
    assert torch.equal(uniforms(5, keys.flip(0), steps).flip(0), u)  # a row's number is its own
    assert not torch.equal(uniforms(6, keys, steps), u) and not torch.equal(uniforms(5, keys, steps + 1), u)


def test_a_lines_samples_do_not_depend_on_its_batch_or_the_workers(tokenizer):
    model = tiny_model(tokenizer.vocab_size)
    lines = ["Tom sees the cat.", "Mary likes the big dog.", "the cat", "Tom"] * 3
    options = SearchOptions(nbest=3, sampling=Sampling(temperature=1.5, seed=4))
    cpu = torch.device("cpu")
    found = Translator(model, tokenizer, cpu, options, workers=1).nbest(lines, 64)
    assert all(len(hyps) == 3 and all(math.isfinite(h.score) and h.score <= 0 for h in hyps) for hyps in found)
    for workers, batch_size in ((1, 1), (1, 2), (2, 5)):
        again = Translator(model, tokenizer, cpu, options, workers=workers).nbest(lines, batch_size)
        assert [[h.tokens for h in hyps] for hyps in again] == [[h.tokens for h in hyps] for hyps in found]
    alone = Translator(model, tokenizer, cpu, options).nbest(lines[:1])  # the first line, without the others
    assert [h.tokens for h in alone[0]] == [h.tokens for h in found[0]]
    # samples differ from each other and from another seed's, and the 4th line's copies from the 1st's
    tokens = [[tuple(h.tokens) for h in hyps] for hyps in found]
    assert any(len(set(line)) > 1 for line in tokens) and tokens[4] != tokens[0]
    other = Translator(model, tokenizer, cpu, SearchOptions(nbest=3, sampling=Sampling(temperature=1.5, seed=5)))
    assert [[tuple(h.tokens) for h in hyps] for hyps in other.nbest(lines)] != tokens


def test_top_k_one_is_greedy_search(tokenizer):
    model, cpu = tiny_model(tokenizer.vocab_size), torch.device("cpu")
    lines = ["Tom sees the cat.", "Mary likes the big dog."]
    greedy = Translator(model, tokenizer, cpu).nbest(lines)
    sampled = Translator(model, tokenizer, cpu, SearchOptions(sampling=Sampling(top_k=1, seed=9))).nbest(lines)
    assert [[h.tokens for h in hyps] for hyps in sampled] == [[h.tokens for h in hyps] for hyps in greedy]
    assert [h.score for hyps in sampled for h in hyps] == pytest.approx([h.score for hyps in greedy for h in hyps],
                                                                         abs=1e-5)


def test_the_api_and_an_ensemble_sample(transformer_run):
    model = load(transformer_run, "cpu", "fp32")
    sampling = Sampling(top_p=0.95, seed=2)
    first = model.translate(["Tom sees the cat.", ""], nbest=4, sampling=sampling)
    assert len(first[0]) == 4 and first[1] == []
    assert first == model.translate(["Tom sees the cat.", ""], nbest=4, sampling=sampling)
    ensemble = Model.ensemble([model, model], SearchOptions(nbest=4, sampling=sampling))
    # the mean of one model's log-probabilities with themselves is that model's
    assert [h.tokens for h in ensemble.nbest(["Tom sees the cat."])[0]] == [
        list(model.translator(SearchOptions(nbest=4, sampling=sampling)).nbest(["Tom sees the cat."])[0][k].tokens)
        for k in range(4)]


@pytest.mark.parametrize("options, message", [
    (dict(beam=2, sampling=Sampling()), "beam 2: and sampling do not go together"),
    (dict(nbest=2), "nbest 2: must be at most beam (1)"),
    (dict(nbest=1001, sampling=Sampling()), "at most 1,000 samples"),
])
def test_search_options_are_checked_when_made(options, message):
    with pytest.raises(SettingError, match=message.replace("(", r"\(").replace(")", r"\)")):
        SearchOptions(**options)


@pytest.mark.parametrize("sampling, message", [
    (dict(temperature=0), "temperature 0: must be a finite number > 0"),
    (dict(top_p=1.5), "top_p 1.5: must be a finite number in (0, 1]"),
    (dict(top_k=-1), "top_k -1: must be >= 0"),
    (dict(seed=1.5), "seed: must be a whole number"),
])
def test_sampling_settings_are_checked_when_made(sampling, message):
    with pytest.raises(SettingError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Sampling(**sampling)


def test_translate_samples_from_the_command_line(tiny_run):
    args = ["translate", "--checkpoint", str(tiny_run), "--sample", "--nbest", "3", "--top-k", "20", "--seed", "7",
            "Tom sees the cat.", "Mary likes the dog."]
    first = nmt(*args)
    assert first.returncode == 0, first.stderr
    rows = [line.split("\t") for line in first.stdout.splitlines()]
    assert [r[0] for r in rows] == ["0", "0", "0", "1", "1", "1"] and all(float(r[1]) <= 0 for r in rows)
    assert nmt(*args).stdout == first.stdout
    clean_error(nmt("translate", "--checkpoint", str(tiny_run), "--temperature", "0.5", "Tom."),
                "--temperature 0.5: is a setting of sampling: add --sample")
    clean_error(nmt("translate", "--checkpoint", str(tiny_run), "--sample", "--beam", "3", "Tom."),
                "--beam 3: and sampling do not go together")
