"""``nmt serve`` over real HTTP (uvicorn on a loopback port): it translates as the Python API
does, on both architectures; requests that arrive together share a batch; every bad request
is a JSON refusal, never a traceback; SIGTERM answers the requests in flight, then exits."""
import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import replace

import pytest
import uvicorn
from conftest import ROOT, nmt

from nmt.api import NO_ATTENTION, ExportedModel, load
from nmt.inference.settings import Sampling
from nmt.serve.app import create_app
from nmt.serve.config import ServeConfig
from nmt.serve.server import bind, url, uvicorn_config
from nmt.tools.inspect import export_card, model_card

pytestmark = pytest.mark.slow  # end to end: see setup.cfg's markers

SENTENCES = ["Tom sees the cat.", "", "Mary likes the big dog today."]


@pytest.fixture(scope="module")
def models(tiny_run, transformer_run):
    return {"gru": load(tiny_run, precision="fp32"), "transformer": load(transformer_run, precision="fp32")}


@contextmanager
def service(model, host=None, **limits):
    """The application on uvicorn, as ``nmt serve`` runs it, in a thread of this process, on a
    free loopback port; ``host``: the application built as if it listened there."""
    config = ServeConfig(port=0, **limits)
    sock = bind(config)
    card = export_card(model.run, model.exported.manifest) if isinstance(model, ExportedModel) else model_card(model.run)
    app = create_app(model, config if host is None else replace(config, host=host), card)
    server = uvicorn.Server(uvicorn_config(app, config, access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        yield url(sock)
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


def call(base, path, body=None, raw=None):
    """(status, decoded JSON) of a GET, or of a POST of ``body`` as JSON or ``raw`` bytes."""
    data = raw if raw is not None else None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base + path.lstrip("/"), data=data,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.mark.parametrize("arch", ["gru", "transformer"])
def test_translations_are_the_apis(models, arch):
    model = models[arch]
    with service(model) as base:
        status, answer = call(base, "/translate", {"text": SENTENCES, "beam": 3, "nbest": 2})
    assert status == 200
    expected = model.translate(SENTENCES, beam=3, nbest=2)
    assert [[(h["text"], h["pieces"]) for h in hyps] for hyps in answer["translations"]] == \
        [[(t.text, list(t.pieces)) for t in hyps] for hyps in expected]
    assert [h["score"] for hyps in answer["translations"] for h in hyps] == \
        pytest.approx([t.score for hyps in expected for t in hyps], abs=1e-4)
    assert answer["translations"][1] == []  # the empty line


def test_an_export_is_served_by_ctranslate2_with_the_same_contract(transformer_run, tmp_path):
    """nmt serve --engine ctranslate2 EXPORT: /translate answers as load(EXPORT, engine=...)
    does, within the same limits; /attention says that this engine has none; /info names it."""
    pytest.importorskip("ctranslate2")
    assert nmt("export", transformer_run, "-o", tmp_path / "ct2").returncode == 0
    model = load(tmp_path / "ct2", precision="float32", engine="ctranslate2")
    with service(model, max_lines=3) as base:
        status, answer = call(base, "/translate", {"text": SENTENCES, "beam": 3, "nbest": 2})
        too_many = call(base, "/translate", {"text": SENTENCES + ["one more"]})
        attention = call(base, "/attention", {"text": SENTENCES[0]})
        sampled = call(base, "/translate", {"text": SENTENCES[:1], "sample": {"seed": 1}})
        info = call(base, "/info")[1]
    assert status == 200
    expected = model.translate(SENTENCES, beam=3, nbest=2)
    assert [[(h["text"], h["pieces"]) for h in hyps] for hyps in answer["translations"]] == \
        [[(t.text, list(t.pieces)) for t in hyps] for hyps in expected]
    assert too_many[0] == 422 and "at most 3" in too_many[1]["error"]
    assert attention == (422, {"error": NO_ATTENTION})
    assert sampled[0] == 422 and "sample" in sampled[1]["error"]
    assert info["attention kinds"] == [] and info["model"]["engine"].startswith("CTranslate2")
    assert info["model"]["exported from"] == str(transformer_run.resolve()) and info["precision"] == "float32"


def test_sampled_translations_are_the_apis_whoever_else_is_waiting(models):
    model, sample = models["transformer"], {"seed": 3, "top_p": 0.9}
    expected = model.translate(SENTENCES, nbest=2, sampling=Sampling(**sample))
    with service(model) as base:
        answers = []
        for _ in range(2):  # the second time beside a greedy request and another sampled one
            with ThreadPoolExecutor(3) as pool:
                calls = [pool.submit(call, base, "/translate", body) for body in (
                    {"text": SENTENCES, "nbest": 2, "sample": sample}, {"text": SENTENCES[::-1]},
                    {"text": SENTENCES[::-1], "nbest": 2, "sample": sample})]
                answers.append([c.result() for c in calls])
    for (status, answer), _, _ in answers:
        assert status == 200
        assert [[h["text"] for h in hyps] for hyps in answer["translations"]] == \
            [[t.text for t in hyps] for hyps in expected]


@pytest.mark.parametrize("arch", ["gru", "transformer"])
def test_attention_has_every_layer_and_head_of_the_chosen_translation(models, arch):
    model = models[arch]
    with service(model) as base:
        _, translated = call(base, "/translate", {"text": [SENTENCES[0]], "beam": 2, "nbest": 2})
        status, maps = call(base, "/attention", {"text": SENTENCES[0], "beam": 2, "rank": 2})
        kinds = {kind: call(base, "/attention", {"text": SENTENCES[0], "kind": kind})
                 for kind in ("encoder", "decoder")}
    assert status == 200
    second = translated["translations"][0][1]
    assert maps["translation"] == second["text"] and maps["score"] == pytest.approx(second["score"], abs=1e-4)
    assert maps["queries"][:len(second["pieces"])] == second["pieces"]
    assert maps["keys"][-1] == "</s>"
    sizes = model_card(model.run)["sizes"]
    assert (maps["layers"], maps["heads"]) == ((sizes["layers"], sizes["heads"]) if arch == "transformer" else (1, 1))
    for layer in maps["weights"]:
        for head in layer:
            assert len(head) == len(maps["queries"])
            assert all(len(row) == len(maps["keys"]) and sum(row) == pytest.approx(1, abs=2e-3) for row in head)
    if arch == "gru":
        assert all(status == 422 and "kind: Input should be 'cross'" in answer["error"] for status, answer in kinds.values())
    else:
        (status, encoder), (_, decoder) = kinds["encoder"], kinds["decoder"]
        assert status == 200 and encoder["queries"] == encoder["keys"]
        assert decoder["keys"][0] == "<s>" and len(decoder["keys"]) == len(decoder["queries"])


BAD = [  # body, status, what the error says
    (b'{"text": [', 400, "not valid JSON"),
    (b'["Tom."]', 422, "valid dictionary"),
    (b'{"text": "Tom."}', 422, "text: Input should be a valid list"),
    (b'{"text": [1]}', 422, "text.0: Input should be a valid string"),
    (b'{"text": []}', 422, "text: List should have at least 1 item"),
    (b'{"text": ["a", "b", "c"]}', 422, "at most 2 items"),
    (json.dumps({"text": ["x" * 101]}).encode(), 422, "at most 100 characters"),
    (b'{"text": ["a"], "beam": "5"}', 422, "beam: Input should be a valid integer"),
    (b'{"text": ["a"], "beam": 0}', 422, "beam: Input should be greater than or equal to 1"),
    (b'{"text": ["a"], "beam": 5}', 422, "beam: Input should be less than or equal to 4"),
    (b'{"text": ["a"], "beam": 2, "nbest": 3}', 422, "nbest 3: must be at most beam (2)"),
    (b'{"text": ["a"], "length_penalty": -1}', 422, "length_penalty -1.0: must be a finite number >= 0"),
    (b'{"text": ["a"], "beam": 2, "length_penalty": NaN}', 422, "length_penalty nan: must be a finite number >= 0"),
    (b'{"text": ["a"], "checkpoint": "/etc"}', 422, "checkpoint: Extra inputs are not permitted"),
    (b'{"text": ["a"], "beam": 2, "sample": {}}', 422, "beam 2: and sampling do not go together"),
    (b'{"text": ["a"], "sample": {"temperature": 0}}', 422, "temperature 0.0: must be a finite number > 0"),
    (b'{"text": ["a"], "sample": {"top_k": -1}}', 422, "sample.top_k: Input should be greater than or equal to 0"),
    (b'{"text": ["a"], "sample": {"heat": 2}}', 422, "sample.heat: Extra inputs are not permitted"),
    (b'{"text": ["a"], "sample": {}, "nbest": 5}', 422, "nbest: Input should be less than or equal to 4"),
    (b'{"text": ["' + b"a" * 3000 + b'"]}', 413, "over the service's limit of 2000 bytes"),
]


def test_bad_requests_get_json_refusals(models):
    with service(models["gru"], max_lines=2, max_chars=100, max_attention_chars=20, max_beam=4,
                 max_body_bytes=2000) as base:
        for body, status, message in BAD:
            got, answer = call(base, "/translate", raw=body)
            assert (got, set(answer)) == (status, {"error"}), body
            assert message in answer["error"] and "Traceback" not in answer["error"], answer
        assert call(base, "/attention", {"text": "Tom.", "beam": 2, "rank": 3})[0] == 422
        assert call(base, "/attention", {"text": ""})[0] == 422
        status, answer = call(base, "/attention", {"text": "x" * 21})  # /translate takes it: its own limit
        assert status == 422 and "text: String should have at most 20 characters" in answer["error"]
        assert call(base, "/nowhere") == (404, {"error": "Not Found"})
        assert call(base, "/translate")[0] == 405  # a GET
        assert call(base, "/health") == (200, {"status": "ok"})  # and it goes on serving
        rebound = urllib.request.Request(base + "info", headers={"Host": "attacker.example:8000"})
        with pytest.raises(urllib.error.HTTPError) as refused:  # a page elsewhere, by DNS rebinding
            urllib.request.urlopen(rebound)
        assert refused.value.code == 400 and "this machine only" in json.loads(refused.value.read())["error"]


def test_info_schema_and_a_self_contained_page(models):
    with service(models["transformer"], max_lines=7) as base:
        _, info = call(base, "/info")
        _, schema = call(base, "/openapi.json")
        with urllib.request.urlopen(base) as response:
            page, policy = response.read().decode(), response.headers["Content-Security-Policy"]
    assert info["model"]["architecture"].startswith("Transformer") and info["limits"]["max_lines"] == 7
    assert info["precision"] == "fp32" and info["device"] == "cpu"
    assert {"/translate", "/attention", "/health", "/info"} <= set(schema["paths"])
    assert schema["components"]["schemas"]["TranslateRequest"]["properties"]["text"]["maxItems"] == 7
    assert "<script>" in page and not re.search(r"(src|href)=|https?:|//[a-z]", page)  # nothing from outside
    assert "default-src 'none'" in policy and "connect-src 'self'" in policy


def test_requests_arriving_together_share_a_batch(models):
    model = models["gru"]
    lines = [f"Tom sees the {w}." for w in ("cat", "dog", "bird", "mouse")]
    asked = [(line, beam) for beam in (2, 1) for line in lines]
    answers = {}
    # A batch starts when 4 lines with its settings wait: two batches, whatever the timing.
    with service(model, max_batch_lines=4, batch_wait_ms=60_000) as base:
        def ask(line, beam):
            answers[line, beam] = call(base, "/translate", {"text": [line], "beam": beam})

        threads = [threading.Thread(target=ask, args=pair) for pair in asked]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        _, info = call(base, "/info")
    assert info["batches decoded"] == 2 and info["lines waiting"] == 0
    for beam in (2, 1):
        expected = [hyps[0].text for hyps in model.translate(lines, beam=beam)]
        assert [answers[line, beam][1]["translations"][0][0]["text"] for line in lines] == expected


def _until(base, lines_waiting):
    """Poll /info until ``lines_waiting`` lines wait (60 s at most)."""
    deadline = time.monotonic() + 60
    while call(base, "/info")[1]["lines waiting"] != lines_waiting:
        assert time.monotonic() < deadline, "the request never arrived"
        time.sleep(0.05)


def test_slow_or_queued_beyond_the_limits_is_503(models):
    with service(models["gru"], timeout_s=0.05, batch_wait_ms=300) as base:
        status, answer = call(base, "/translate", {"text": ["Tom sees the cat."]})
        assert status == 503 and "longer than the service's limit" in answer["error"]
    # Queued work is characters x beam (an /attention call's times 8). The first request waits
    # for a batch until its timeout.
    with service(models["gru"], max_queue_chars=100, batch_wait_ms=60_000, timeout_s=4) as base:
        first = threading.Thread(target=call, args=(base, "/translate", {"text": ["a" * 40]}))
        first.start()
        _until(base, 1)
        beam_4, answer = call(base, "/translate", {"text": ["b" * 20], "beam": 4})  # 40 + 80 > 100
        attention, _ = call(base, "/attention", {"text": "c" * 8})  # 40 + 8 x 8 > 100
        fits, _ = call(base, "/attention", {"text": "c" * 7})  # 40 + 8 x 7
        _, info = call(base, "/info")
        first.join()
    assert beam_4 == attention == 503 and fits == 200, answer
    assert "busy: 40 characters x beam are waiting, and this request's 80 would pass its limit of 100" in \
        answer["error"]
    assert info["queued work"] == 40 and info["lines waiting"] == 1
    with service(models["gru"], max_queue_chars=5) as base:  # alone, a request over the limit is taken
        assert call(base, "/translate", {"text": ["Tom sees the cat."], "beam": 2})[0] == 200


def test_only_loopback_addresses_are_private():
    assert all(ServeConfig(host=h).loopback for h in ("127.0.0.1", "localhost", "::1"))
    assert not any(ServeConfig(host=h).loopback for h in ("0.0.0.0", "::", "192.168.1.5"))
    with pytest.raises(Exception, match="--max-lines must be a finite number >= 1"):
        replace(ServeConfig(), max_lines=0)
    with pytest.raises(Exception, match="--timeout must be a finite number > 0"):
        replace(ServeConfig(), timeout_s=float("inf"))


def test_the_listening_socket_is_tcp_so_connections_get_nodelay():
    with bind(ServeConfig(port=0)) as sock:  # proto 0 cost each keep-alive request a 40 ms delayed ACK
        assert sock.proto == socket.IPPROTO_TCP


def test_a_port_in_use_or_a_bad_limit_is_one_clear_error(tiny_run):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = nmt("serve", "--checkpoint", tiny_run, "--port", str(port))
    assert result.returncode == 1 and f"--port {port}: cannot listen on 127.0.0.1" in result.stderr
    assert "Traceback" not in result.stderr
    result = nmt("serve", "--checkpoint", tiny_run, "--max-beam", "0")
    assert result.returncode == 1 and "--max-beam must be a finite number >= 1" in result.stderr
    result = nmt("serve", "--checkpoint", tiny_run, "--read-timeout", "0")
    assert result.returncode == 1 and "--read-timeout must be a finite number > 0" in result.stderr


def test_sigterm_answers_the_request_in_flight_then_exits(tiny_run):
    server = subprocess.Popen([sys.executable, str(ROOT / "cli.py"), "serve", "--checkpoint", str(tiny_run),
                               "--port", "0", "--batch-wait-ms", "3000"], cwd=ROOT, stderr=subprocess.PIPE,
                              text=True)
    try:
        base = _address(server)
        answer = []
        request = threading.Thread(target=lambda: answer.append(call(base, "/translate", {"text": ["Tom."]})))
        request.start()
        _until(base, 1)  # it waits 3 s for others to share its batch
        server.send_signal(signal.SIGTERM)
        request.join(timeout=60)
        assert server.wait(timeout=60) == 0
    finally:
        server.kill()
        log = server.stderr.read()
    assert answer and answer[0][0] == 200 and len(answer[0][1]["translations"]) == 1, log
    with pytest.raises(urllib.error.URLError):  # and it no longer listens
        call(base, "/health")


def _address(server):
    """The URL ``nmt serve`` prints once it listens."""
    for line in server.stderr:
        found = re.search(r"at (http://\S+/)", line)
        if found:
            return found.group(1)
    raise AssertionError(f"nmt serve exited with {server.wait()} before listening")
