"""Load test of ``nmt serve``, against 127.0.0.1 only, bounded in requests and time.

    python benchmarks/serve_load.py --checkpoint checkpoints/RUN [--export EXPORT_DIR] [--requests 1000]
                                    [--clients 1,4,16]

Starts ``nmt serve`` on a free loopback port, sends ``--requests`` POST /translate requests of
one sentence each (the run's test sources, in turn) from 1, 4 and 16 concurrent clients
(16 twice; threads, each on its own keep-alive connection), and prints for each level: requests a
second, p50 and p99 latency, errors (anything but 200; must be 0) and the service's resident
memory before and after (it must stay flat). Then it stops the service and translates the same
sentences with ``nmt translate`` (one process, the file at once), for comparison: its
wall-clock time, start-up included, its decoding time alone (``nmt.api`` on the same lines),
and the decoding time in batches as large as the service's largest (one sentence from each
of the most clients). With ``--export`` (``nmt export RUN -o DIR``), all of it again for ``nmt serve
--engine ctranslate2 DIR``, side by side: the same run, the same sentences. On a 2-core machine the clients share the cores with the service, as a local load
generator does: the figures are the service's under that load, not a lone server's.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1)) / 1024


def _start(target: Path, engine: str, log: Path, extra: list[str]) -> tuple[subprocess.Popen, int]:
    server = subprocess.Popen([sys.executable, str(ROOT / "cli.py"), "serve", "--checkpoint", str(target),
                               "--engine", engine, "--port", "0", "--no-access-log", *extra], cwd=ROOT,
                              stdout=subprocess.DEVNULL, stderr=log.open("w"))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        found = re.search(r"at http://127\.0\.0\.1:(\d+)/", log.read_text())
        if found:
            return server, int(found.group(1))
        if server.poll() is not None:
            sys.exit(f"nmt serve exited with {server.returncode}:\n{log.read_text()}")
        time.sleep(0.2)
    server.kill()
    sys.exit("nmt serve did not start within 120 s")


def _client(port: int, sentences: list[str], next_index, latencies: list[float], errors: list[str],
            beam: int, deadline: float) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    while time.monotonic() < deadline:
        i = next_index()
        if i is None:
            break
        body = json.dumps({"text": [sentences[i % len(sentences)]], "beam": beam})
        start = time.perf_counter()
        try:
            connection.request("POST", "/translate", body, {"Content-Type": "application/json"})
            response = connection.getresponse()
            answer = response.read()
            if response.status != 200:
                errors.append(f"{response.status} {answer[:200]!r}")
        except (OSError, http.client.HTTPException) as e:
            errors.append(repr(e))
            connection.close()
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        latencies.append(time.perf_counter() - start)
    connection.close()


def _level(port: int, sentences: list[str], requests: int, clients: int, beam: int, max_seconds: float) -> dict:
    counter, lock = iter(range(requests)), threading.Lock()

    def next_index():
        with lock:
            return next(counter, None)

    latencies: list[float] = []
    errors: list[str] = []
    deadline = time.monotonic() + max_seconds
    threads = [threading.Thread(target=_client, args=(port, sentences, next_index, latencies, errors, beam,
                                                      deadline)) for _ in range(clients)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - start
    cuts = statistics.quantiles(latencies, n=100)
    return {"clients": clients, "requests": len(latencies), "seconds": round(wall, 2),
            "requests_per_s": round(len(latencies) / wall, 1), "p50_ms": round(cuts[49] * 1000, 1),
            "p99_ms": round(cuts[98] * 1000, 1), "errors": len(errors), "first_errors": errors[:3]}


def _batch_translate(target: Path, engine: str, sentences: list[str], beam: int, clients: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "src.txt"
        source.write_text("".join(s + "\n" for s in sentences), encoding="utf-8")
        start = time.perf_counter()
        subprocess.run([sys.executable, str(ROOT / "cli.py"), "translate", "--checkpoint", str(target), "--engine",
                        engine, "--beam", str(beam), "-i", str(source), "-o", str(Path(tmp) / "out.txt")],
                       check=True, cwd=ROOT)
        wall = time.perf_counter() - start
    sys.path.insert(0, str(ROOT))
    from nmt.api import load
    model = load(target, engine=engine)
    model.translate(sentences[:64], beam=beam)  # warm up
    start = time.perf_counter()
    model.translate(sentences, beam=beam)
    decode = time.perf_counter() - start
    start = time.perf_counter()  # the service's largest batch: one sentence from each client
    for i in range(0, len(sentences), clients):
        model.translate(sentences[i:i + clients], beam=beam)
    small = time.perf_counter() - start
    return {"sentences": len(sentences), "cli_seconds": round(wall, 2),
            "cli_sentences_per_s": round(len(sentences) / wall, 1), "decode_seconds": round(decode, 2),
            "decode_sentences_per_s": round(len(sentences) / decode, 1),
            f"batches_of_{clients}_sentences_per_s": round(len(sentences) / small, 1)}


def _engine(target: Path, engine: str, sentences: list[str], args: argparse.Namespace) -> dict:
    """Every load level against ``nmt serve`` of ``target`` on ``engine``, then the same
    sentences through ``nmt translate`` and the API."""
    with tempfile.TemporaryDirectory() as tmp:
        server, port = _start(target, engine, Path(tmp) / "serve.log", args.serve_args)
        try:
            _level(port, sentences, 20, 1, args.beam, 60)  # warm up: first calls allocate
            levels = []
            for clients in map(int, args.clients.split(",")):
                before = _rss_mb(server.pid)
                level = _level(port, sentences, args.requests, clients, args.beam, args.max_seconds)
                level |= {"engine": engine, "rss_before_mb": round(before), "rss_after_mb": round(_rss_mb(server.pid))}
                levels.append(level)
                print(json.dumps(level), flush=True)
        finally:
            server.terminate()
            server.wait(timeout=120)
    most = max(map(int, args.clients.split(",")))
    batch = _batch_translate(target, engine, sentences, args.beam, most)
    print(json.dumps({f"nmt translate --engine {engine}": batch}), flush=True)
    return {"levels": levels, "translate": batch, "most": most}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", type=Path, required=True, help="A run directory.")
    parser.add_argument("--export", type=Path, help="Its export (nmt export): served by CTranslate2 as well.")
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--clients", default="1,4,16,16", help="Levels; the last is repeated by default: "
                        "the first pass at 16 grows the allocator to 16-sentence batches, the repeat "
                        "shows whether memory keeps growing.")
    parser.add_argument("--beam", type=int, default=1)
    parser.add_argument("--max-seconds", type=float, default=300, help="Per level: stop sending after this.")
    parser.add_argument("--json-out", type=Path)
    parser.add_argument("serve_args", nargs="*", help="More nmt serve flags, after --.")
    args = parser.parse_args()
    sentences = [line.split("\t")[0] for line in
                 (args.checkpoint / "test.tsv").read_text(encoding="utf-8").splitlines()][:args.requests]
    results = {"nmt": _engine(args.checkpoint, "nmt", sentences, args)}
    if args.export is not None:
        results["ctranslate2"] = _engine(args.export, "ctranslate2", sentences, args)
    print("\n| engine | clients | requests/s | p50 ms | p99 ms | errors | RSS before → after |")
    print("|---|---|---|---|---|---|---|")
    for engine, result in results.items():
        for r in result["levels"]:
            print(f"| {engine} | {r['clients']} | {r['requests_per_s']} | {r['p50_ms']} | {r['p99_ms']} | {r['errors']} | "
                  f"{r['rss_before_mb']} → {r['rss_after_mb']} MB |")
    for engine, result in results.items():
        batch, most = result["translate"], result["most"]
        print(f"| {engine} | nmt translate (file) | {batch['cli_sentences_per_s']} sentences/s with start-up, "
              f"{batch['decode_sentences_per_s']} decoding alone, {batch[f'batches_of_{most}_sentences_per_s']} "
              f"in batches of {most} | | | | |")
    if args.json_out:
        args.json_out.write_text(json.dumps({**results, "cpu": os.cpu_count()}, indent=1))


if __name__ == "__main__":
    main()
