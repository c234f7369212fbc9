"""``nmt serve`` against hostile clients, over real HTTP (uvicorn on a loopback port, raw
sockets where a well-behaved client library would not misbehave): clients that leave while
their requests wait, requests that never finish arriving, more connections than the limit,
bodies not sent as JSON, HEAD, requests that are not HTTP, and /info beyond loopback."""
import http.client
import json
import socket
import threading
import time
from collections import Counter
from urllib.parse import urlsplit

import pytest
from test_serve import call, models, service  # noqa: F401 (models: the fixture)

pytestmark = pytest.mark.slow  # end to end: see setup.cfg's markers

HOST = b"Host: localhost\r\n"


class Slow:
    """``model``, each decoding taking ``seconds`` more: a heavy request, with a tiny model."""

    def __init__(self, model, seconds):
        self.model, self.seconds, self.calls = model, seconds, Counter()

    def __getattr__(self, name):
        return getattr(self.model, name)

    def translate(self, *args, **kwargs):
        self.calls["translate"] += 1
        time.sleep(self.seconds)
        return self.model.translate(*args, **kwargs)

    def attention(self, *args, **kwargs):
        self.calls["attention"] += 1
        time.sleep(self.seconds)
        return self.model.attention(*args, **kwargs)


def test_attention_requests_hold_at_most_half_the_queue_so_translations_get_through(models):
    slow = Slow(models["gru"], seconds=0.5)
    text = "Tom sees the cat."  # 17 characters: 8 x 17 = 136 of work a call
    with service(slow, max_queue_chars=1000, timeout_s=30) as base:
        statuses = []
        clients = [threading.Thread(target=lambda: statuses.append(call(base, "/attention", {"text": text})[0]))
                   for _ in range(8)]
        for client in clients:  # connected, waiting for their answers
            client.start()
        time.sleep(0.3)
        status, _ = call(base, "/translate", {"text": ["Tom sees the dog."]})
        for client in clients:
            client.join()
    # half the queue (500) holds 3 calls (408, the one on the worker included); the others are 503
    assert sorted(statuses) == [200] * 3 + [503] * 5
    assert status == 200  # behind the 3 calls ahead of it


def _connect(base):
    address = urlsplit(base)
    return socket.create_connection((address.hostname, address.port), timeout=10)


def _post(path, body):
    body = json.dumps(body).encode()
    return (f"POST {path} HTTP/1.1\r\n".encode() + HOST + b"Content-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)


def _reply(sock):
    """(status, headers, body) of what the service sends before it closes ``sock``; status 0:
    it closed without a word."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    sock.close()
    if not data:
        return 0, {}, b""
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers, body


def _raw(base, data):
    with _connect(base) as sock:
        sock.sendall(data)
        return _reply(sock)


def test_requests_whose_clients_left_are_not_decoded(models):
    slow = Slow(models["gru"], seconds=1)
    with service(slow) as base:
        requests = [_post("/attention", {"text": f"Tom sees the cat {i}."}) for i in range(3)]
        requests += [_post("/translate", {"text": ["Tom sees the dog."], "beam": beam}) for beam in (2, 3, 4)]
        clients = [_connect(base) for _ in requests]
        for client, request in zip(clients, requests):
            client.sendall(request)
        time.sleep(0.05)
        for client in clients:
            client.close()
        status, _ = call(base, "/translate", {"text": ["Mary likes the big dog."]})
        _, info = call(base, "/info")
    # of the six abandoned, only the one the worker had already started may be decoded
    assert status == 200
    assert sum(slow.calls.values()) <= 2 and info["lines waiting"] == 0, slow.calls


def test_slow_requests_are_cut_off_and_the_service_goes_on(models):
    with service(models["gru"], read_timeout_s=1) as base:
        partial = [_connect(base) for _ in range(3)]
        for sock in partial:
            sock.sendall(b"POST /translate HTTP/1.1\r\n" + HOST + b"Content-Le")
        short = [_connect(base) for _ in range(3)]
        for sock in short:
            sock.sendall(b"POST /translate HTTP/1.1\r\n" + HOST + b"Content-Type: application/json\r\n"
                         b"Content-Length: 60000\r\n\r\n" + b" " * 110)
        idle = [_connect(base) for _ in range(2)]
        start = time.monotonic()
        assert call(base, "/translate", {"text": ["Tom."]})[0] == 200  # meanwhile
        replies = [_reply(sock) for sock in partial + short + idle]
        elapsed = time.monotonic() - start
        assert call(base, "/health") == (200, {"status": "ok"})
    assert elapsed < 8, elapsed  # cut off at its 1 s read timeout, on a busy machine too, not the default 10 s
    for status, headers, body in replies[:3]:
        assert (status, headers["content-type"], json.loads(body)) == (
            408, "application/json", {"error": "the request line and headers did not arrive within 1 s"})
    for status, headers, body in replies[3:6]:
        assert (status, headers["connection"], json.loads(body)) == (
            408, "close", {"error": "the request body did not arrive within 1 s"})
    assert [status for status, _, _ in replies[6:]] == [0, 0]  # idle: closed without a word


def test_connections_past_the_limit_are_refused_at_once(models):
    with service(models["gru"], max_connections=3, read_timeout_s=1) as base:
        held = [_connect(base) for _ in range(3)]
        status, headers, body = _reply(_connect(base))
        assert (status, headers["retry-after"], json.loads(body)) == (
            503, "1", {"error": "the service has its limit of 3 open connections; retry later"})
        assert [_reply(sock)[0] for sock in held] == [0, 0, 0]  # closed after the read timeout
        assert call(base, "/health") == (200, {"status": "ok"})


@pytest.mark.parametrize("content_type", ["application/x-www-form-urlencoded", "text/plain", None])
def test_a_body_not_declared_as_json_is_415(models, content_type):
    with service(models["gru"]) as base:
        connection = http.client.HTTPConnection(urlsplit(base).netloc, timeout=10)
        headers = {"Content-Type": content_type} if content_type else {}
        connection.request("POST", "/translate", b'{"text": ["Hi."]}', headers)  # http.client adds no type
        response = connection.getresponse()
        status, answer = response.status, json.loads(response.read())
        connection.request("POST", "/translate", b'{"text": ["Hi."]}',
                           {"Content-Type": "application/json; charset=utf-8"})  # the same connection goes on
        assert connection.getresponse().status == 200
    assert status == 415 and set(answer) == {"error"}
    assert "Content-Type: application/json" in answer["error"]
    assert answer["error"].endswith(f"this request has Content-Type {content_type!r}" if content_type else
                                    "this request has none")


def test_head_answers_every_get_route_without_a_body(models):
    with service(models["gru"]) as base:
        connection = http.client.HTTPConnection(urlsplit(base).netloc, timeout=10)
        for path in ("/", "/health", "/info", "/openapi.json"):
            connection.request("GET", path)
            get = connection.getresponse()
            length, kind = get.headers["content-length"], get.headers["content-type"]
            assert get.status == 200 and len(get.read()) == int(length)
            connection.request("HEAD", path)
            head = connection.getresponse()
            assert (head.status, head.headers["content-length"], head.headers["content-type"], head.read()) == (
                200, length, kind, b""), path
        connection.request("HEAD", "/translate")
        assert connection.getresponse().status == 405  # as GET


NOT_HTTP = [  # request, status, what the error says
    (b"GARBAGE\r\n\r\n", 400, "illegal request line: bytearray(b'GARBAGE')"),
    (b"GET /health HTTP/1.1\r\n" + HOST + HOST + b"\r\n", 400, "Found multiple Host: headers"),
    (b"POST /translate HTTP/1.1\r\n" + HOST + b"Content-Length: 1x\r\n\r\n", 400, "bad Content-Length"),
    # h11 judges the size of headers still incomplete (16 KiB): whole, these would pass
    (b"GET /health HTTP/1.1\r\n" + HOST + b"X: " + b"a" * 20_000, 431, "Receive buffer too long"),
    (b"GET /health HTTP/1.1\r\n" + HOST + b"X" * 2_000 + b"\r\n\r\n", 400, "illegal header line"),
]


def test_requests_that_are_not_http_get_json_refusals(models):
    with service(models["gru"]) as base:
        for request, status, message in NOT_HTTP:
            got, headers, body = _raw(base, request)
            assert (got, headers["content-type"], headers["connection"]) == (status, "application/json", "close")
            error = json.loads(body)["error"]  # h11's reason, which may quote the line
            assert b"\n" not in body and error.startswith(f"not a valid HTTP/1.1 request: {message}"), body
            assert len(error) < 300  # not the whole line quoted
        assert call(base, "/health") == (200, {"status": "ok"})


def test_info_beyond_loopback_leaves_out_paths_and_versions(models, tiny_run):
    model = models["gru"]
    cards = {}
    for host, expose in (("127.0.0.1", False), ("0.0.0.0", False), ("0.0.0.0", True)):
        with service(model, host=host, expose_paths=expose) as base:
            cards[host, expose] = call(base, "/info")[1]["model"]
    hidden = {"run", "corpus", "validation set", "test set", "versions"}
    assert hidden <= set(cards["127.0.0.1", False]) and cards["0.0.0.0", True] == cards["127.0.0.1", False]
    public = cards["0.0.0.0", False]
    assert not hidden & set(public) and public["architecture"] == cards["127.0.0.1", False]["architecture"]
    assert str(tiny_run) not in json.dumps(public)
