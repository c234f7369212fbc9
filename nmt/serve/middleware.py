"""ASGI middleware around the application: what is refused before a route sees a request (a
Host that is not this machine's, a body too large or too slow, a body that is not declared as
JSON), and HEAD answered as GET. Each refusal is one JSON object, ``{"error": "..."}``."""
from __future__ import annotations

import asyncio

from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from nmt.serve.config import names_this_machine


async def _refuse(scope: Scope, receive: Receive, send: Send, status: int, error: str,
                  close: bool = False) -> None:
    """Answer ``{"error": error}`` with ``status``; ``close``: and close the connection after it."""
    headers = {"Connection": "close"} if close else None
    await JSONResponse({"error": error}, status_code=status, headers=headers)(scope, receive, send)


class BodyLimit:
    """Reads a request's body before the application does, and refuses it with 413 when it is
    over ``limit`` bytes (declared or arrived), or with 408 when it has not all arrived within
    ``seconds`` of its headers. Either closes the connection: what is left of the body is not
    read. The body read is handed on."""

    def __init__(self, app: ASGIApp, limit: int, seconds: float) -> None:
        self.app, self.limit, self.seconds = app, limit, seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope["headers"]).get(b"content-length", b"0")
        if not declared.isdigit() or int(declared) > self.limit:
            return await self._too_large(scope, receive, send)
        try:
            body = await asyncio.wait_for(self._read(receive), self.seconds)
        except TimeoutError:
            return await _refuse(scope, receive, send, 408, f"the request body did not arrive within "
                                                            f"{self.seconds:g} s", close=True)
        if body is None:
            return  # the client went away
        if len(body) > self.limit:
            return await self._too_large(scope, receive, send)
        message: Message | None = {"type": "http.request", "body": body, "more_body": False}

        async def replay() -> Message:
            nonlocal message
            first, message = message, None
            return first if first is not None else await receive()

        await self.app(scope, replay, send)

    async def _read(self, receive: Receive) -> bytes | None:
        """The body, or as much as passes the limit; None if the client disconnects first."""
        chunks, size, more = [], 0, True
        while more and size <= self.limit:
            message = await receive()
            if message["type"] != "http.request":
                return None
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            more = message.get("more_body", False)
        return b"".join(chunks)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        await _refuse(scope, receive, send, 413, f"the request body is over the service's limit of {self.limit} "
                                                 f"bytes", close=True)


class JsonBodies:
    """Refuses a POST whose Content-Type is not application/json with 415. Parsing any body as
    JSON would let a web page make the service decode: a browser sends a form or text/plain
    POST to another origin without asking it first (no CORS preflight), application/json not."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            declared = dict(scope["headers"]).get(b"content-type", b"").decode("latin-1")
            if declared.split(";")[0].strip().lower() != "application/json":
                got = f"Content-Type {declared[:100]!r}" if declared else "none"
                return await _refuse(scope, receive, send, 415, f"the body must be JSON, sent with Content-Type: "
                                                                f"application/json; this request has {got}")
        await self.app(scope, receive, send)


class HeadAsGet:
    """Answers HEAD on every GET route with the GET's status and headers: uvicorn leaves out the
    body of a response to a HEAD request (its scope still says HEAD)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "HEAD":
            scope = dict(scope, method="GET")
        await self.app(scope, receive, send)


class LocalNamesOnly:
    """On a loopback address, answers only requests addressed to this machine (Host
    localhost or a loopback address): a web page elsewhere cannot reach the service by
    rebinding its own name to 127.0.0.1 (DNS rebinding)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            host = dict(scope["headers"]).get(b"host", b"").decode("latin-1")
            if not _local_name(host):
                return await _refuse(scope, receive, send, 400, f"this service answers requests for this machine "
                                                                f"only, not for Host {host!r}")
        await self.app(scope, receive, send)


def _local_name(host: str) -> bool:
    """Whether a Host header (name or address, and a port) names this machine."""
    return names_this_machine(host[1:host.find("]")] if host.startswith("[") else host.rsplit(":", 1)[0])
