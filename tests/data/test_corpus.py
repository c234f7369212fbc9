import pytest

from nmt.data.corpus import normalize, read_parallel, read_tsv
from nmt.errors import NmtError


def test_normalize_spaces_and_unicode():
    assert normalize("  Cours\u202f!\u00a0 ") == "Cours !"
    assert normalize("e\u0301te\u0301\u200b") == "été"
    assert normalize("a\t\tb") == "a b"


def test_read_tsv_keeps_good_lines_and_counts_skips(tmp_path):
    path = tmp_path / "c.tsv"
    path.write_bytes(b"\xef\xbb\xbfGo.\tVa !\tCC-BY\r\nno tab here\n\tempty source\nBad \xff\tx\nHi.\tSalut !\n")
    pairs, report = read_tsv(path)
    assert pairs == [("Go.", "Va !"), ("Hi.", "Salut !")]
    assert report.kept == 2
    assert dict(report.skipped) == {"lines without a tab": 1, "empty side": 1, "invalid UTF-8": 1}
    assert report.examples["lines without a tab"] == [2]
    with pytest.raises(NmtError, match="^strict: "):
        read_tsv(path, strict=True)


def test_read_parallel_requires_equal_line_counts(tmp_path):
    (tmp_path / "a").write_text("x\ny\n")
    (tmp_path / "b").write_text("x\n")
    with pytest.raises(NmtError, match="2 lines.*1"):
        read_parallel(tmp_path / "a", tmp_path / "b")
    (tmp_path / "b").write_text("X\nY\n")
    assert read_parallel(tmp_path / "a", tmp_path / "b")[0] == [("x", "X"), ("y", "Y")]


def test_missing_file_and_directory_are_clear_errors(tmp_path):
    with pytest.raises(NmtError, match="no such file"):
        read_tsv(tmp_path / "nope.tsv")
    with pytest.raises(NmtError, match="is a directory"):
        read_tsv(tmp_path)
