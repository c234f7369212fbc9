"""What ``nmt compare`` compares: each system as the user names it, and its hypotheses on the
test set, decoded once and kept in its run (:mod:`nmt.comparison.cache`).

A system is written as:

- ``RUN`` — a run directory, decoded with its default weights (or ``--weights``);
- ``RUN@NAME`` — the run with its weights called NAME (best, last, averaged, step-K, …);
- ``RUN+RUN[+…]`` — an ensemble of runs that share one spm.model;
- ``EXPORT`` — a directory made by ``nmt export``, decoded by CTranslate2;
- ``FILE`` — a file of hypotheses, one line per test source.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from nmt.comparison.cache import HypothesisCache, sha256_lines
from nmt.config import EXPORT_MANIFEST
from nmt.data.manifest import content
from nmt.errors import NmtError
from nmt.export.exported import open_exported
from nmt.inference.evaluate import TestSet, read_lines, run_test_set
from nmt.inference.search import DEFAULT_BATCH
from nmt.inference.translate import SentenceTranslator
from nmt.runtime.weights import DEFAULT, check_name, default_weights, weights_path

# Loads a translator: (the run directories or the export, engine, weights) -> translator
Loader = Callable[[list[Path], str, str], SentenceTranslator]


@dataclass(frozen=True)
class System:
    """One system: its name as given, its kind (run, ensemble, export or file), its paths
    (the runs, the export or the file) and the weights of its runs."""

    name: str
    kind: str
    paths: tuple[Path, ...]
    weights: str = DEFAULT

    @property
    def engine(self) -> str:
        return "ctranslate2" if self.kind == "export" else "nmt"

    def test_runs(self) -> list[Path]:
        """The runs whose test sets this system's runs were held out with: its run, each of an
        ensemble's, or the run an export was made from; none for a file of hypotheses."""
        if self.kind == "file":
            return []
        if self.kind == "export":
            return [open_exported(self.paths[0]).run]
        return list(self.paths)


def parse_system(text: str, weights: str = DEFAULT) -> System:
    """The system ``text`` names (see the module's docstring); ``weights``: its runs' weights
    unless ``@NAME`` says otherwise."""
    path = Path(text)
    if not path.exists() and "@" in text and "+" not in text:
        run, _, weights = text.rpartition("@")
        check_name(weights, "weights")
        system = parse_system(run, weights)
        if system.kind != "run":
            raise NmtError(f"{text}: @{weights} chooses a run's weights, and {run} is no run directory")
        return System(text, "run", system.paths, weights)
    if not path.exists() and "+" in text:
        members = [_member(part, text) for part in text.split("+")]
        return _with_weights(System(text, "ensemble", tuple(members), weights))
    kind = _kind(path, text)
    return _with_weights(System(text, kind, (path,), weights if kind == "run" else DEFAULT))


def _with_weights(system: System) -> System:
    """``system``, once each of its runs is found to hold its weights: a missing set is named
    before any system is decoded, with the sets the run has."""
    if system.kind in ("run", "ensemble"):
        for run in system.paths:
            weights_path(run, system.weights)
    return system


def _member(part: str, text: str) -> Path:
    path = Path(part)
    if "@" in part and not path.exists():
        raise NmtError(f"{text}: the members of an ensemble decode with one set of weights each; "
                       "give it with --weights, not @NAME")
    if _kind(path, part) != "run":
        raise NmtError(f"{text}: {part} is no run directory; an ensemble is made of runs")
    return path


def _kind(path: Path, text: str) -> str:
    if path.is_dir():
        if (path / EXPORT_MANIFEST).is_file():
            return "export"
        if (path / "config.yaml").is_file():
            return "run"
        raise NmtError(f"{text}: a directory that is neither a run (config.yaml) nor an export ({EXPORT_MANIFEST})")
    if path.is_file():
        return "file"
    raise NmtError(f"{text}: no such run, export or file of hypotheses")


def common_test_set(systems: list[System], all_refs: bool = False) -> TestSet:
    """The test set the systems were held out with: their runs' test sets must be one."""
    runs = [(s, run) for s in systems for run in s.test_runs()]
    if not runs:
        raise NmtError("files of hypotheses carry no test set: give --src and --ref, or a run to take its test set from")
    first_system, first_run = runs[0]
    test = _run_test_set(first_system, first_run, all_refs)
    for system, run in runs[1:]:
        if run != first_run:
            other = _run_test_set(system, run, all_refs)
            if (other.sources, other.refs) != (test.sources, test.refs):
                raise NmtError(f"{first_system.name} and {system.name} hold out different test sets "
                               f"({first_run}/test.tsv and {run}/test.tsv); compare them on one with --src and --ref")
    return test


def _run_test_set(system: System, run: Path, all_refs: bool) -> TestSet:
    if not (run / "test.tsv").is_file():
        made = f", the run {system.name} was exported from," if system.kind == "export" else ""
        raise NmtError(f"{run}{made} has no test.tsv; give --src and --ref")
    return run_test_set(run, all_refs)


def hypotheses(system: System, test: TestSet, load: Loader, batch_size: int = DEFAULT_BATCH
               ) -> tuple[list[str], bool]:
    """The system's hypothesis for each test source, and whether they came from its cache."""
    if system.kind == "file":
        hyps = read_lines(system.paths[0])
        if len(hyps) != len(test.sources):
            raise NmtError(f"{system.name} has {len(hyps):,} lines but the test set ({test.name}) has "
                           f"{len(test.sources):,} sources; a file of hypotheses has one line per source")
        return hyps, False
    model = _model_identity(system)  # before loading: weights replaced meanwhile must not be keyed as these
    translator = load(list(system.paths), system.engine, system.weights)
    identity = {"test_sources": sha256_lines(test.sources), **model, "tokenizer": translator.tokenizer.sha256,
                "precision": translator.precision, "device": str(translator.device),
                "search": asdict(translator.options)}
    cache = HypothesisCache(system.paths[0])
    kept = cache.get(identity, len(test.sources))
    if kept is not None:
        return kept, True
    hyps = translator.translate(test.sources, batch_size)
    cache.put(identity, hyps)
    return hyps, False


def _model_identity(system: System) -> dict[str, Any]:
    """What the system's output depends on besides the test set and the search settings: its
    weights' contents and the code that decodes them (the cache's key, with those)."""
    if system.kind == "export":
        manifest = open_exported(system.paths[0]).manifest
        model = {"export_files": manifest.get("files"), "weights": manifest.get("weights")}
    else:
        model = {"weights": [_weights_identity(run, system.weights) for run in system.paths]}
    return {"engine": system.engine, "versions": engine_versions(system.engine), **model}


def engine_versions(engine: str) -> dict[str, str]:
    """The versions of the code that decodes: nmt's, and torch's or CTranslate2's."""
    import torch

    from nmt import __version__
    if engine == "ctranslate2":
        return {"nmt": __version__, "ctranslate2": metadata.version("ctranslate2")}
    return {"nmt": __version__, "torch": torch.__version__}


def _weights_identity(run: Path, weights: str) -> dict[str, str]:
    name = default_weights(run) if weights == DEFAULT else weights
    return {"name": name, "sha256": content(weights_path(run, name))["sha256"]}
