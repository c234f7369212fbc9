"""An exported directory: CTranslate2's model files, the run's SentencePiece model, and
``nmt_export.json``, which says how to cut text into pieces and back, and where it came from.

Layout::

    model.bin, config.json               CTranslate2's model (no code: a flat binary format)
    source_vocabulary.json               the source rows' pieces, in row order
    target_vocabulary.json               the target rows' pieces, in row order
    spm.model                            the run's SentencePiece model
    nmt_export.json                      this module's manifest (see :func:`_manifest`)

The directory is written beside its destination and renamed into place: it is there whole or
not at all.
"""
from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from nmt.config import EXPORT_MANIFEST, RunConfig
from nmt.data.tokenizer import Tokenizer
from nmt.errors import NmtError, SettingError
from nmt.export.converter import (MAX_POSITIONS, QUANTIZATIONS, require_ctranslate2, spec_converter,
                                  transformer_spec)
from nmt.inference.loading import load_run
from nmt.runtime.weights import weights_path
from nmt.runtime.fileio import atomic_path, whole_directory

MANIFEST = EXPORT_MANIFEST
FORMAT = 1


@dataclass(frozen=True)
class Exported:
    """An exported directory, checked: its manifest, and its tokenizer (the one it names)."""

    directory: Path
    manifest: dict
    tokenizer: Tokenizer

    @property
    def run(self) -> Path:
        """The run it was exported from (it may since have moved or gone)."""
        return Path(self.manifest["run"])


def export_run(run_dir: Path, out: Path, quantization: str = "float32", weights: str = "default") -> Exported:
    """``nmt export``: ``run_dir``'s Transformer, with the weights called ``weights``, as a
    CTranslate2 model in the new directory ``out``, stored at ``quantization``."""
    if quantization not in QUANTIZATIONS:
        raise SettingError("quantization", quantization, f"must be one of {', '.join(QUANTIZATIONS)}")
    ctranslate2 = require_ctranslate2()
    config, model, tokenizer = load_run(run_dir, torch.device("cpu"), weights)
    if config.model.arch != "transformer":
        raise NmtError(f"{run_dir} is a GRU run: CTranslate2 has no GRU encoder-decoder to export it "
                       "to; for faster GRU decoding on CPU use nmt's own --precision int8")
    spec = transformer_spec(model, config.model, tokenizer)
    with whole_directory(out) as partial:
        spec_converter(spec).convert(str(partial), quantization=quantization, force=True)  # into the empty partial
        shutil.copyfile(tokenizer.model_path, partial / "spm.model")
        manifest = _manifest(run_dir, weights_path(run_dir, weights), config, tokenizer, quantization,
                             ctranslate2.__version__, _file_records(partial))
        with atomic_path(partial / MANIFEST) as tmp:
            tmp.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return open_exported(out)


def _manifest(run_dir: Path, weights: Path, config: RunConfig, tokenizer: Tokenizer, quantization: str,
              version: str, files: dict) -> dict:
    return {
        "format": FORMAT,
        "engine": "ctranslate2",
        "ctranslate2_version": version,
        "quantization": quantization,
        "run": str(run_dir.resolve()),
        "weights": {"file": str(weights.relative_to(run_dir)), "sha256": _sha256(weights)},
        "model": asdict(config.model),
        "tokenizer": {"file": "spm.model", "sha256": tokenizer.sha256},
        "files": files,
        "source": {"text": "NFC, zero-width characters removed, runs of spaces one space, trimmed",
                   "pieces": "SentencePiece pieces of that text (spm.model), at most 256 a line",
                   "end": "</s>, appended by CTranslate2 (config.json: add_source_eos)"},
        "target": {"start": "<s>", "end": "</s>",
                   "text": "the pieces without <pad>, <unk>, <s> and </s>, decoded by spm.model"},
        "max_positions": MAX_POSITIONS,
        "length_penalty": "nmt's alpha is GNMT's: a score is divided by ((5 + pieces) / 6) ** alpha, "
                          "pieces counting </s>; CTranslate2's own length_penalty divides by pieces ** alpha",
    }


def _file_records(directory: Path) -> dict:
    """Each of CTranslate2's files in ``directory``: its size and SHA-256, so that a file cut
    short or changed is named before CTranslate2 reads it (it fails on one with a traceback,
    or loads flipped weights without a word)."""
    return {path.name: {"bytes": path.stat().st_size, "sha256": _sha256(path)}
            for path in sorted(directory.iterdir()) if path.is_file() and path.name != "spm.model"}


def _check_files(directory: Path, files: dict) -> None:
    for name, record in files.items():
        path = directory / name
        if not path.is_file():
            raise NmtError(f"{path}: missing; export the run again")
        size = path.stat().st_size
        if size != record["bytes"]:
            raise NmtError(f"{path}: {size:,} bytes where the export wrote {record['bytes']:,}: cut short or "
                           "replaced; export the run again")
        if _sha256(path) != record["sha256"]:
            raise NmtError(f"{path}: changed since it was exported (its SHA-256 is not the one in "
                           f"{MANIFEST}); export the run again")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def open_exported(directory: Path) -> Exported:
    """An exported directory, its files and its tokenizer checked against its manifest."""
    path = directory / MANIFEST
    if not path.is_file():
        what = "a run directory; export it first: nmt export RUN -o DIR" if (directory / "config.yaml").is_file() \
            else f"no {MANIFEST}; not a directory made by nmt export"
        raise NmtError(f"{directory}: {what}")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise NmtError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT or manifest.get("engine") != "ctranslate2":
        raise NmtError(f"{path}: not an nmt export of format {FORMAT} for CTranslate2")
    for name in ("model.bin", "config.json"):
        if not (directory / name).is_file():
            raise NmtError(f"{directory}: {name} is missing; export the run again")
    _check_files(directory, manifest.get("files", {}))  # exports before the record have none
    tokenizer = Tokenizer(directory / "spm.model")
    if tokenizer.sha256 != manifest["tokenizer"]["sha256"]:
        raise NmtError(f"{directory / 'spm.model'}: not the tokenizer this model was exported with "
                       f"(sha256 {tokenizer.sha256[:12]}…, {MANIFEST} says {manifest['tokenizer']['sha256'][:12]}…)")
    return Exported(directory, manifest, tokenizer)
