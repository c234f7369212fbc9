"""nmt demo: each experiment shows what the chapter says it shows, on nmt's own modules, the same
way for the same seed; the CLI writes each figure where -o says."""
import pytest
import torch
from conftest import nmt

from nmt.demos import bahdanau, multihead, pooling, positions, scoring
from nmt.demos.gallery import demos
from nmt.demos.outcome import DemoOptions
from nmt.models.transformer.positional import sinusoids


def test_the_learned_width_pools_sharper_and_fits_better_than_averaging():
    fits = pooling.fit(seed=0)
    assert fits.mse["learned width"] < fits.mse["average"] and fits.mse["Gaussian kernel"] < fits.mse["average"]
    assert fits.width > 1 and len(fits.losses) == 6 and fits.losses[-1] < fits.losses[0]
    kernel, learned = fits.weights["Gaussian kernel"], fits.weights["learned width"]
    assert learned.max(dim=1).values.mean() > kernel.max(dim=1).values.mean()  # sharper
    assert torch.allclose(learned.sum(1), torch.ones(50))


def test_leave_one_out_keys_leave_out_their_own_point():
    x = torch.arange(5.0)
    assert pooling.leave_one_out(x).tolist()[2] == [0.0, 1.0, 3.0, 4.0]


def test_masked_positions_get_exactly_zero_weight():
    s = scoring.score(seed=3)
    assert (s.by_sentence[0, :, 2:] == 0).all() and (s.by_sentence[1, :, 3:] == 0).all()
    assert (s.by_row[0, 0, 1:] == 0).all() and (s.by_row[1, 0, 2:] == 0).all() and (s.by_row[1, 1] > 0).all()
    for name in ("additive", "dot product"):
        w = s.weights[name]
        assert (w[0, 2:] == 0).all() and (w[1, 6:] == 0).all() and (w[:, :2] > 0).all(), name
        assert torch.allclose(w.sum(-1), torch.ones(2))
        assert s.contexts[name].shape == (2, 4)


def test_multi_head_attention_keeps_the_chapters_shapes_and_masks():
    h = multihead.attend(seed=0)
    assert h.output.shape == (2, 4, 100) and h.weights.shape == (2, 5, 4, 6)
    assert (h.weights[0, ..., 3:] == 0).all() and (h.weights[1, ..., 2:] == 0).all()
    assert (h.toy[..., 6:] == 0).all() and h.toy.shape == (5, 8, 8)
    assert len({tuple(head.argmax(-1).tolist()) for head in h.toy}) > 1  # the heads differ


def test_an_offset_is_a_rotation_of_each_sin_cos_pair():
    assert positions.rotation_error(sinusoids(60, 32)) < 1e-5
    shuffled = sinusoids(60, 32)[:, torch.randperm(32, generator=torch.Generator().manual_seed(0))]
    assert positions.rotation_error(shuffled) > 0.1  # the check can fail
    assert positions.binary().tolist()[6] == [0, 1, 1]  # 6, lowest bit first


def test_the_trained_runs_demo_follows_the_search(tiny_run):
    outcome = bahdanau.run(DemoOptions(checkpoint=tiny_run, text="Tom sees the cat."))
    heatmap, curve = outcome.panels
    rows, columns = heatmap.values.shape
    assert (len(heatmap.yticks), len(heatmap.xticks)) == (rows, columns) and heatmap.xticks[-1] == "</s>"
    assert len(curve.series[0].y) == rows and all(n > 0 for n in curve.series[0].y)
    assert torch.allclose(heatmap.values.sum(1), torch.ones(rows), atol=1e-4)


@pytest.mark.parametrize("name", ["pooling", "scoring", "multihead", "positions"])
def test_the_same_seed_draws_the_same_numbers(name):
    run = demos()[name].run
    assert run(DemoOptions(seed=4)).lines == run(DemoOptions(seed=4)).lines


def test_the_cli_lists_runs_and_writes_each_figure(tmp_path, tiny_run):
    listed = nmt("demo", "--list")
    assert listed.returncode == 0 and all(name in listed.stdout for name in demos())
    result = nmt("demo", "pooling", "-o", tmp_path / "nw.svg", "--epochs", "3")
    assert result.returncode == 0, result.stderr
    assert "epoch 3: training MSE" in result.stdout and "test MSE, average" in result.stdout
    assert (tmp_path / "nw.svg").read_text().lstrip().startswith("<?xml")
    result = nmt("demo", "all", "-o", tmp_path / "figures", "--checkpoint", tiny_run)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (tmp_path / "figures").iterdir()) == sorted(f"{n}.png" for n in demos())
    assert "largest error" in result.stdout and "output (2, 4, 100)" in result.stdout
    result = nmt("demo", "positions", "-o", f"{tmp_path}/figs.v2/")  # a directory, by its slash
    assert result.returncode == 0 and (tmp_path / "figs.v2" / "positions.png").is_file(), result.stderr


@pytest.mark.parametrize("args, message", [
    (["nonsense"], "no demo named 'nonsense'"),
    (["pooling", "--epochs", "0"], "--epochs 0: must be >= 1"),
    (["pooling", "--lr", "nan"], "--lr must be a finite number > 0"),
    (["pooling", "-o", "x.gif"], "unknown figure format '.gif'"),
    (["all", "-o", "x.png"], "give a directory"),
])
def test_mistakes_are_one_line(args, message, tmp_path):
    result = nmt("demo", *args, cwd=tmp_path)
    assert result.returncode == 1 and message in result.stderr and "Traceback" not in result.stderr
