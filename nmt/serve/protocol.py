"""The HTTP/1.1 connection: uvicorn's h11 protocol (the one uvicorn picks without httptools),
with the bounds it lacks and with its refusals in JSON like the application's.

uvicorn's own settings do not bound a slow client. ``timeout_keep_alive`` runs only after an
answer and any byte cancels it, so a connection that never completes its request line and
headers stays open. ``limit_concurrency`` answers 503 once a request's headers are in and
closes nothing. Hence :class:`Protocol`.
"""
from __future__ import annotations

import asyncio
import json
import sys
from http import HTTPStatus
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from nmt.serve.config import ServeConfig

REASON_CHARS = 200  # how much of h11's reason a refusal quotes


class Protocol(H11Protocol):
    """uvicorn's h11 protocol, bounded: at most ``max_connections`` connections are open (one
    more is answered 503 and closed at once), and a request's line and headers must arrive
    within ``read_timeout_s`` of the connection or of the previous answer (408, then the
    connection closes; an idle one just closes). The body's own deadline is the application's
    (:class:`nmt.serve.middleware.BodyLimit`). A request that is not valid HTTP/1.1 gets its
    refusal as JSON instead of uvicorn's plain text."""

    read_timeout_s: float = ServeConfig.read_timeout_s
    max_connections: int = ServeConfig.max_connections

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._headers_due: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            self._refuse(503, f"the service has its limit of {self.max_connections} open connections; retry "
                              f"later", retry=True)
        else:
            self._expect_headers()

    def connection_lost(self, exc: Exception | None) -> None:
        self._headers_arrived()
        super().connection_lost(exc)

    def handle_events(self) -> None:
        super().handle_events()
        if self.cycle is not None and not self.cycle.response_complete:
            self._headers_arrived()  # a request is in: the application times its body

    def on_response_complete(self) -> None:
        self._expect_headers()  # first: super() may read a pipelined request, which stops the clock
        super().on_response_complete()

    def send_400_response(self, msg: str) -> None:
        # uvicorn calls this inside its `except h11.RemoteProtocolError`, which drops the error:
        # it is the exception being handled, and it says what was wrong and with what status
        error = sys.exception()
        status, reason = 400, msg
        if isinstance(error, h11.ProtocolError):
            status, reason = error.error_status_hint, str(error)
        if len(reason) > REASON_CHARS:  # h11 quotes the bad line, which may be 16 KiB long
            reason = reason[:REASON_CHARS] + "..."
        self._refuse(status, f"not a valid HTTP/1.1 request: {reason}")

    def _expect_headers(self) -> None:
        self._headers_arrived()
        if not self.transport.is_closing():
            self._headers_due = self.loop.call_later(self.read_timeout_s, self._headers_late)

    def _headers_arrived(self) -> None:
        if self._headers_due is not None:
            self._headers_due.cancel()
            self._headers_due = None

    def _headers_late(self) -> None:
        self._headers_due = None
        if self.transport.is_closing():
            return
        if self.conn.trailing_data[0]:  # part of a request came
            self._refuse(408, f"the request line and headers did not arrive within {self.read_timeout_s:g} s")
        else:
            self.transport.close()

    def _refuse(self, status: int, error: str, retry: bool = False) -> None:
        """Answer ``{"error": error}`` and close. Written directly: h11 sends no answer to a
        request it has not parsed."""
        body = json.dumps({"error": error}).encode()
        headers = {"content-type": "application/json", "content-length": len(body), "connection": "close"}
        if retry:
            headers["retry-after"] = 1
        lines = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}", *(f"{k}: {v}" for k, v in headers.items())]
        self.transport.write("\r\n".join(lines + ["", ""]).encode("ascii") + body)
        self.transport.close()


def protocol(config: ServeConfig) -> type[Protocol]:
    """:class:`Protocol` with ``config``'s read timeout and connection limit."""
    return type("Protocol", (Protocol,), {"read_timeout_s": config.read_timeout_s,
                                          "max_connections": config.max_connections})
