"""Through the real command line, in a subprocess, as a user runs it."""
import json

import pytest
from conftest import make_pairs, nmt, write_tsv


@pytest.fixture(scope="module")
def memorised_run(tmp_path_factory):
    """A tiny model trained on 24 pairs until it has memorised them, as a new user would try:
    ``--max-steps 600`` alone, with the default epochs, validation cadence and lr halving."""
    tmp = tmp_path_factory.mktemp("e2e")
    pairs = sorted(set(make_pairs(24, seed=5)))
    corpus = write_tsv(tmp / "tiny.tsv", pairs)
    run = tmp / "run"
    result = nmt("train", "--corpus", str(corpus), "--run-dir", str(run), "--vocab-size", "60",
                 "--embed-size", "32", "--hidden-size", "64", "--layers", "1", "--dropout", "0",
                 "--label-smoothing", "0", "--lr", "0.01", "--batch-size", "8",
                 "--max-steps", "600", "--device", "cpu", "--seed", "3", process=True)
    assert result.returncode == 0, result.stderr
    assert json.loads((run / "run.json").read_text())["steps"] == 600  # not cut short by default epochs
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    # epochs of 3 steps validate only every 200 steps, so 2 validation sentences halve the lr rarely
    assert [r["step"] // 200 for r in records] == [1, 2, 3]
    held = {line.split("\t")[0] for name in ("valid.tsv", "test.tsv")
            for line in (run / name).read_text().splitlines()}
    train_pairs = [p for p in pairs if p[0] not in held]
    return run, train_pairs


def test_train_then_translate_reproduces_a_training_sentence(memorised_run):
    run, train_pairs = memorised_run
    src, tgt = max(train_pairs, key=lambda p: len(p[0]))
    result = nmt("translate", "--checkpoint", str(run), src, process=True)  # the real command, end to end
    assert result.returncode == 0, result.stderr
    assert result.stdout == tgt + "\n"


def test_int8_translation_of_the_memorised_run(memorised_run):
    run, train_pairs = memorised_run
    sources = [src for src, _ in train_pairs]
    result = nmt("translate", "--checkpoint", str(run), "--precision", "int8", *sources)
    assert result.returncode == 0, result.stderr
    outputs = result.stdout.splitlines()
    assert len(outputs) == len(sources)
    # int8 weights may flip a near tie; a memorised model has few
    assert sum(out == tgt for out, (_, tgt) in zip(outputs, train_pairs)) >= 0.8 * len(sources)


def test_translate_files_and_stdin_keep_line_count(memorised_run, tmp_path):
    run, train_pairs = memorised_run
    lines = [train_pairs[0][0], "", train_pairs[1][0]]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
    result = nmt("translate", "--checkpoint", str(run), "--input", str(tmp_path / "in.txt"),
                 "--output", str(tmp_path / "out.txt"))
    assert result.returncode == 0, result.stderr
    out = (tmp_path / "out.txt").read_text().splitlines()
    assert len(out) == 3 and out[1] == "" and out[0] == train_pairs[0][1]
    piped = nmt("translate", "--checkpoint", str(run), stdin="\n".join(lines) + "\n")
    assert piped.stdout.splitlines() == out


def test_translate_uses_newest_run_without_checkpoint(memorised_run, tmp_path):
    run, train_pairs = memorised_run
    (tmp_path / "checkpoints").symlink_to(run.parent, target_is_directory=True)
    result = nmt("translate", train_pairs[0][0], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == train_pairs[0][1] + "\n"


@pytest.mark.parametrize("args, message", [
    (["train", "--corpus", "/nonexistent/corpus.tsv", "--run-dir", "{tmp}/r"], "/nonexistent/corpus.tsv: no such file"),
    (["train", "--device", "cuda:7", "--run-dir", "{tmp}/r"], "--device cuda:7"),
    (["train", "--dropout", "2", "--run-dir", "{tmp}/r"], "--dropout 2.0: must be in"),
    (["translate", "--checkpoint", "{tmp}/none", "hello"], "not a run directory"),
    (["translate", "--precision", "int16", "hello"], "--precision int16: use auto, fp32, bf16, fp16, int8"),
])
def test_user_errors_are_one_clear_line(tmp_path, args, message):
    result = nmt(*[a.format(tmp=tmp_path) for a in args])
    assert result.returncode == 1
    first = result.stderr.strip().splitlines()[0]
    assert first.startswith("error:") and message in result.stderr.replace("\n", " ")
    assert "Traceback" not in result.stderr


def test_eval_scores_the_runs_test_split_and_files(memorised_run, tmp_path):
    import json
    run, train_pairs = memorised_run
    result = nmt("eval", "--checkpoint", str(run), "--bleu", "--chrf", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert set(report["scores"]) == {"bleu", "chrf"}
    assert report["scores"]["bleu"]["signature"].startswith("nrefs:1|")
    for score in report["scores"].values():  # with its 95% confidence interval, sacreBLEU's bootstrap
        assert "bs:1000" in score["signature"] and score["ci"] > 0 and score["ci_low"] < score["mean"] < score["ci_high"]
        assert score["ci_high"] - score["ci_low"] == pytest.approx(2 * score["ci"], abs=0.011)
    # a memorised training pair (long enough for 4-grams) against itself scores 100; greedy,
    # as this 600-step model's beam search ends some memorised targets early
    src, tgt = max(train_pairs, key=lambda p: len(p[1].split()))
    (tmp_path / "src").write_text(src + "\n")
    (tmp_path / "ref").write_text(tgt + "\n")
    result = nmt("eval", "--checkpoint", str(run), "--src", str(tmp_path / "src"), "--ref",
                 str(tmp_path / "ref"), "--beam", "1", "--hyp-out", str(tmp_path / "hyp"))
    assert result.returncode == 0, result.stderr
    assert "100.00" in result.stdout and "nrefs:1" in result.stdout
    assert (tmp_path / "hyp").read_text() == tgt + "\n"
    (tmp_path / "ref").write_text("a\nb\n")
    result = nmt("eval", "--checkpoint", str(run), "--src", str(tmp_path / "src"), "--ref", str(tmp_path / "ref"))
    assert result.returncode == 1 and "2 lines" in result.stderr and "Traceback" not in result.stderr


def test_nbest_and_json_output(memorised_run):
    import json
    run, train_pairs = memorised_run
    result = nmt("translate", "--checkpoint", str(run), "--beam", "4", "--nbest", "3",
                 train_pairs[0][0], train_pairs[1][0])
    assert result.returncode == 0, result.stderr
    rows = [line.split("\t") for line in result.stdout.splitlines()]
    assert [r[0] for r in rows] == ["0"] * 3 + ["1"] * 3
    assert rows[0][2] == train_pairs[0][1]
    scores = [float(r[1]) for r in rows[:3]]
    assert scores == sorted(scores, reverse=True) and len({r[2] for r in rows[:3]}) == 3
    result = nmt("translate", "--checkpoint", str(run), "--json", "--beam", "2", train_pairs[0][0], "")
    objects = [json.loads(line) for line in result.stdout.splitlines()]
    assert objects[0]["translation"] == train_pairs[0][1] and objects[1]["translation"] == ""


def test_attn_plot_and_info(memorised_run, tmp_path):
    import json

    from PIL import Image
    run, train_pairs = memorised_run
    out = tmp_path / "attn.png"
    result = nmt("attn-plot", "--checkpoint", str(run), train_pairs[0][0], train_pairs[1][0],
                 "-o", str(out), "--show", "--beam", "2")
    assert result.returncode == 0, result.stderr
    assert Image.open(out).format == "PNG"
    assert "▁" in result.stdout  # the terminal rendering shows the pieces
    result = nmt("info", "--checkpoint", str(run), "--json")
    card = json.loads(result.stdout)
    assert card["parameters"] > 0 and card["sizes"]["hidden"] == 64
    assert (run / "curve.png").exists()


def test_the_seeds_wiring_trains_resumes_translates_quantizes_and_plots(corpus, tmp_path):
    """--decoder bahdanau --attention dot: d2l's decoder with the seed's scaled dot-product score."""
    from conftest import TINY
    run = tmp_path / "run"
    result = nmt("train", "--corpus", str(corpus), "--run-dir", str(run), "--max-steps", "6",
                 "--decoder", "bahdanau", "--attention", "dot", *TINY)
    assert result.returncode == 0, result.stderr
    assert nmt("train", "--resume", str(run), "--max-steps", "8").returncode == 0
    assert json.loads((run / "run.json").read_text())["steps"] == 8
    sources = ["Tom sees the cat.", "Mary likes the big red bird today."]
    fp32 = nmt("translate", "--checkpoint", str(run), *sources)
    reference = nmt("translate", "--checkpoint", str(run), "--kernels", "reference", *sources)
    int8 = nmt("translate", "--checkpoint", str(run), "--precision", "int8", "--beam", "2", *sources)
    for result in (fp32, reference, int8):
        assert result.returncode == 0, result.stderr
        assert len(result.stdout.splitlines()) == len(sources)
    assert reference.stdout == fp32.stdout
    plot = nmt("attn-plot", "--checkpoint", str(run), sources[0], "-o", str(tmp_path / "a.png"))
    assert plot.returncode == 0, plot.stderr
    card = json.loads(nmt("info", "--checkpoint", str(run), "--json").stdout)
    assert "scaled dot-product attention" in card["architecture"] and "Bahdanau" in card["architecture"]


def test_version_and_help():
    assert nmt("--version").stdout.startswith("nmt ")
    for command in ("train", "translate", "eval", "attn-plot", "info"):
        result = nmt(command, "--help")
        assert result.returncode == 0 and "Example" in result.stdout


def test_no_help_text_is_eaten_as_markup():
    """Rich renders help as markup: an unescaped ``[tensorboard]`` vanished from the help."""
    import typer.main
    from rich.text import Text

    from nmt.cli.app import app
    group = typer.main.get_command(app)
    for name, command in group.commands.items():
        for text in [command.help or "", *(getattr(p, "help", None) or "" for p in command.params)]:
            assert Text.from_markup(text).plain == text.replace("\\[", "["), (name, text)
