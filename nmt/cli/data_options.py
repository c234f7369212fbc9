"""The options that say where a corpus is and how it is prepared, shared by ``nmt prepare`` and
``nmt train`` (which prepares into its run unless given ``--data``)."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

from nmt.cli.options import Opt, with_default

PANEL = "Data"

CorpusOpt = Annotated[Optional[list[Path]], Opt(
    help="Parallel TSV corpus, SRC<TAB>TGT per line, plain or gzipped; repeat for several (weights: a YAML "
         "list in --config). \\[default: data/fra-eng/fra.txt, downloaded if missing]", rich_help_panel=PANEL,
    show_default=False)]
SrcFileOpt = Annotated[Optional[Path], Opt(help="Source side as a plain-text file (with --tgt-file).",
                                           rich_help_panel=PANEL)]
TgtFileOpt = Annotated[Optional[Path], Opt(help="Target side, aligned line by line with --src-file.",
                                           rich_help_panel=PANEL)]
ValidSrcOpt = Annotated[Optional[Path], Opt(help="Validation sources (with --valid-tgt), instead of holding them "
                                            "out of the corpus.", rich_help_panel=PANEL)]
ValidTgtOpt = Annotated[Optional[Path], Opt(help="Validation references, aligned with --valid-src.",
                                            rich_help_panel=PANEL)]
TestSrcOpt = Annotated[Optional[Path], Opt(help="Test sources (with --test-tgt), instead of holding them out of "
                                           "the corpus.", rich_help_panel=PANEL)]
TestTgtOpt = Annotated[Optional[Path], Opt(help="Test references, aligned with --test-src.", rich_help_panel=PANEL)]
ValidSizeOpt = Annotated[Optional[int], Opt(help=with_default("valid_size", "Held-out validation source sentences."),
                                            rich_help_panel=PANEL)]
TestSizeOpt = Annotated[Optional[int], Opt(help=with_default("test_size", "Held-out test source sentences."),
                                           rich_help_panel=PANEL)]
MaxPiecesOpt = Annotated[Optional[int], Opt(help=with_default("max_pieces", "Drop longer training pairs."),
                                            rich_help_panel=PANEL)]
VocabSizeOpt = Annotated[Optional[int], Opt(help=with_default("vocab_size", "Joint SentencePiece vocabulary size."),
                                            rich_help_panel=PANEL)]
SpmSampleOpt = Annotated[Optional[int], Opt(help=with_default(
    "spm_sample", "Sentences SentencePiece trains on at most, drawn at random from the training pairs' two "
    "sides."), rich_help_panel=PANEL)]
StrictOpt = Annotated[bool, Opt(help="Fail on any malformed corpus line instead of skipping it.",
                                rich_help_panel=PANEL)]
AllowOverlapOpt = Annotated[Optional[bool], Opt("--allow-overlap/--no-allow-overlap", help=with_default(
    "allow_overlap", "Accept a given validation or test set whose every source is also a training source (its "
    "scores then measure recall)."), rich_help_panel=PANEL)]
DedupOpt = Annotated[Optional[bool], Opt("--dedup/--no-dedup", help=with_default(
    "dedup", "Drop exact duplicate pairs, keeping the first."), rich_help_panel=PANEL)]
ReverseOpt = Annotated[Optional[bool], Opt("--reverse/--no-reverse", help=with_default(
    "reverse", "Read the corpus the other way round (TGT<TAB>SRC; --tgt-file as the source): the reverse "
    "direction, e.g. to back-translate. Given --valid-*/--test-* files are the model's source and target."),
    rich_help_panel=PANEL)]
MaxLengthRatioOpt = Annotated[Optional[float], Opt(help=with_default(
    "max_length_ratio", "Drop training pairs whose sides' piece counts differ more than this many times (0: "
    "off; WMT recipes use 1.5 to 3)."), rich_help_panel=PANEL)]


def data_flags(given: dict[str, Any]) -> dict[str, Any]:
    """The options a data command was given, as config values: paths as text, one corpus as
    its path, several as a list."""
    flags = {k: str(v) if isinstance(v, Path) else v for k, v in given.items() if v is not None}
    if "corpus" in flags:
        paths = [str(p) for p in flags["corpus"]]
        flags["corpus"] = paths[0] if len(paths) == 1 else paths
    return flags
