import threading

import pytest
import torch
from conftest import tiny_model
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_search import RowCounter

from nmt.inference.settings import SearchOptions
from nmt.inference.translate import Translator


def test_output_lines_match_input_lines_and_empty_stays_empty(tokenizer):
    translator = Translator(tiny_model(tokenizer.vocab_size), tokenizer, torch.device("cpu"))
    lines = ["Tom sees the cat.", "", "   ", "Mary likes the dog today.", "Tom sees the cat."]
    out = translator.translate(lines, batch_size=2)
    assert len(out) == len(lines)
    assert out[1] == "" and out[2] == ""
    assert out[0] == out[4]


def test_batch_size_does_not_change_translations(tokenizer):
    translator = Translator(tiny_model(tokenizer.vocab_size), tokenizer, torch.device("cpu"))
    lines = ["Tom sees the cat.", "Mary.", "The big red bird chases the small mouse now."]
    assert translator.translate(lines, batch_size=1) == translator.translate(lines, batch_size=3)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.text(max_size=40), max_size=6))
def test_random_unicode_never_crashes_and_keeps_line_count(tokenizer, lines):
    lines = [line.replace("\n", " ").replace("\r", " ") for line in lines]
    translator = Translator(tiny_model(tokenizer.vocab_size), tokenizer, torch.device("cpu"),
                            max_src_pieces=20)
    out = translator.translate(lines)
    assert len(out) == len(lines)
    assert all("\n" not in line for line in out)


def test_parallel_workers_give_the_same_translations_and_restore_mode_and_threads(tokenizer):
    model = tiny_model(tokenizer.vocab_size).train()
    lines = ["Tom sees the cat.", "Mary.", "The big red bird chases the small mouse now.", "",
             "Tom likes Mary.", "The dog sleeps."]
    threads = torch.get_num_threads()
    for batch_size in (2, 64):  # 64: one batch for one worker, a batch each for two
        one = Translator(model, tokenizer, torch.device("cpu"), SearchOptions(3, 2), workers=1).nbest(lines, batch_size)
        two = Translator(model, tokenizer, torch.device("cpu"), SearchOptions(3, 2), workers=2).nbest(lines, batch_size)
        assert [[h.tokens for h in hyps] for hyps in one] == [[h.tokens for h in hyps] for hyps in two]
    assert model.training and torch.get_num_threads() == threads


@pytest.mark.parametrize("beam", [1, 3])
def test_streams_of_joined_batches_translate_as_sentences_alone(tokenizer, beam):
    """Two workers, each with several batches of 4 that join (at 2 going), find what each
    sentence finds alone: in greedy search, and beam search's 2-best."""
    model = tiny_model(tokenizer.vocab_size, seed=4)
    words = "Tom Mary sees likes the a cat dog big red bird small mouse now today sleeps".split()
    lines = [" ".join(words[k % len(words):k % len(words) + 1 + k % 7]) for k in range(22)]
    nbest = min(beam, 2)
    cpu = torch.device("cpu")
    options = SearchOptions(beam, nbest, 1.0)
    alone = Translator(model, tokenizer, cpu, options, workers=1).nbest(lines, 1)
    for workers in (1, 2):
        counted = RowCounter(model)
        translator = Translator(counted, tokenizer, cpu, options, workers=workers)
        streamed = translator.nbest(lines, batch_size=4)
        assert max(counted.rows) > 4 * beam  # joined steps ran
        assert [[h.tokens for h in hyps] for hyps in streamed] == [[h.tokens for h in hyps] for hyps in alone]
        for a, b in zip((h for hyps in alone for h in hyps), (h for hyps in streamed for h in hyps)):
            assert abs(a.score - b.score) < 1e-4
            torch.testing.assert_close(b.attention, a.attention, rtol=1e-4, atol=1e-5)


def test_each_worker_thread_decodes_on_its_share_of_the_threads(tokenizer, monkeypatch):
    """A new thread's MKL takes every core unless told: each worker sets its own share."""
    model = tiny_model(tokenizer.vocab_size)
    set_in: dict[int, list[int]] = {}
    encoded_in: set[int] = set()
    real_set, real_encode = torch.set_num_threads, model.encode

    def recording_set(n):
        set_in.setdefault(threading.get_ident(), []).append(n)
        real_set(n)

    def recording_encode(*args, **kwargs):
        encoded_in.add(threading.get_ident())
        return real_encode(*args, **kwargs)

    monkeypatch.setattr(torch, "set_num_threads", recording_set)
    monkeypatch.setattr(model, "encode", recording_encode)
    threads = torch.get_num_threads()
    real_set(4)
    try:
        lines = ["Tom sees the cat.", "Mary.", "The dog sleeps.", "Tom likes Mary."]
        Translator(model, tokenizer, torch.device("cpu"), workers=2).translate(lines, batch_size=1)
    finally:
        real_set(threads)
    assert len(encoded_in) == 2 and threading.get_ident() not in encoded_in
    assert all(set_in.get(ident, [None])[0] == 2 for ident in encoded_in)
