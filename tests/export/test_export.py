"""nmt export to CTranslate2, and decoding the export with --engine ctranslate2: the same
outputs and scores as nmt's own fp32 search on the same weights, for every Transformer
variant; the files and vocabularies of an export; and the refusals."""
from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import pytest

from conftest import TINY, clean_error, make_pairs, nmt
from nmt.api import load
from nmt.data.tokenizer import Tokenizer
from nmt.export.engine import CTranslate2Translator
from nmt.export.exported import open_exported
from nmt.errors import NmtError, SettingError
from nmt.inference.settings import DEFAULT_LENGTH_PENALTY, Sampling, SearchOptions

pytestmark = pytest.mark.slow  # end to end: see setup.cfg's markers

# post-norm with its own output layer; pre-norm with the output layer tied to the decoder's
# embedding (the default on a small corpus such as this one)
VARIANTS = {"post-norm": ["--no-tie-embeddings"], "pre-norm-tied": ["--norm", "pre"]}
SOURCES = list(dict.fromkeys(src for src, _ in make_pairs(400, seed=77)))[:200]  # 200 distinct


@pytest.fixture(scope="module", params=list(VARIANTS))
def exported(request: pytest.FixtureRequest, corpus: Path, tmp_path_factory: pytest.TempPathFactory
             ) -> tuple[Path, Path]:
    """A small trained Transformer of each variant, and its float32 export."""
    root = tmp_path_factory.mktemp(request.param)
    sizes = [a if a not in ("8", "12") else "16" for a in TINY]
    sizes[sizes.index("--layers") + 1] = "2"
    result = nmt("train", "--corpus", corpus, "--run-dir", root / "run", "--max-steps", "200", "--arch",
                 "transformer", "--heads", "2", "--ff-size", "32", *sizes, *VARIANTS[request.param])
    assert result.returncode == 0, result.stderr
    result = nmt("export", root / "run", "-o", root / "ct2")
    assert result.returncode == 0, result.stderr
    return root / "run", root / "ct2"


def _both(exported: tuple[Path, Path], beam: int, n: int = 1) -> tuple[list, list]:
    """nmt's fp32 and CTranslate2's float32 n-best lists of :data:`SOURCES`."""
    run, directory = exported
    options = SearchOptions(beam, n, DEFAULT_LENGTH_PENALTY)
    ours = load(run, "cpu", "fp32").translator(options).nbest(SOURCES, with_attention=False)
    theirs = CTranslate2Translator(open_exported(directory), "cpu", "fp32", options).nbest(SOURCES)
    return ours, theirs


def _check_agreement(ours: list, theirs: list) -> None:
    """The same best output for at least 99% of the sources, and where it is the same, scores
    within 1e-3 a piece (EOS counted)."""
    same = [(a[0], b[0]) for a, b in zip(ours, theirs) if a[0].tokens == b[0].tokens]
    assert len(same) >= 0.99 * len(SOURCES), f"{len(same)} of {len(SOURCES)} outputs agree"
    for a, b in same:
        assert math.isfinite(a.score) and abs(a.score - b.score) <= 1e-3 * (len(a.tokens) + 1), (a, b)


def test_greedy_search_agrees_with_nmt(exported: tuple[Path, Path]) -> None:
    _check_agreement(*_both(exported, beam=1))


def test_beam_search_agrees_with_nmt(exported: tuple[Path, Path]) -> None:
    ours, theirs = _both(exported, beam=4, n=2)
    _check_agreement(ours, theirs)
    assert all(len(b) == min(2, len(a)) for a, b in zip(ours, theirs))  # the n-best lists too


def test_sampling_is_refused_on_ctranslate2(exported: tuple[Path, Path]) -> None:
    """Its draws would follow its batches; nmt's own follow the seed and the line."""
    clean_error(nmt("translate", "--engine", "ctranslate2", "--checkpoint", exported[1], "--sample", "Tom."),
                "--sample: runs on nmt's own engine")


def test_the_api_loads_an_export_as_a_model(exported: tuple[Path, Path]) -> None:
    """load(EXPORT, engine="ctranslate2"): the translations and the scores of given targets of
    nmt's own engine on the same weights; no attention, no sampling, no other weights."""
    run, directory = exported
    ours, theirs = load(run, "cpu", "fp32"), load(directory, "cpu", "fp32", engine="ctranslate2")
    assert (theirs.run, theirs.attention_kinds, theirs.precision) == (directory, (), "float32")
    a, b = ours.translate(SOURCES, beam=3, nbest=2), theirs.translate(SOURCES, beam=3, nbest=2)
    same = [(x, y) for x, y in zip(a, b) if [t.pieces for t in x] == [t.pieces for t in y]]
    assert len(same) >= 0.99 * len(SOURCES)
    for x, y in same:
        assert [t.text for t in x] == [t.text for t in y] and x[0].source_pieces == y[0].source_pieces
        assert [t.score for t in x] == pytest.approx([t.score for t in y], abs=1e-3 * (len(x[0].pieces) + 1))
    targets = [hyps[0].text if hyps else "" for hyps in a]
    targets[1] = "The mouse likes the bird " + targets[1]  # English: pieces with no output row
    nmt_scores, ct2_scores = ours.score(SOURCES, targets), theirs.score(SOURCES, targets)
    assert math.isinf(nmt_scores[1]) and math.isinf(ct2_scores[1])
    assert [math.isinf(s) for s in nmt_scores] == [math.isinf(s) for s in ct2_scores]
    finite = [(x, y) for x, y in zip(nmt_scores, ct2_scores) if math.isfinite(x)]
    assert len(finite) > 0.9 * len(SOURCES) and all(abs(x - y) <= 2e-3 * max(1, abs(x)) for x, y in finite)
    with pytest.raises(NmtError, match="no attention"):
        theirs.attention(SOURCES[0])
    with pytest.raises(NmtError, match="no attention"):
        theirs.translate(SOURCES[:1], attention=True)
    with pytest.raises(SettingError, match="sample"):
        theirs.translate(SOURCES[:1], sampling=Sampling(seed=1))
    with pytest.raises(SettingError, match="weights best"):
        load(directory, engine="ctranslate2", weights="best")


def test_vocabularies_are_the_rows_pieces(exported: tuple[Path, Path]) -> None:
    """Each exported vocabulary lists the pieces of that side's rows, in row order, so that
    every row, special ids included, means the same piece to both engines."""
    run, directory = exported
    model = load(run, "cpu", "fp32")._model
    sp = Tokenizer(directory / "spm.model").sp
    for side, embedding in (("source", model.src_embedding), ("target", model.tgt_embedding)):
        vocabulary = json.loads((directory / f"{side}_vocabulary.json").read_text(encoding="utf-8"))
        assert vocabulary == [sp.id_to_piece(i) for i in embedding.pieces.pieces.tolist()]
        assert {"<unk>", "<s>", "</s>"} <= set(vocabulary)
    config = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    assert config["add_source_eos"] and config["layer_norm_epsilon"] == 1e-5
    manifest = open_exported(directory).manifest
    assert manifest["run"] == str(run.resolve()) and manifest["quantization"] == "float32"


def test_translate_and_eval_through_the_cli(transformer_run: Path, tmp_path: Path) -> None:
    """An int8 export decodes files, stdin, n-best and JSON with one output line per input
    line; a float32 export scores what nmt's own fp32 search scores."""
    assert nmt("export", transformer_run, "-o", tmp_path / "int8", "--quantization", "int8").returncode == 0
    lines = ["Tom sees the cat.", "", "Mary likes the big red dog today."]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    engine = ["--engine", "ctranslate2", "--checkpoint", tmp_path / "int8"]
    result = nmt("translate", *engine, "--input", tmp_path / "in.txt", "--beam", "3")
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == 3 and result.stdout.splitlines()[1] == ""
    result = nmt("translate", *engine, "--json", "--nbest", "2", "--beam", "2", stdin="\n".join(lines) + "\n")
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["source"] for r in records] == lines and len(records[2]["nbest"]) == 2
    assert records[2]["nbest"][0]["score"] >= records[2]["nbest"][1]["score"]

    assert nmt("export", transformer_run, "-o", tmp_path / "fp32").returncode == 0
    scores = []
    for flags in (["--checkpoint", transformer_run, "--precision", "fp32"],
                  ["--engine", "ctranslate2", "--checkpoint", tmp_path / "fp32"]):
        result = nmt("eval", "--json", "--beam", "2", *flags)
        assert result.returncode == 0, result.stderr
        scores.append(json.loads(result.stdout)["scores"]["bleu"]["score"])
    assert scores[0] == scores[1]


def test_a_gru_run_is_refused(tiny_run: Path, tmp_path: Path) -> None:
    clean_error(nmt("export", tiny_run, "-o", tmp_path / "out"), "GRU", "--precision int8")
    assert not (tmp_path / "out").exists()


def test_mistakes_are_one_line_errors(transformer_run: Path, tmp_path: Path) -> None:
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    clean_error(nmt("export", transformer_run, "-o", tmp_path / "full"), "--output", "not empty")
    clean_error(nmt("export", transformer_run, "-o", tmp_path / "a", "--format", "onnx"), "--format onnx")
    clean_error(nmt("export", transformer_run, "-o", tmp_path / "a", "--quantization", "int4"),
                "--quantization int4", "int8")
    clean_error(nmt("translate", "--engine", "ctranslate2", "x"), "--checkpoint DIR")
    clean_error(nmt("translate", "--engine", "ctranslate2", "--checkpoint", transformer_run, "x"),
                "nmt export RUN -o DIR")
    clean_error(nmt("translate", "--engine", "onnx", "x"), "--engine onnx")
    assert nmt("export", transformer_run, "-o", tmp_path / "ct2").returncode == 0
    for command in (["info"], ["attn-plot", "Hi."], ["translate", "Hi."]):
        clean_error(nmt(*command, "--checkpoint", tmp_path / "ct2"),
                    f"{tmp_path / 'ct2'}: a model made by nmt export, not a run", "--engine ctranslate2")
    other = tmp_path / "other.model"
    Tokenizer.train([s for pair in make_pairs(50, seed=3) for s in pair], other, vocab_size=40)
    (tmp_path / "ct2" / "spm.model").write_bytes(other.read_bytes())
    clean_error(nmt("translate", "--engine", "ctranslate2", "--checkpoint", tmp_path / "ct2", "x"),
                "spm.model", "not the tokenizer")
    assert not list(tmp_path.glob(".*partial*"))


def test_without_ctranslate2_it_says_how_to_install(transformer_run: Path, tmp_path: Path) -> None:
    """An environment without the package (an import that fails first on the path)."""
    blocker = tmp_path / "blocked" / "ctranslate2"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('not installed')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(blocker.parent), *sys.path])}
    clean_error(nmt("export", transformer_run, "-o", tmp_path / "out", env=env), 'pip install -e ".[export]"')
    assert not (tmp_path / "out").exists()


def _damage(directory: Path, name: str, how: str) -> None:
    path = directory / name
    data = path.read_bytes()
    if how == "cut":
        path.write_bytes(data[:1000])
    elif how == "flip":
        middle = len(data) // 2
        path.write_bytes(data[:middle] + bytes(b ^ 0xFF for b in data[middle:middle + 64]) + data[middle + 64:])
    else:
        path.write_text(how, encoding="utf-8")


@pytest.mark.parametrize("name, how", [("model.bin", "cut"), ("model.bin", "flip"), ("config.json", "{garbage"),
                                       ("target_vocabulary.json", "[]")])
def test_a_damaged_export_is_named_before_ctranslate2_reads_it(transformer_run: Path, tmp_path: Path,
                                                                name: str, how: str) -> None:
    """Each file CTranslate2 reads is checked against the size and SHA-256 that nmt_export.json
    records, so a cut or changed one is named, with the fix (CTranslate2 failed with a traceback,
    or loaded flipped weights without a word); an export without that record, as older exports
    are, still gets one line from what CTranslate2 or the vocabulary's JSON says."""
    assert nmt("export", transformer_run, "-o", tmp_path / "ct2").returncode == 0
    _damage(tmp_path / "ct2", name, how)
    clean_error(nmt("translate", "--engine", "ctranslate2", "--checkpoint", tmp_path / "ct2", "Hi."),
                str(tmp_path / "ct2" / name), "export the run again")
    manifest_path = tmp_path / "ct2" / "nmt_export.json"
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    del manifest["files"]
    manifest_path.write_text(json.dumps(manifest), encoding="utf-8")
    if how != "flip":  # flipped weights without the record load, as CTranslate2 reads them
        clean_error(nmt("translate", "--engine", "ctranslate2", "--checkpoint", tmp_path / "ct2", "Hi."),
                    str(tmp_path / "ct2"), "export the run again")
