"""The ``nmt`` command line: parses options, calls the library, prints. Nothing else lives here."""
from __future__ import annotations

import inspect
import logging
import sys
from pathlib import Path
from typing import Annotated, Iterator, Optional

import typer
from rich.logging import RichHandler

from nmt import __version__
from nmt.cli import (compare_command, demo_command, export_command, prepare_command, serve_command,
                     tool_commands)
from nmt.cli.data_options import (AllowOverlapOpt, CorpusOpt, DedupOpt, MaxLengthRatioOpt, MaxPiecesOpt, ReverseOpt,
                                  SpmSampleOpt, SrcFileOpt, StrictOpt, TestSizeOpt, TestSrcOpt, TestTgtOpt, TgtFileOpt,
                                  ValidSizeOpt, ValidSrcOpt, ValidTgtOpt, VocabSizeOpt, data_flags)
from nmt.cli.options import (BatchOpt, BeamOpt, CheckpointsOpt, DeviceOpt, EngineOpt, FlagNames, KernelsOpt, Opt,
                             PenaltyOpt, PrecisionOpt, WeightsOpt, at_least, check_engine, err, load_translator,
                             open_export, search_options, user_errors, with_default)
from nmt.cli.streams import argument_texts, input_lines, print_out, refuse_same_file, run_inputs, write_output
from nmt.config import RunConfig, build_config, load_config_file, read_run_config
from nmt.defaults import DEFAULT_MAX_EPOCHS, DEFAULT_PATIENCE
from nmt.errors import NmtError
from nmt.inference.search import DEFAULT_BATCH
from nmt.inference.settings import DEFAULT_LENGTH_PENALTY
from nmt.training.launch import check_process_count, environment_rank, launch, without_flag

SAMPLING = "Sampling"  # the help panel of translate's sampling flags

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode="rich",
                  help="nmt: train, run and inspect neural machine translation models: GRU "
                       "encoder-decoders with Bahdanau attention, and Transformers.")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"nmt {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Warnings and errors only.")] = False,
) -> None:
    level = logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO
    if environment_rank():  # a worker of several: rank 0 alone reports progress
        level = max(level, logging.WARNING)
    handler = RichHandler(console=err, show_path=False)
    handler.setFormatter(FlagNames("%(message)s", datefmt="[%X]"))
    logging.basicConfig(level=level, format="%(message)s", datefmt="[%X]", force=True, handlers=[handler])


@app.command(epilog="Example: nmt train --corpus data/fra-eng/fra.txt --max-minutes 30")
def train(
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
    data: Annotated[Optional[Path], Opt(help="Prepared data (nmt prepare -o DATA) to train on, instead of the "
                                        "corpus options.", rich_help_panel="Data")] = None,
    arch: Annotated[Optional[str], Opt(help=with_default("arch", "gru, or transformer (embed size = hidden size = "
                                               "d_model)."), rich_help_panel="Model")] = None,
    embed_size: Annotated[Optional[int], Opt(help=with_default("embed_size", "Embedding size."),
                                             rich_help_panel="Model")] = None,
    hidden_size: Annotated[Optional[int], Opt(help=with_default(
        "hidden_size", "GRU and attention size; a Transformer's d_model."), rich_help_panel="Model")] = None,
    layers: Annotated[Optional[int], Opt(help=with_default("layers", "Layers of the encoder and of the "
                                                       "decoder."), rich_help_panel="Model")] = None,
    bidirectional: Annotated[Optional[bool], Opt("--bidirectional/--unidirectional",
                                                 help=with_default("bidirectional", "Bidirectional encoder."),
                                                 rich_help_panel="Model")] = None,
    dropout: Annotated[Optional[float], Opt(help=with_default("dropout", "Dropout probability."),
                                            rich_help_panel="Model")] = None,
    decoder: Annotated[Optional[str], Opt(help=with_default("decoder", "input-feeding (Luong et al., OpenNMT-py's) "
                                                  "or bahdanau (d2l.ai's)."), rich_help_panel="Model")] = None,
    attention: Annotated[Optional[str], Opt(help=with_default("attention", "Scoring: additive (Bahdanau's) or dot "
                                                    "(scaled dot product)."), rich_help_panel="Model")] = None,
    heads: Annotated[Optional[int], Opt(help=with_default("heads", "Transformer: attention heads."),
                                        rich_help_panel="Model")] = None,
    ff_size: Annotated[Optional[int], Opt(help=with_default("ff_size", "Transformer: feed-forward size."),
                                          rich_help_panel="Model")] = None,
    norm: Annotated[Optional[str], Opt(help=with_default("norm", "Transformer: layer norm before each sub-layer "
                                             "(pre) or after its residual sum (post)."),
                                       rich_help_panel="Model")] = None,
    tie_embeddings: Annotated[Optional[bool], Opt("--tie-embeddings/--no-tie-embeddings", help=with_default(
        "tie_embeddings", "The decoder's input embedding is its output layer (a GRU's needs "
        "--embed-size equal to --hidden-size)."),
        rich_help_panel="Model")] = None,
    epochs: Annotated[Optional[int], Opt(help=f"Most epochs. \\[default: {DEFAULT_MAX_EPOCHS} when no budget is "
                                         "given, which trains until --patience; no limit when --max-steps or "
                                         "--max-minutes is given]", rich_help_panel="Budget")] = None,
    max_steps: Annotated[Optional[int], Opt(help="Most optimiser steps in total.",
                                            rich_help_panel="Budget")] = None,
    max_minutes: Annotated[Optional[float], Opt(help="Most wall-clock minutes of training.",
                                                rich_help_panel="Budget")] = None,
    batch_size: Annotated[Optional[int], Opt(help=with_default("batch_size", "Sentences per batch."),
                                             rich_help_panel="Optimisation")] = None,
    batch_tokens: Annotated[Optional[int], Opt(help="Target pieces per batch (instead of --batch-size).",
                                               rich_help_panel="Optimisation")] = None,
    lr: Annotated[Optional[float], Opt(help=with_default("lr", "Adam learning rate."),
                                       rich_help_panel="Optimisation")] = None,
    lr_decay: Annotated[Optional[float], Opt(help=with_default("lr_decay", "Plateau schedule: LR factor when "
                                                   "validation loss stalls."),
                                             rich_help_panel="Optimisation")] = None,
    schedule: Annotated[Optional[str], Opt(help=with_default("schedule", "plateau, or noam: linear warm-up to "
                                                 "--lr, then inverse-square-root decay."),
                                           rich_help_panel="Optimisation")] = None,
    warmup_steps: Annotated[Optional[int], Opt(help=with_default("warmup_steps", "Noam schedule: warm-up steps."),
                                               rich_help_panel="Optimisation")] = None,
    clip: Annotated[Optional[float], Opt(help=with_default("clip", "Gradient norm clipping."),
                                         rich_help_panel="Optimisation")] = None,
    label_smoothing: Annotated[Optional[float], Opt(help=with_default("label_smoothing", "Label smoothing."),
                                                    rich_help_panel="Optimisation")] = None,
    subword_alpha: Annotated[Optional[float], Opt(help=with_default(
        "subword_alpha", "Subword regularisation: segment each training pair anew at every step, drawn from its "
        "--subword-nbest best segmentations with probability P ** X (0: off; smaller is more varied); validation "
        "and translation use the best segmentation."), rich_help_panel="Optimisation")] = None,
    subword_nbest: Annotated[Optional[int], Opt(help=with_default(
        "subword_nbest", "Sample among the N best segmentations (at least 2)."),
        rich_help_panel="Optimisation")] = None,
    source_word_dropout: Annotated[Optional[float], Opt(help=with_default(
        "source_word_dropout", "Each training source piece reads as <unk> at this rate (token masking)."),
        rich_help_panel="Optimisation")] = None,
    rdrop_alpha: Annotated[Optional[float], Opt(help=with_default(
        "rdrop_alpha", "R-Drop: run each training batch twice and add alpha/4 times the symmetric KL of the "
        "two passes' outputs to the loss (0: off; twice the step time)."), rich_help_panel="Optimisation")] = None,
    valid_every: Annotated[Optional[int], Opt(help=with_default("valid_every", "Validate every N steps (0: each epoch)."),
                                              rich_help_panel="Optimisation")] = None,
    valid_bleu_size: Annotated[Optional[int], Opt(help=with_default("valid_bleu_size", "Validation sentences decoded for BLEU."),
                                                  rich_help_panel="Optimisation")] = None,
    patience: Annotated[Optional[int], Opt(help="Stop after N validations without a better BLEU (0: never). "
                                           f"\\[default: {DEFAULT_PATIENCE} when no --epochs, --max-steps or "
                                           "--max-minutes is given (a Transformer under 50,000 training pairs: 6), "
                                           "else 0]", rich_help_panel="Budget")] = None,
    keep_checkpoints: Annotated[Optional[int], Opt(help=with_default(
        "keep_checkpoints", "Keep the weights of the last N validations as checkpoints/step-K.safetensors, "
        "for nmt average and --weights step-K (0: none)."), rich_help_panel="Budget")] = None,
    average_last: Annotated[Optional[int], Opt(help=with_default(
        "average_last", "When the run ends, average the last N validations' weights into averaged.safetensors, "
        "the default weights where they score better on validation than best (0: off)."),
        rich_help_panel="Budget")] = None,
    tensorboard: Annotated[Optional[bool], Opt("--tensorboard/--no-tensorboard", help=with_default(
        "tensorboard", "Write TensorBoard event files into RUN/tensorboard/ (pip install -e \".\\[tensorboard]\")."))
    ] = None,
    seed: Annotated[Optional[int], Opt(help=with_default("seed", "Random seed."))] = None,
    device: Annotated[Optional[str], Opt(help=with_default("device", "auto, cpu, cuda, cuda:N or mps."))] = None,
    threads: Annotated[Optional[int], Opt(help=with_default("threads", "CPU threads (0: one per core)."))] = None,
    kernels: Annotated[Optional[str], Opt(help=with_default("kernels", "fast, or reference: plain PyTorch "
                                                  "without the hand-written CPU paths."))] = None,
    precision: Annotated[Optional[str], Opt(help=with_default("precision", "fp32, bf16 or fp16 (CUDA) autocast; "
                                                    "auto: bf16 where the device computes it natively "
                                                    "(on CPU, for a Transformer; docs/performance.md)."))] = None,
    accum: Annotated[Optional[int], Opt(help=with_default("accum", "Batches whose gradients add up to one step."),
                                        rich_help_panel="Optimisation")] = None,
    max_pass_pieces: Annotated[Optional[int], Opt(help=with_default(
        "max_pass_pieces", "Padded source+target pieces a forward pass holds at most: a longer batch "
        "runs in parts whose gradients add up to its own (less memory, same step; 0: no limit)."),
        rich_help_panel="Optimisation")] = None,
    nproc: Annotated[int, Opt(help="Train on N processes of this machine (torchrun --standalone "
                              "--nproc-per-node N); --batch-size is the batch of all of them.")] = 1,
    oversubscribe: Annotated[bool, Opt(help="Allow --nproc above the CPU cores (each process then "
                                       "waits for the others at every step).")] = False,
    run_dir: Annotated[Optional[Path], Opt(help="Run directory. \\[default: checkpoints/<timestamp>]")] = None,
    resume: Annotated[Optional[Path], Opt(help="Continue this run from its last checkpoint; only "
                                          "--epochs/--max-steps/--max-minutes and --threads may change.")] = None,
    init_from: Annotated[Optional[Path], Opt(help="Fine-tune: a new run that starts from this run's default weights, "
                                             "tokenizer and model, with a fresh optimiser and schedule, on the data, "
                                             "budget and learning rate given (model flags are refused).")] = None,
    config: Annotated[Optional[Path], Opt(help="YAML file with any of these options; flags win.")] = None,
) -> None:
    """Train a GRU with attention or a Transformer on parallel text.

    A bidirectional GRU encoder and an attention decoder by default, or --arch transformer.
    Every option can also be set in a YAML file passed with --config (keys as the flag names,
    with _ for -); the resolved configuration is saved as config.yaml in the run directory.
    """
    flags = {k: v for k, v in locals().items()
             if v is not None and k not in ("config", "run_dir", "strict", "resume", "init_from", "nproc",
                                            "oversubscribe")}
    from nmt.training import distributed
    from nmt.training.runs import new_run_dir, resume_run, train_new_run

    flags = data_flags(flags)
    with user_errors():
        at_least("--nproc", nproc)
        if nproc > 1 and not distributed.launched():
            # a bad flag fails here, once, not in every process
            cfg = (_new_config(config, flags, init_from) if resume is None
                   else read_run_config(resume / "config.yaml"))
            check_process_count(nproc, flags.get("device", cfg.train.device), oversubscribe)
            raise typer.Exit(launch(nproc, without_flag(sys.argv[1:], "--nproc")))
        if resume is not None:
            if init_from is not None:
                raise NmtError("--init-from starts a new run; --resume continues one: give one of them")
            given = {"config": config, "run_dir": run_dir}
            run = resume
            state = resume_run(resume, flags | {k: v for k, v in given.items() if v}, strict)
        else:
            cfg = _new_config(config, flags, init_from)
            run = run_dir or new_run_dir()
            state = train_new_run(cfg, run, strict)
        best = f"{state.best_bleu:.2f}" if state.best_bleu >= 0 else "none yet (stopped before validating)"
        if environment_rank():
            return  # rank 0 reports
        err.print(f"run saved in [bold]{run}[/]: {state.step} steps, best validation BLEU {best}",
                  highlight=False)


def _new_config(config: Path | None, flags: dict, init_from: Path | None) -> RunConfig:
    """A new run's config from its --config file and flags; with --init-from, the parent's
    model (its architecture's training defaults too), any model setting given refused."""
    file_options = load_config_file(config) if config else {}
    if init_from is None and file_options.get("init_from"):
        init_from = Path(file_options.pop("init_from"))
    if init_from is None:
        return build_config(file_options, flags)
    from nmt.training import finetune

    parent = finetune.parent_config(init_from)
    finetune.check_model_not_given({**file_options, **flags}, init_from)
    return finetune.fine_tuned(build_config(file_options, flags | {"arch": parent.model.arch}), parent, init_from)


def _chunks(lines: list[str], size: int = 10_000) -> Iterator[list[str]]:
    """Large inputs are decoded chunk by chunk so memory stays bounded."""
    for start in range(0, len(lines), size):
        yield lines[start:start + size]


@app.command(epilog='Example: nmt translate "Tom chases Jerry."   or   '
                    'nmt translate --input en.txt --output fr.txt --beam 5')
def translate(
    text: Annotated[Optional[list[str]], typer.Argument(help="Sentences to translate, one output line each. "
                                                        "Without TEXT or --input, lines are read from stdin.",
                                                        show_default=False)] = None,
    checkpoint: CheckpointsOpt = None,
    input: Annotated[Optional[Path], Opt("--input", "-i", help="File of sentences, one per line.")] = None,
    output: Annotated[Optional[Path], Opt("--output", "-o", help="Write translations here. \\[default: stdout]")] = None,
    beam: BeamOpt = 1,
    nbest: Annotated[Optional[int], Opt(help="Print the N best per sentence as index<TAB>score<TAB>translation.")] = None,
    length_penalty: PenaltyOpt = DEFAULT_LENGTH_PENALTY,
    sample: Annotated[bool, Opt("--sample", help="Draw each piece from the model's distribution instead of the "
                                "most likely (beam 1; with --nbest N, N samples per sentence, index<TAB>score"
                                "<TAB>translation). The same input and --seed give the same samples.",
                                rich_help_panel=SAMPLING)] = False,
    temperature: Annotated[Optional[float], Opt(help="Sampling: divide the logits by this (> 0; below 1 sharper). "
                                                "\\[default: 1]", rich_help_panel=SAMPLING)] = None,
    top_k: Annotated[Optional[int], Opt(help="Sampling: draw among the K most likely pieces only (0: all). "
                                        "\\[default: 0]", rich_help_panel=SAMPLING)] = None,
    top_p: Annotated[Optional[float], Opt(help="Sampling: draw among the most likely pieces whose probability "
                                          "reaches P (nucleus sampling; 1: all). \\[default: 1]",
                                          rich_help_panel=SAMPLING)] = None,
    seed: Annotated[Optional[int], Opt(help="Sampling: the seed of the draws. \\[default: 0]",
                                       rich_help_panel=SAMPLING)] = None,
    json_out: Annotated[bool, Opt("--json", help="One JSON object per input line.")] = False,
    batch_size: BatchOpt = DEFAULT_BATCH,
    device: DeviceOpt = "auto",
    precision: PrecisionOpt = "auto",
    kernels: KernelsOpt = "fast",
    engine: EngineOpt = "nmt",
    weights: WeightsOpt = "default",
) -> None:
    """Translate sentences: one output line per input line, in order.

    Arguments, stdin or --input; greedy, beam search or sampling; one run or an ensemble."""
    from nmt.cli.output import translation_lines

    with user_errors():
        if text and input is not None:
            raise NmtError("give TEXT arguments or --input FILE, not both")
        at_least("--batch-size", batch_size)
        options = search_options(beam, nbest, length_penalty, sample, temperature, top_k, top_p, seed)
        refuse_same_file(output, "--output", [("--input", input)])
        lines = argument_texts(text) if text else input_lines(input)
        translator = load_translator(checkpoint, device, options, precision, kernels, engine, weights)
        write_output((line for chunk in _chunks(lines)
                       for line in translation_lines(translator, chunk, nbest, json_out, batch_size)), output)


@app.command(name="eval", epilog="Example: nmt eval --bleu --chrf --beam 5   or   "
                                 "nmt eval --src test.en --ref test.fr --ref test2.fr")
def eval_(
    run: Annotated[Optional[list[Path]], typer.Argument(
        metavar="[RUN]...", help="Run directory, the same as --checkpoint; several: an ensemble. \\[default: newest "
        "in checkpoints/]", show_default=False)] = None,
    bleu: Annotated[bool, Opt("--bleu", help="Corpus BLEU (the default metric).")] = False,
    chrf: Annotated[bool, Opt("--chrf", help="chrF2.")] = False,
    ter: Annotated[bool, Opt("--ter", help="TER.")] = False,
    checkpoint: CheckpointsOpt = None,
    src: Annotated[Optional[Path], Opt(help="Source file. \\[default: the run's test.tsv]")] = None,
    ref: Annotated[Optional[list[Path]], Opt(help="Reference file, aligned with --src; repeat for more. "
                                             "An empty line: no reference for that sentence.")] = None,
    all_refs: Annotated[bool, Opt("--all-refs", help="Score each test source of the run against all "
                                  "its translations, not only the first.")] = False,
    beam: BeamOpt = 1,
    length_penalty: PenaltyOpt = DEFAULT_LENGTH_PENALTY,
    hyp_out: Annotated[Optional[Path], Opt(help="Also write the hypotheses to this file.")] = None,
    json_out: Annotated[bool, Opt("--json", help="Print one JSON object instead of a table.")] = False,
    batch_size: BatchOpt = DEFAULT_BATCH,
    device: DeviceOpt = "auto",
    precision: PrecisionOpt = "auto",
    kernels: KernelsOpt = "fast",
    engine: EngineOpt = "nmt",
    weights: WeightsOpt = "default",
) -> None:
    """Score a run with sacrebleu: BLEU, chrF, TER.

    Detokenised output against raw references: the run's own test split, or --src and --ref."""
    from nmt.cli.output import score_json, score_table
    from nmt.inference.evaluate import evaluate, file_test_set, run_test_set
    from nmt.inference.loading import latest_run

    with user_errors():
        if (src is None) != (not ref):
            raise NmtError("--src and --ref go together")
        if all_refs and src is not None:
            raise NmtError("--all-refs is for a run's own test split; with --src, pass each --ref")
        at_least("--batch-size", batch_size)
        check_engine(engine)
        runs = [*(run or []), *(checkpoint or [])] or [latest_run() if engine == "nmt" else None]
        first = runs[0]
        if engine == "nmt":
            test_run = first  # an ensemble is scored on its first run's test split
        else:  # scored on the test split of the run it was exported from
            test_run = open_export(first).run
            if src is None and not (test_run / "test.tsv").is_file():
                raise NmtError(f"{first} was exported from {test_run}, which has no test.tsv now; "
                               "give --src and --ref")
        if hyp_out is not None:
            refuse_same_file(hyp_out, "--hyp-out", [("--src", src), *(("--ref", r) for r in ref or []),
                                                    *run_inputs(test_run)])
        test = file_test_set(src, ref) if src is not None else run_test_set(test_run, all_refs)
        metrics = [m for m, on in (("bleu", bleu), ("chrf", chrf), ("ter", ter)) if on] or ["bleu"]
        translator = load_translator(runs, device, search_options(beam, None, length_penalty), precision, kernels,
                                     engine, weights)
        hyps, scores = evaluate(translator, test, metrics, batch_size)
        if hyp_out is not None:
            write_output(hyps, hyp_out, "--hyp-out")
        info = {"run": ", ".join(map(str, runs)), "engine": engine, "weights": weights, "test_set": test.name, "sentences": len(test.sources),
                "references": len(test.refs), "beam": beam, "precision": translator.precision,
                "length_penalty": length_penalty if beam > 1 else None}
        print_out(score_json(info, scores) if json_out else score_table(info, scores))


compare_command.register(app)
prepare_command.register(app)
export_command.register(app)
tool_commands.register(app)
serve_command.register(app)
demo_command.register(app)


def _reflow_help(commands: list) -> None:
    """Each command's help is its docstring with the lines of each paragraph joined: the
    terminal wraps them, where Typer would keep the source's line breaks mid-sentence."""
    for command in commands:
        if command.help is None and command.callback.__doc__:
            paragraphs = inspect.cleandoc(command.callback.__doc__).split("\n\n")
            command.help = "\n\n".join(" ".join(p.split()) for p in paragraphs)


_reflow_help(app.registered_commands)


def main() -> None:
    """Console-script entry point."""
    app()
