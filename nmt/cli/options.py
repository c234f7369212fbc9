"""What every ``nmt`` command shares: a user's mistake as one line on stderr, flag checks,
help texts that show the config's defaults, the decoding options' types, and loading a
translator from them."""
from __future__ import annotations

import copy
import logging
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Iterator, Optional

import typer
from rich.console import Console
from rich.markup import escape

from nmt.config import CHOICES, NO_FLAG, default_of
from nmt.defaults import ARCH_DEFAULTS, BY_CORPUS_SIZE, SMALL_CORPUS_PAIRS
from nmt.errors import NmtError, SettingError, SettingMessage
from nmt.inference.settings import DEFAULT_LENGTH_PENALTY, Sampling, SearchOptions
from nmt.setting_checks import spelling

err = Console(stderr=True)
Opt = typer.Option


@contextmanager
def user_errors() -> Iterator[None]:
    """A user's mistake becomes one clear line on stderr and exit code 1, never a traceback."""
    try:
        yield
    except (NmtError, OSError) as e:  # an OSError: the environment's refusal (a full disk), not a bug
        text = (e.render(flag) if isinstance(e, SettingError) else
                (f"{e.filename}: " if getattr(e, "filename", None) else "") + str(getattr(e, "strerror", None) or e))
        err.print(f"[bold red]error:[/] {escape(text)}", highlight=False, soft_wrap=True)
        raise typer.Exit(code=1) from None
    except KeyboardInterrupt:  # outside the training loop, which saves and exits cleanly itself
        err.print("[bold red]interrupted[/]", highlight=False)
        raise typer.Exit(code=130) from None


def flag(setting: str) -> str:
    """The flag of a setting (``hidden_size``: ``--hidden-size``); the config key of one that
    has none."""
    return setting if setting in NO_FLAG else "--" + setting.replace("_", "-")


class FlagNames(logging.Formatter):
    """A warning about a setting (:class:`nmt.errors.SettingMessage`) names it by its flag, on
    the terminal's handler alone: the record itself is left as it was for any other handler
    (a filter that rewrote it changed what every later handler saw)."""

    def format(self, record: logging.LogRecord) -> str:
        if isinstance(record.msg, SettingMessage):
            record = copy.copy(record)
            record.msg, record.args = record.msg.render(flag), ()
        return super().format(record)


def at_least(name: str, value: int, minimum: int = 1) -> None:
    if value < minimum:
        raise NmtError(f"{name} {value}: must be >= {minimum}")


def with_default(key: str, text: str) -> str:
    archs = {arch: values[key] for arch, values in ARCH_DEFAULTS.items() if key in values}  # None: by corpus size
    base = default_of(key)
    shown = _by_size("gru", key) if archs.pop("gru", base) is None else spelling(base) if key in CHOICES else base
    others = "".join(f"; {arch}: {_by_size(arch, key) if value is None else value}" for arch, value in archs.items())
    return f"{text} \\[default: {shown}{others}]"


def _by_size(arch: str, key: str) -> str:
    """A default that follows the corpus size, in words."""
    small, large = BY_CORPUS_SIZE[arch][key]
    return f"{small} under {SMALL_CORPUS_PAIRS:,} training pairs, else {large}"


# One run: a list, so that a second --checkpoint is seen and refused (one_run), not silently
# taken in the first's place; where the command has no other positional arguments, RunArg too
CheckpointOpt = Annotated[Optional[list[Path]], Opt(
    "--checkpoint", metavar="RUN", help="Run directory (the same as RUN). \\[default: newest in checkpoints/]",
    show_default=False)]
RunArg = Annotated[Optional[Path], typer.Argument(metavar="RUN", help="Run directory. \\[default: newest in "
                                                  "checkpoints/]", show_default=False)]
CheckpointsOpt = Annotated[Optional[list[Path]], Opt(
    "--checkpoint", metavar="RUN", help="Run directory; repeat it for an ensemble (the mean of the runs' log-probabilities; "
    "their spm.model must be one). \\[default: newest in checkpoints/]")]
DeviceOpt = Annotated[str, Opt(help="auto, cpu, cuda, cuda:N or mps.")]
BatchOpt = Annotated[int, Opt(help="Sentences decoded together, at most (a CPU's two workers split a "
                                  "smaller input).")]
BeamOpt = Annotated[int, Opt(help="Beam size; 1 is greedy search.")]
PenaltyOpt = Annotated[float, Opt(help="GNMT length-penalty alpha for beam search (0: none).")]
PrecisionOpt = Annotated[str, Opt(help="auto, fp32, bf16, fp16 (CUDA only) or int8: int8 weights for the "
                                  "GRUs and linear layers (CPU only). auto: as nmt train's.")]
KernelsOpt = Annotated[str, Opt(help="fast, or reference: plain PyTorch search without the certified "
                                "int8 argmax and block-wise top-k (the same output).")]
WeightsOpt = Annotated[str, Opt(help="The run's weights: default (averaged where it scored better on "
                                "validation than best, else best; nmt info says which), best, last, averaged, "
                                "another nmt average -o NAME, or step-K (--keep-checkpoints).")]
EngineOpt = Annotated[str, Opt(help="nmt, or ctranslate2: decode a directory made by nmt export (--checkpoint "
                               "DIR) with CTranslate2; --precision then names its compute type.")]
ENGINES = ("nmt", "ctranslate2")


def search_options(beam: int = 1, nbest: int | None = None, length_penalty: float = DEFAULT_LENGTH_PENALTY,
                   sample: bool = False, temperature: float | None = None, top_k: int | None = None,
                   top_p: float | None = None, seed: int | None = None) -> SearchOptions:
    """The search the decoding flags ask for, checked; the sampling flags need ``--sample``."""
    given = {"temperature": temperature, "top_k": top_k, "top_p": top_p, "seed": seed}
    given = {key: value for key, value in given.items() if value is not None}
    if given and not sample:
        raise SettingError(next(iter(given)), next(iter(given.values())), "is a setting of sampling: add {sample}",
                           ("sample",))
    return SearchOptions(beam, 1 if nbest is None else nbest, length_penalty, Sampling(**given) if sample else None)


def one_run(command: str, checkpoints: list[Path] | None, run: Path | None = None) -> Path | None:
    """The one run a command takes, as RUN or ``--checkpoint`` (None: neither given); two
    refused in one line, since only translate and eval build an ensemble from them."""
    given = [*([run] if run is not None else []), *(checkpoints or [])]
    if len(set(given)) > 1:
        raise NmtError(f"nmt {command} takes one run, got {len(given)} ({', '.join(map(str, given))}); "
                       "an ensemble of runs is nmt translate's and nmt eval's (--checkpoint A --checkpoint B)")
    return given[0] if given else None


def load_translator(checkpoint: Path | list[Path] | None, device: str, options: SearchOptions = SearchOptions(),
                    precision: str = "auto", kernels: str = "fast", engine: str = "nmt", weights: str = "default") -> Any:
    """A translator (:class:`nmt.inference.translate.SentenceTranslator`) from the decoding
    flags, each checked before the model is looked for: nmt's own of ``checkpoint`` (default:
    the newest run; several: an ensemble, decoding at fp32 unless told otherwise), loaded as
    the Python API loads a run (:func:`nmt.api.load`), or CTranslate2's of an exported directory."""
    runs = checkpoint if isinstance(checkpoint, list) else [checkpoint]
    checkpoint = runs[0] if runs else None
    check_engine(engine)
    if engine == "ctranslate2":
        from nmt.export.engine import CTranslate2Translator

        if len(runs) > 1:
            raise SettingError("engine", engine, "decodes one model; an ensemble runs on nmt's own engine")
        if weights != "default":
            raise SettingError("weights", weights, "chooses a run's weights; an export holds one set: "
                               "export the ones you want (nmt export --weights)")
        return CTranslate2Translator(open_export(checkpoint), device, precision, options)
    from nmt.api import Model, load

    if len(runs) > 1:
        members = [load(run, device, "fp32" if precision == "auto" else precision, weights) for run in runs]
        return Model.ensemble(members, options)
    model = load(checkpoint, device, precision, weights)
    logging.getLogger(__name__).debug("decoding with %s on %s at %s", model.run, model.device, model.precision)
    return model.translator(options, kernels)


def check_engine(engine: str) -> None:
    if engine not in ENGINES:
        raise SettingError("engine", engine, f"must be one of {', '.join(ENGINES)}")


def open_export(checkpoint: Path | None) -> Any:
    """The exported directory (:class:`nmt.export.exported.Exported`) given as ``--checkpoint``."""
    if checkpoint is None:
        raise SettingError("engine", "ctranslate2", "needs {checkpoint} DIR, a directory made by nmt export",
                           ("checkpoint",))
    from nmt.export.exported import open_exported

    return open_exported(checkpoint)
