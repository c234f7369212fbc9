"""Running the application on uvicorn: bind first (a port in use is one clear error), then
serve until SIGINT or SIGTERM, which finish the requests in flight before the process exits;
and the precision a service decodes at."""
from __future__ import annotations

import signal
import socket
import sys

import uvicorn
from fastapi import FastAPI

from nmt.errors import NmtError
from nmt.serve.config import ServeConfig
from nmt.serve.protocol import protocol


def bind(config: ServeConfig) -> socket.socket:
    """A listening socket on ``config``'s host and port (port 0: one the system picks)."""
    try:
        info = socket.getaddrinfo(config.host, config.port, type=socket.SOCK_STREAM)[0]
    except OSError as e:
        raise NmtError(f"--host {config.host}: {e.strerror or e}") from None
    # proto IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY on accepted connections only then, and
    # without it each keep-alive request waited ~40 ms for a delayed ACK
    sock = socket.socket(info[0], socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(info[4])
    except OSError as e:
        sock.close()
        raise NmtError(f"--port {config.port}: cannot listen on {config.host}: {e.strerror or e}") from None
    sock.listen(2048)
    return sock


def url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"


def serving_precision(precision: str, device: str) -> str:
    """``precision`` as the service decodes: ``auto`` on a CPU is fp32, since a service's small
    batches decode faster in float32 than in bf16 there (the 20-minute Transformer: 1.5x the
    requests/s at 1 client, docs/serving.md); elsewhere, and any explicit choice, as given."""
    from nmt.inference.quantize import decoding_device

    if precision == "auto" and decoding_device(precision, device).type == "cpu":
        return "fp32"
    return precision


def uvicorn_config(app: FastAPI, config: ServeConfig, access_log: bool) -> uvicorn.Config:
    """uvicorn's settings for ``app``: nmt's HTTP/1.1 protocol (bounded, refusals in JSON), no
    WebSocket (the service has none, and an upgraded connection would leave the protocol's
    bounds), and a graceful shutdown as long as a request may take."""
    return uvicorn.Config(app, http=protocol(config), ws="none", log_config=None, access_log=access_log,
                          timeout_graceful_shutdown=config.timeout_s + 5, server_header=False)


def serve(app: FastAPI, config: ServeConfig, sock: socket.socket, access_log: bool) -> None:
    """Serve ``app`` on ``sock``, which the caller owns, until a signal. SIGTERM drains (uvicorn
    answers the requests in flight, each bounded by the request timeout) and then exits with
    status 0."""
    server = uvicorn.Server(uvicorn_config(app, config, access_log))
    # uvicorn re-raises the signal that stopped it once it has drained: make SIGTERM's a clean exit
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        server.run(sockets=[sock])
    finally:
        signal.signal(signal.SIGTERM, previous)
