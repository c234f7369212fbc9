"""``nmt prepare``: a corpus read, split, tokenised and encoded once, into a directory that any
number of runs train on (``nmt train --data DATA``)."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from nmt.cli.data_options import (AllowOverlapOpt, CorpusOpt, DedupOpt, MaxLengthRatioOpt, MaxPiecesOpt, ReverseOpt,
                                  SpmSampleOpt, SrcFileOpt, StrictOpt, TestSizeOpt, TestSrcOpt, TestTgtOpt, TgtFileOpt,
                                  ValidSizeOpt, ValidSrcOpt, ValidTgtOpt, VocabSizeOpt, data_flags)
from nmt.cli.options import Opt, err, user_errors
from nmt.config import build_config, load_config_file


def register(app: typer.Typer) -> None:
    """Add ``prepare`` to ``app``."""
    app.command(epilog="Example: nmt prepare --corpus train.tsv.gz --valid-src dev.en --valid-tgt dev.fr "
                       "-o data/en-fr, then nmt train --data data/en-fr")(prepare)


def prepare(
    output: Annotated[Path, Opt("--output", "-o", help="The new directory of prepared data.",
                                show_default=False)],
    corpus: CorpusOpt = None,
    src_file: SrcFileOpt = None,
    tgt_file: TgtFileOpt = None,
    valid_src: ValidSrcOpt = None,
    valid_tgt: ValidTgtOpt = None,
    test_src: TestSrcOpt = None,
    test_tgt: TestTgtOpt = None,
    valid_size: ValidSizeOpt = None,
    test_size: TestSizeOpt = None,
    max_pieces: MaxPiecesOpt = None,
    vocab_size: VocabSizeOpt = None,
    spm_sample: SpmSampleOpt = None,
    strict: StrictOpt = False,
    allow_overlap: AllowOverlapOpt = None,
    dedup: DedupOpt = None,
    max_length_ratio: MaxLengthRatioOpt = None,
    reverse: ReverseOpt = None,
    config: Annotated[Optional[Path], Opt(help="YAML file with any of these options (an nmt train config "
                                          "will do); flags win.")] = None,
) -> None:
    """Prepare a corpus once for many runs (nmt train --data DIR).

    Reads it (plain or gzipped), holds out validation and test sets, trains SentencePiece, and
    encodes the training pairs into memory-mapped arrays, with a data.json that records each
    source file's SHA-256 and what was kept and skipped."""
    flags = data_flags({k: v for k, v in locals().items() if k not in ("output", "strict", "config")})
    from nmt.data.prepare import prepare_data_dir

    with user_errors():
        cfg = build_config(load_config_file(config) if config else {}, flags).data
        data = prepare_data_dir(cfg, output, strict)
        pairs = data.manifest.pairs
        err.print(f"prepared [bold]{output}[/]: {pairs['train']:,} training pairs ({len(data.train_src.ids):,} + "
                  f"{len(data.train_tgt.ids):,} pieces), {pairs['valid']:,} validation, {pairs['test']:,} test, "
                  f"{data.tokenizer.vocab_size:,} pieces in the vocabulary; train on it with nmt train --data "
                  f"{output}", highlight=False, soft_wrap=True)
