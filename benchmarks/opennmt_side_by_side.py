"""Side-by-side with OpenNMT-py 3.5.1 at the reference sizes (issue 5's GRU, issue 19's
Transformer), on nmt's own split and pieces.

OpenNMT-py gets exactly what an nmt run saw: the same training / validation / test split
(from ``nmt.data.prepare``) and the run's own 8,000-piece SentencePiece model, applied by
OpenNMT-py's ``sentencepiece`` transform (raw text in, detokenised text out, as for nmt).

Install it beside nmt (it runs on torch 2.13 although its metadata asks for older)::

    python -m venv --system-site-packages /tmp/onmt-venv
    /tmp/onmt-venv/bin/pip install --no-deps OpenNMT-py==3.5.1
    /tmp/onmt-venv/bin/pip install configargparse pyonmttok pyyaml sacrebleu \
        spacy pyahocorasick rapidfuzz fasttext-wheel waitress   # imported by its transforms

Steps (ONMT=/tmp/onmt-venv/bin; RUN is an nmt run with an 8,000-piece vocabulary)::

    python benchmarks/opennmt_side_by_side.py prepare RUN WORK [--arch transformer] [--shared-vocab]
    python benchmarks/opennmt_side_by_side.py throughput WORK      # 45 steps (--steps), sent/s, peak RSS
    python benchmarks/opennmt_side_by_side.py train WORK --minutes 20   # BLEU run, saved often
    $ONMT/python benchmarks/opennmt_side_by_side.py translate WORK [--precision int8]  # speed, BLEU
    $ONMT/python benchmarks/opennmt_side_by_side.py interleaved WORK RUN  # both tools, one process
    $ONMT/python benchmarks/opennmt_side_by_side.py alternating WORK RUN  # each in its own processes

Vocabularies: by default each side gets its own, of the pieces its training text uses
(OpenNMT-py's own default, ``share_vocab: false``), as nmt's rows are: the generators then
score the same ~5,650 target pieces and both models have the same parameters (8.09 million at
the Transformer reference size). ``--shared-vocab`` gives OpenNMT-py one vocabulary of every
piece of both sides; its generator then scores ~8,050 pieces (9.64 million parameters), more
work than nmt's, so its figures are not like for like.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

ONMT_BIN = Path("/tmp/onmt-venv/bin")
SHARED_MARKER = "shared-vocab"  # in WORK: prepare was given --shared-vocab
TRANSFORMER_MARKER = "arch-transformer"  # in WORK: prepare was given --arch transformer

GRU = {  # issue 5's reference size in OpenNMT-py's terms (brnn = 128 units per direction)
    "encoder_type": "brnn", "decoder_type": "rnn", "rnn_type": "GRU", "global_attention": "mlp",
    "layers": 2, "hidden_size": 256, "word_vec_size": 256, "dropout": 0.2,
    "optim": "adam", "learning_rate": 0.001,
}
TRANSFORMER = {  # issue 19's "transformer reference size", its OpenNMT-py settings
    "encoder_type": "transformer", "decoder_type": "transformer", "position_encoding": True,
    "layers": 3, "hidden_size": 256, "word_vec_size": 256, "transformer_ff": 1024, "heads": 4,
    "dropout": 0.1, "share_decoder_embeddings": True,
    "optim": "adam", "decay_method": "noam", "warmup_steps": 1000, "learning_rate": 2, "adam_beta2": 0.998,
}


def model_options(work: Path) -> dict:
    """The reference size of the architecture ``prepare`` recorded for WORK."""
    return (TRANSFORMER if (work / TRANSFORMER_MARKER).exists() else GRU) | {
        "batch_size": 128, "batch_type": "sents", "valid_batch_size": 128,
        "label_smoothing": 0.1,
        "seed": 1, "num_workers": 0, "report_every": 50, "valid_steps": 10**9,
        "train_steps": 10**6, "save_model": str(work / "model"), "save_checkpoint_steps": 100,
        "keep_checkpoint": 2,
    }


def vocab_options(work: Path) -> dict:
    """Shared (one vocabulary from both sides) or separate source and target vocabularies,
    as ``prepare`` recorded for WORK."""
    if (work / SHARED_MARKER).exists():
        return {"src_vocab": str(work / "vocab.txt"), "share_vocab": True}
    return {"src_vocab": str(work / "vocab.src"), "tgt_vocab": str(work / "vocab.tgt"),
            "share_vocab": False}


def write_config(work: Path, **overrides: object) -> Path:
    import yaml

    cfg = {
        "save_data": str(work / "onmt"), **vocab_options(work),
        "src_subword_model": str(work / "spm.model"), "tgt_subword_model": str(work / "spm.model"),
        "data": {
            "corpus_1": {"path_src": str(work / "train.en"), "path_tgt": str(work / "train.fr"),
                         "transforms": ["sentencepiece"]},
            "valid": {"path_src": str(work / "valid.en"), "path_tgt": str(work / "valid.fr"),
                      "transforms": ["sentencepiece"]},
        },
    } | model_options(work) | overrides
    path = work / ("config.yaml" if not overrides else "config-override.yaml")
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def prepare(run: Path, work: Path, shared_vocab: bool = False, arch: str = "gru") -> None:
    from nmt.config import read_run_config
    from nmt.data.split import split_by_source
    from nmt.data.sources import read_corpus
    from nmt.inference.evaluate import run_test_set
    from nmt.tools.bench import pick_sources

    cfg = read_run_config(run / "config.yaml")
    pairs, _ = read_corpus(cfg.data)
    split = split_by_source(pairs, cfg.data.valid_size, cfg.data.test_size)
    work.mkdir(parents=True, exist_ok=True)
    for name, part in (("train", split.train), ("valid", split.valid)):
        for side, lang in ((0, "en"), (1, "fr")):
            (work / f"{name}.{lang}").write_text("".join(p[side] + "\n" for p in part))
    test = run_test_set(run)  # as `nmt eval`: each test source once, its first translation
    (work / "test.en").write_text("".join(s + "\n" for s in test.sources))
    (work / "test.fr").write_text("".join(r + "\n" for r in test.refs[0]))
    (work / "bench.en").write_text("".join(s + "\n" for s in pick_sources(test.sources, 2000)))
    shutil.copy(run / "spm.model", work / "spm.model")
    (work / SHARED_MARKER).unlink(missing_ok=True)
    if shared_vocab:
        (work / SHARED_MARKER).touch()
    (work / TRANSFORMER_MARKER).unlink(missing_ok=True)
    if arch == "transformer":
        (work / TRANSFORMER_MARKER).touch()
    config = write_config(work)
    subprocess.run([ONMT_BIN / "onmt_build_vocab", "-config", config, "-n_sample", "-1"], check=True)
    print(f"{work}: {len(split.train)} train, {len(split.valid)} valid pairs, {len(test.sources)} test sources")


def _steps_and_seconds(log: str) -> list[tuple[int, float, str]]:
    """(step, log timestamp in seconds, line) of each OpenNMT-py progress report."""
    from datetime import datetime

    found = []
    for line in log.splitlines():
        m = re.search(r"\[(\S+ \S+) INFO\] Step\s+(\d+)/", line)  # "Step  5/": padded
        if m:
            stamp = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            found.append((int(m.group(2)), stamp, line))
    return found


def throughput(work: Path, steps: int = 45, warmup: int = 5) -> None:
    """Train ``steps`` steps from scratch; time steps warmup..steps from OpenNMT-py's own log."""
    log = work / "throughput.log"
    log.unlink(missing_ok=True)
    config = write_config(work, train_steps=steps, report_every=warmup, save_checkpoint_steps=10**9,
                          save_model=str(work / "throughput-model"))
    start = time.perf_counter()
    with log.open("w") as out:
        subprocess.run([ONMT_BIN / "onmt_train", "-config", config], check=True, stdout=out,
                       stderr=subprocess.STDOUT)
    wall = time.perf_counter() - start
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    reports = _steps_and_seconds(log.read_text())
    (s0, t0, _), (s1, t1, last) = reports[0], reports[-1]
    result = {"steps_timed": s1 - s0, "seconds": t1 - t0, "sentences_per_s": round((s1 - s0) * 128 / (t1 - t0), 1),
              "last_report": last.strip(), "peak_rss_mb": round(peak_mb, 1), "wall_s": round(wall, 1)}
    n_params = re.search(r"number of parameters: (\d+)", log.read_text())
    result["parameters"] = int(n_params.group(1)) if n_params else None
    print(json.dumps(result, indent=2))


def train(work: Path, minutes: float) -> None:
    """Train for ``minutes`` of wall-clock, then stop; checkpoints land every 100 steps."""
    config = work / "config.yaml"
    log = (work / "train.out").open("w")
    proc = subprocess.Popen([ONMT_BIN / "onmt_train", "-config", config], stdout=log,
                            stderr=subprocess.STDOUT)
    try:
        proc.wait(timeout=minutes * 60)
    except subprocess.TimeoutExpired:
        proc.terminate()
        proc.wait()
    log.close()
    print(_steps_and_seconds((work / "train.out").read_text())[-1][2])


def _latest_checkpoint(work: Path) -> Path:
    return max(work.glob("model_step_*.pt"), key=lambda p: int(p.stem.rsplit("_", 1)[1]))


def _engine(work: Path, beam: int, precision: str):
    """OpenNMT-py's Python inference engine on WORK's latest checkpoint, raw text in and out.

    ``precision`` int8 passes OpenNMT-py's ``-precision int8``. In 3.5.1 that flag does nothing
    (``model_builder`` compares the string "int8" with ``torch.int8``), so the model is then
    quantized here with the call OpenNMT-py meant to make: ``quantize_dynamic(model,
    dtype=torch.qint8, inplace=True)``.
    """
    import torch

    # OpenNMT-py 3.5.1 pickles its options into checkpoints, which torch >= 2.6 refuses by
    # default; these are checkpoints this script just trained, so they are trusted.
    _load = torch.load
    torch.load = lambda *a, **k: _load(*a, **(k | {"weights_only": False}))
    from onmt.inference_engine import InferenceEnginePY
    from onmt.opts import translate_opts
    from onmt.utils.parse import ArgumentParser

    parser = ArgumentParser()
    translate_opts(parser)
    opt = parser.parse_args(["-model", str(_latest_checkpoint(work)), "-src", "dummy", "-output", "/dev/null",
                             "-beam_size", str(beam), "-batch_size", "128", "-batch_type", "sents",
                             "-gpu", "-1", "-precision", precision, "-transforms", "sentencepiece",
                             "-src_subword_model", str(work / "spm.model"),
                             "-tgt_subword_model", str(work / "spm.model")])
    ArgumentParser.validate_translate_opts(opt)
    ArgumentParser._get_all_transform_translate(opt)
    ArgumentParser._validate_transforms_opts(opt)
    ArgumentParser.validate_translate_opts_dynamic(opt)
    engine = InferenceEnginePY(opt)
    if precision == "int8":
        torch.ao.quantization.quantize_dynamic(engine.translator.model, dtype=torch.qint8, inplace=True)
    return engine


def translate(work: Path, precision: str = "fp32") -> None:
    """Greedy and beam-5 throughput on bench.en (model load excluded), then BLEU on the test split
    with its 95% interval (sacreBLEU's bootstrap, as nmt eval's); the test hypotheses are kept."""
    import sacrebleu

    bench = (work / "bench.en").read_text().splitlines()
    test_src = (work / "test.en").read_text().splitlines()
    refs = (work / "test.fr").read_text().splitlines()
    results = {"checkpoint": _latest_checkpoint(work).name, "precision": precision}
    for name, beam in (("greedy", 1), ("beam 5", 5)):
        engine = _engine(work, beam, precision)
        engine.infer_list(bench[:128])  # warm-up, as nmt bench does
        start = time.perf_counter()
        _, preds = engine.infer_list(bench)
        seconds = time.perf_counter() - start
        _, test_preds = engine.infer_list(test_src)
        hyps = [p[0] for p in test_preds]
        # kept for nmt compare RUN THIS_FILE --src test.en --ref test.fr (a p-value against nmt)
        (work / f"test-{precision}-{name.replace(' ', '')}.fr").write_text("".join(h + "\n" for h in hyps))
        bleu = sacrebleu.metrics.BLEU().corpus_score(hyps, [refs], n_bootstrap=1000)
        results[name] = {"sentences_per_s": round(len(bench) / seconds, 1), "seconds": round(seconds, 2),
                         "test_bleu": round(bleu.score, 2), "test_bleu_ci95": round(bleu._ci, 2), "bleu": str(bleu)}
        print(json.dumps({name: results[name]}), flush=True)
    (work / f"translate-{precision}.json").write_text(json.dumps(results, indent=2) + "\n")


def _nmt_model(run: Path, precision: str):
    """nmt's model for decoding on CPU at ``precision``, with ``nmt translate``'s CPU settings:
    (model, tokenizer, the precision resolved)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import torch

    from nmt.inference.quantize import load_for_decoding
    from nmt.runtime.devices import configure_cpu

    configure_cpu(0)
    return load_for_decoding(run, precision, torch.device("cpu"))


def _nmt_search(model, tokenizer, precision: str, beam: int, batch_size: int):
    """nmt's search as ``nmt translate`` runs it, raw lines in, detokenised lines out. Length
    penalty 0, OpenNMT-py's default, so both tools search for the same 1-best."""
    import torch

    from nmt.inference.settings import SearchOptions
    from nmt.inference.translate import Translator

    translator = Translator(model, tokenizer, torch.device("cpu"), SearchOptions(beam, 1, 0.0), precision=precision)
    return lambda lines: translator.translate(lines, batch_size)


def interleaved(work: Path, run: Path, rounds: int, precision: str = "fp32", batch_size: int = 128,
                nmt_precision: str | None = None) -> None:
    """Both tools in one process, translating bench.en in turns (order alternating by round),
    so the machine's fast and slow spells hit both alike; prints each turn's sentences/s and
    the ratio of the totals. nmt runs as ``nmt translate`` would (its CPU settings, two
    decoding workers, ``batch_size`` sentences a batch: 128, ``nmt translate``'s default and
    OpenNMT-py's here) at ``nmt_precision`` (default: ``precision``; bf16 where the CPU
    has it, which OpenNMT-py 3.5.1 cannot use on CPU); OpenNMT-py as in ``translate``."""
    bench = (work / "bench.en").read_text().splitlines()
    model, tokenizer, nmt_precision = _nmt_model(run, nmt_precision or precision)
    results = {"run": str(run), "onmt_checkpoint": _latest_checkpoint(work).name, "precision": precision,
               "nmt_precision": nmt_precision}
    for name, beam in (("greedy", 1), ("beam 5", 5)):
        tools = {"nmt": _nmt_search(model, tokenizer, nmt_precision, beam, batch_size),
                 "opennmt-py": _engine(work, beam, precision).infer_list}
        seconds = {tool: [] for tool in tools}
        for turn in range(rounds + 1):  # turn 0 warms both up
            for tool in (tools if turn % 2 else reversed(list(tools))):
                start = time.perf_counter()
                tools[tool](bench if turn else bench[:128])
                if turn:
                    seconds[tool].append(time.perf_counter() - start)
        rates = {tool: [round(len(bench) / s, 1) for s in times] for tool, times in seconds.items()}
        ratio = sum(seconds["opennmt-py"]) / sum(seconds["nmt"])
        results[name] = {"sentences_per_s": rates, "nmt_over_opennmt": round(ratio, 2)}
        print(json.dumps({name: results[name]}), flush=True)
    (work / f"interleaved-{precision}-nmt-{nmt_precision}.json").write_text(json.dumps(results, indent=2) + "\n")


def alternating(work: Path, run: Path, rounds: int, batch_size: int, nmt_precision: str,
                tcmalloc: bool) -> None:
    """Each tool in processes of its own, taking turns: per search and round, one process per
    tool (order alternating by round) loads its model, warms up on 128 sources and times
    bench.en once. ``interleaved`` shares one process, so its heap and kernel caches, between
    the tools; this runs each as its users would. Both on glibc's malloc, or both with tcmalloc
    preloaded (``tcmalloc``, as the ``nmt`` command does where it is installed)."""
    from nmt.runtime.allocator import preload_environment

    env = preload_environment(os.environ) if tcmalloc else None  # None: this process's environment
    results = {"run": str(run), "nmt_precision": nmt_precision, "tcmalloc": tcmalloc}
    for name, beam in (("greedy", 1), ("beam 5", 5)):
        rates: dict[str, list[float]] = {"nmt": [], "opennmt-py": []}
        for turn in range(rounds):
            for tool in (rates if turn % 2 else reversed(list(rates))):
                command = [sys.executable, __file__, "one", tool, str(work), str(run), "--beam", str(beam),
                           "--nmt-batch", str(batch_size), "--nmt-precision", nmt_precision]
                out = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
                rates[tool].append(json.loads(out.strip().splitlines()[-1])["sentences_per_s"])
        ratio = sum(1 / r for r in rates["opennmt-py"]) / sum(1 / r for r in rates["nmt"])
        results[name] = {"sentences_per_s": rates, "nmt_over_opennmt": round(ratio, 2)}
        print(json.dumps({name: results[name]}), flush=True)
    suffix = "-tcmalloc" if tcmalloc else ""
    (work / f"alternating-nmt-{nmt_precision}{suffix}.json").write_text(json.dumps(results, indent=2) + "\n")


def one(tool: str, work: Path, run: Path, beam: int, batch_size: int, nmt_precision: str) -> None:
    """One of ``alternating``'s turns: ``tool`` translates bench.en once after a warm-up; prints
    its sentences/s."""
    bench = (work / "bench.en").read_text().splitlines()
    if tool == "nmt":
        translate = _nmt_search(*_nmt_model(run, nmt_precision), beam, batch_size)
    else:
        translate = _engine(work, beam, "fp32").infer_list
    translate(bench[:128])
    start = time.perf_counter()
    translate(bench)
    print(json.dumps({"tool": tool, "sentences_per_s": round(len(bench) / (time.perf_counter() - start), 1)}))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("prepare")
    a.add_argument("run", type=Path)
    a.add_argument("work", type=Path)
    a.add_argument("--shared-vocab", action="store_true",
                   help="one vocabulary of both sides' pieces (default: each side its own, as nmt)")
    a.add_argument("--arch", choices=("gru", "transformer"), default="gru")
    a = sub.add_parser("throughput")
    a.add_argument("work", type=Path)
    a.add_argument("--steps", type=int, default=45, help="steps, the first 5 untimed")
    a = sub.add_parser("translate")
    a.add_argument("work", type=Path)
    a.add_argument("--precision", choices=("fp32", "int8"), default="fp32")
    a = sub.add_parser("interleaved")
    a.add_argument("work", type=Path)
    a.add_argument("run", type=Path, help="the nmt run to translate with")
    a.add_argument("--rounds", type=int, default=4)
    a.add_argument("--precision", choices=("fp32", "int8"), default="fp32")
    a.add_argument("--nmt-batch", type=int, default=128, help="nmt's batch (OpenNMT-py decodes 128)")
    a.add_argument("--nmt-precision", choices=("fp32", "bf16", "int8"), help="nmt's (default: --precision)")
    a = sub.add_parser("alternating")
    a.add_argument("work", type=Path)
    a.add_argument("run", type=Path, help="the nmt run to translate with")
    a.add_argument("--rounds", type=int, default=3)
    a.add_argument("--nmt-batch", type=int, default=128, help="nmt's batch (OpenNMT-py decodes 128)")
    a.add_argument("--nmt-precision", choices=("auto", "fp32", "bf16", "int8"), default="auto")
    a.add_argument("--tcmalloc", action="store_true", help="both tools with tcmalloc preloaded")
    a = sub.add_parser("one")
    a.add_argument("tool", choices=("nmt", "opennmt-py"))
    a.add_argument("work", type=Path)
    a.add_argument("run", type=Path)
    a.add_argument("--beam", type=int, default=1)
    a.add_argument("--nmt-batch", type=int, default=128)
    a.add_argument("--nmt-precision", default="auto")
    a = sub.add_parser("train")
    a.add_argument("work", type=Path)
    a.add_argument("--minutes", type=float, default=20.0)
    args = p.parse_args()
    if args.cmd == "prepare":
        prepare(args.run, args.work, args.shared_vocab, args.arch)
    elif args.cmd == "throughput":
        throughput(args.work, args.steps)
    elif args.cmd == "train":
        train(args.work, args.minutes)
    elif args.cmd == "alternating":
        alternating(args.work, args.run, args.rounds, args.nmt_batch, args.nmt_precision, args.tcmalloc)
    elif args.cmd == "one":
        one(args.tool, args.work, args.run, args.beam, args.nmt_batch, args.nmt_precision)
    elif args.cmd == "interleaved":
        interleaved(args.work, args.run, args.rounds, args.precision, args.nmt_batch, args.nmt_precision)
    else:
        translate(args.work, args.precision)


if __name__ == "__main__":
    sys.exit(main())
