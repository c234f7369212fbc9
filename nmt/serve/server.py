"""Running the application on uvicorn: bind first (a port in use is one clear error), then
serve until SIGINT or SIGTERM, which finish the requests in flight before the process exits."""
from __future__ import annotations

import logging
import signal
import socket
import sys
from collections.abc import Callable

import uvicorn
from fastapi import FastAPI

from nmt.errors import NmtError
from nmt.serve.config import ServeConfig

log = logging.getLogger(__name__)


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


def serve(app: FastAPI, config: ServeConfig, sock: socket.socket, access_log: bool,
          ready: Callable[[str], None]) -> None:
    """Serve ``app`` on ``sock`` until a signal; ``ready`` gets the address once it listens.
    SIGTERM drains (uvicorn answers the requests in flight, each bounded by the request
    timeout) and then exits with status 0."""
    server = uvicorn.Server(uvicorn.Config(
        app, log_config=None, access_log=access_log, timeout_graceful_shutdown=config.timeout_s + 5,
        server_header=False))
    # uvicorn re-raises the signal that stopped it once it has drained: make SIGTERM's a clean exit
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    ready(url(sock))
    try:
        server.run(sockets=[sock])
    finally:
        signal.signal(signal.SIGTERM, previous)
        sock.close()
