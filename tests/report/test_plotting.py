import pytest
import torch
from PIL import Image

from nmt.errors import NmtError
from nmt.report.plotting import AttentionPanel, plot_attention, plot_training_curve


def _panel(n_src=4, n_tgt=3):
    weights = torch.softmax(torch.randn(n_tgt, n_src), -1)
    return AttentionPanel(weights, [f"▁s{i}" for i in range(n_src)], [f"▁t{i}" for i in range(n_tgt)], "x → y")


def test_png_has_the_expected_format_and_grows_with_panels(tmp_path):
    plot_attention([_panel()], tmp_path / "one.png")
    plot_attention([_panel(), _panel(40, 30)], tmp_path / "two.png")
    one, two = Image.open(tmp_path / "one.png"), Image.open(tmp_path / "two.png")
    assert one.format == two.format == "PNG"
    assert two.size[0] > one.size[0] and one.size[1] > 100


def test_svg_and_pdf_by_extension(tmp_path):
    plot_attention([_panel()], tmp_path / "a.svg")
    plot_attention([_panel()], tmp_path / "a.pdf")
    assert (tmp_path / "a.svg").read_text().lstrip().startswith("<?xml")
    assert (tmp_path / "a.pdf").read_bytes().startswith(b"%PDF")


def test_unknown_extension_is_a_clear_error(tmp_path):
    with pytest.raises(NmtError, match="a.bmp: unknown figure format"):
        plot_attention([_panel()], tmp_path / "a.bmp")


def test_training_curve(tmp_path):
    records = [{"step": s, "train_loss": 5 - s / 100, "valid_loss": 5 - s / 120, "valid_bleu": s / 10}
               for s in (100, 200, 300)]
    plot_training_curve(records, tmp_path / "curve.png")
    assert Image.open(tmp_path / "curve.png").format == "PNG"
