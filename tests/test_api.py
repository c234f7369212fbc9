"""The Python API (nmt.api): its documented examples run, on both architectures; scores agree
with the search's; threads may share a model; mistakes are clear errors."""
import doctest
import re
import shutil
import threading

import pytest
import torch
from conftest import ROOT

from nmt import api
from nmt.data.batching import make_batch
from nmt.data.tokenizer import BOS_ID, EOS_ID
from nmt.errors import NmtError


def _doctest(text, globs, name):
    parser, runner = doctest.DocTestParser(), doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    runner.run(parser.get_doctest(text, globs, name, name, 0))
    assert runner.summarize(verbose=False).failed == 0


@pytest.mark.parametrize("arch", ["gru", "transformer"])
def test_the_module_examples_run(tiny_run, transformer_run, arch):
    _doctest(api.__doc__, {"RUN": tiny_run if arch == "gru" else transformer_run}, "nmt.api")


def test_the_readme_examples_run(tiny_run, tmp_path, monkeypatch):
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"## Python API\n\n```python\n(.*?)```", readme, re.S).group(1)
    shutil.copytree(tiny_run, tmp_path / "checkpoints" / "run")
    monkeypatch.chdir(tmp_path)
    _doctest(block, {}, "README")


@pytest.mark.parametrize("arch", ["gru", "transformer"])
def test_score_is_what_decoding_step_by_step_gives(tiny_run, transformer_run, arch):
    model = api.load(tiny_run if arch == "gru" else transformer_run, precision="fp32")
    pairs = [("Tom sees the cat.", "Tom voit le chat."), ("Mary likes the big dog today.",
             "Marie aime le grand chien aujourd'hui."), ("The bird.", "Le chat voit l'oiseau.")]
    scores = model.score([s for s, _ in pairs], [t for _, t in pairs])
    assert scores == pytest.approx([_stepwise(model, s, t) for s, t in pairs], abs=1e-4)
    assert sum(s > float("-inf") for s in scores) >= 2
    assert model.score(["", "Tom."], ["x", "Tom."])[0] == 0.0


@torch.inference_mode()
def _stepwise(model, source, target):
    """The target's log-probability through the model's incremental decoding (encode, step),
    the path search takes, not the teacher-forced pass that score() runs."""
    m, tok = model._model, model._tokenizer
    batch = make_batch(tok.encode([source]))
    state = m.encode(batch.src, batch.src_len)
    ids = m.piece_ids(torch.arange(m.output_layer.out_features)).tolist()
    prev, total = BOS_ID, 0.0
    for piece in tok.encode([target])[0] + [EOS_ID]:
        if piece not in ids:  # a piece the model has no output for
            return float("-inf")
        out, state, _ = m.step(torch.tensor([prev]), state)
        total += torch.log_softmax(m.logits(out), dim=-1)[0, ids.index(piece)].item()
        prev = piece
    return total


def test_attention_has_a_row_per_generated_piece_over_the_source(transformer_run):
    model = api.load(transformer_run, precision="fp32")
    for t in model.translate(["Tom sees the cat.", "Mary chases the mouse now."], beam=2, nbest=2,
                             attention=True)[1]:
        assert len(t.attention) in (len(t.pieces), len(t.pieces) + 1)  # + </s> unless the budget ended it
        assert all(len(row) == len(t.source_pieces) + 1 for row in t.attention)
        assert all(sum(row) == pytest.approx(1, abs=1e-4) for row in t.attention)
    assert model.translate(["Tom."])[0][0].attention is None  # only on request


def test_threads_may_share_a_model(tiny_run):
    model = api.load(tiny_run)
    sources = [f"Tom sees the {w}." for w in ("cat", "dog", "bird", "mouse")] * 8
    expected = model.translate(sources, beam=2)
    results = [None] * 4

    def work(k):
        results[k] = model.translate(sources, beam=2)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(r == expected for r in results)


def test_mistakes_are_clear_errors(tiny_run, tmp_path):
    model = api.load(tiny_run)
    with pytest.raises(TypeError, match="sentences, not a str"):
        model.translate("Tom sees the cat.")
    with pytest.raises(NmtError, match=r"^nbest 3: must be at most beam \(2\)$"):
        model.translate(["Tom."], beam=2, nbest=3)
    with pytest.raises(NmtError, match="a target per source"):
        model.score(["a", "b"], ["c"])
    with pytest.raises(NmtError, match=str(tmp_path)):
        api.load(tmp_path)  # not a run


def test_any_iterable_of_sentences_is_read_once(tiny_run):
    model = api.load(tiny_run)
    lines = ["Tom sees the cat.", "Mary likes the dog."]
    expected = model.translate(lines)
    assert len(expected) == 2 and all(expected)
    assert model.translate(s for s in lines) == expected  # a generator gave [] before
    assert model.translate(map(str.strip, [line + "  " for line in lines])) == expected
    assert model.translate(tuple(lines)) == expected
    targets = ["Tom voit le chat.", "Marie aime le chien."]
    assert model.score(iter(lines), (t for t in targets)) == model.score(lines, targets)
    with pytest.raises(TypeError, match="sources: pass a list .* not int"):
        model.translate(3)
    with pytest.raises(TypeError, match="sources: pass a list .* not a set"):
        model.translate({"Tom.", "Mary."})

    def broken():
        yield "Tom."
        raise TypeError("the caller's own bug")
    with pytest.raises(TypeError, match="the caller's own bug"):
        model.translate(broken())
    with pytest.raises(TypeError, match=r"sources\[1\] is bytes, not a sentence"):
        model.translate(["Tom.", b"Mary."])


@pytest.mark.parametrize("settings, message", [
    ({"beam": 3, "length_penalty": -5}, "length_penalty -5: must be a finite number >= 0"),
    ({"beam": 3, "length_penalty": float("nan")}, "length_penalty nan: must be a finite number >= 0"),
    ({"beam": 3, "length_penalty": float("inf")}, "length_penalty inf: must be a finite number >= 0"),
    ({"beam": 3, "length_penalty": "1"}, "length_penalty: must be a number, got '1' (str)"),
    ({"beam": 2.5}, "beam: must be a whole number, got 2.5 (float)"),
    ({"beam": "3"}, "beam: must be a whole number, got '3' (str)"),
    ({"beam": True}, "beam: must be a whole number, got True (bool)"),
    ({"beam": 0}, "beam 0: must be >= 1"),
    ({"beam": 2, "nbest": 1.0}, "nbest: must be a whole number, got 1.0 (float)"),
    ({"batch_size": 0}, "batch_size 0: must be >= 1"),
])
def test_search_settings_are_checked_as_the_cli_and_the_service_check_them(tiny_run, settings, message):
    model = api.load(tiny_run)
    with pytest.raises(NmtError) as refused:
        model.translate(["Tom sees the cat."], **settings)
    assert str(refused.value) == message


def test_a_lone_surrogate_is_refused_naming_the_sentence(tiny_run):
    model = api.load(tiny_run)
    bad = "Tom sees \udc80 the cat."
    with pytest.raises(NmtError, match=r"^sources\[1\] 'Tom sees \\udc80 the cat.': a lone surrogate '\\udc80' at character 10"):
        model.translate(["Hi.", bad])
    with pytest.raises(NmtError, match=r"^targets\[0\]"):
        model.score(["Hi."], [bad])
    with pytest.raises(NmtError, match="^source 'Tom"):
        model.attention(bad)


def test_a_target_longer_than_any_output_scores_minus_infinity_at_once(tiny_run, caplog, monkeypatch):
    """Such a target is never teacher-forced through the model (100,000 characters took 9.3 s)."""
    model = api.load(tiny_run)
    cap = model.translator().max_output_pieces
    target = " ".join(["cat"] * 20_000)
    forced, log_probs = [], model._log_probs
    monkeypatch.setattr(model, "_log_probs", lambda src, tgt: forced.extend(map(len, tgt)) or log_probs(src, tgt))
    with caplog.at_level("WARNING"):
        scores = model.score(["Tom sees the cat.", "Tom sees the cat.", ""], [target, "Tom voit le chat.", target])
    assert len(forced) == 1 and forced[0] <= cap
    assert scores[0] == float("-inf") and -1e9 < scores[1] < 0 and scores[2] == 0.0
    assert f"targets longer than {cap} pieces" in caplog.text
