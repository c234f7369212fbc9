"""How a system is written: a run, a run's weights, an ensemble, an export, a file; a path
that holds '@' or '+' is taken as the path it is."""
from pathlib import Path

import pytest

from nmt.comparison.systems import parse_system
from nmt.config import EXPORT_MANIFEST
from nmt.errors import NmtError


@pytest.fixture
def places(tmp_path: Path) -> Path:
    for run in ("a", "b", "odd@name+x"):
        (tmp_path / run / "checkpoints").mkdir(parents=True)
        (tmp_path / run / "config.yaml").write_text("{}\n")
        for weights in ("best", "last", "checkpoints/step-200"):  # parse_system checks they are there
            (tmp_path / run / f"{weights}.safetensors").write_bytes(b"")
    (tmp_path / "ct2").mkdir()
    (tmp_path / "ct2" / EXPORT_MANIFEST).write_text("{}\n")
    (tmp_path / "hyps.txt").write_text("x\n")
    (tmp_path / "empty").mkdir()
    return tmp_path


def test_each_kind_is_recognised(places: Path) -> None:
    a, b = places / "a", places / "b"
    assert parse_system(str(a)) == parse_system(str(a), "default")
    assert (parse_system(str(a)).kind, parse_system(str(a), "last").weights) == ("run", "last")
    weighed = parse_system(f"{a}@step-200")
    assert (weighed.kind, weighed.paths, weighed.weights, weighed.name) == ("run", (a,), "step-200", f"{a}@step-200")
    ensemble = parse_system(f"{a}+{b}", "best")
    assert (ensemble.kind, ensemble.paths, ensemble.weights, ensemble.engine) == ("ensemble", (a, b), "best", "nmt")
    with pytest.raises(NmtError, match="has no such weights"):  # named before anything is decoded
        parse_system(f"{a}+{b}", "averaged")
    export = parse_system(str(places / "ct2"), "best")
    assert (export.kind, export.engine, export.weights) == ("export", "ctranslate2", "default")
    assert parse_system(str(places / "hyps.txt")).kind == "file"
    assert parse_system(str(places / "odd@name+x")).paths == (places / "odd@name+x",)


@pytest.mark.parametrize("text, needle", [
    ("nosuch", "no such run, export or file"),
    ("empty", "neither a run (config.yaml) nor an export"),
    ("hyps.txt@best", "is no run directory"),
    ("a@best+b", "give it with --weights"),
    ("a+hyps.txt", "an ensemble is made of runs"),
    ("a@bad/name", "weights"),
    ("a@step-300", "has no such weights; it has best, last, step-200"),
])
def test_what_is_no_system_is_named(places: Path, text: str, needle: str) -> None:
    parts = [str(places / p) if p.split("@")[0] in ("a", "b", "hyps.txt", "empty", "nosuch") else p
             for p in text.split("+")]
    with pytest.raises(NmtError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        parse_system("+".join(parts))
