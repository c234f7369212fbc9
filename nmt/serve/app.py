"""The HTTP application: FastAPI, for its request validation and the OpenAPI schema it derives
from the same typed models, on uvicorn (a real ASGI server).

Every refusal is JSON, ``{"error": "..."}``: 400 malformed JSON, 413 a body over the limit,
422 a request the limits or the model refuse, 503 busy or too slow; never a traceback. No
request names a file: the run is chosen when the service starts.
"""
# No ``from __future__ import annotations``: the request models are built per limits inside
# a function, and pydantic must see their annotations as objects.
import asyncio
import json
from contextlib import asynccontextmanager
from importlib import resources
from typing import Annotated, Any, Literal

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from nmt import __version__
from nmt.api import Model
from nmt.errors import NmtError
from nmt.inference.search import DEFAULT_LENGTH_PENALTY
from nmt.serve.batcher import Batcher, Busy
from nmt.serve.config import ServeConfig, names_this_machine

# The page may run its own inline script and talk to this service, and nothing else.
PAGE_POLICY = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
               "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'")


class Hypothesis(BaseModel):
    text: str
    score: float = Field(description="The search's log-probability (length-normalised with a beam).")
    pieces: list[str]


class Translations(BaseModel):
    translations: list[list[Hypothesis]] = Field(description="Per line, its n best, best first; [] for "
                                                             "an empty line.")


class Attention(BaseModel):
    source: str
    translation: str
    score: float
    kind: str
    layers: int
    heads: int
    queries: list[str] = Field(description="The pieces down the heatmap (a row each).")
    keys: list[str] = Field(description="The pieces across it (a column each).")
    weights: list[list[list[list[float]]]] = Field(description="(layers, heads, queries, keys)")


class Refusal(BaseModel):
    error: str


def request_models(config: ServeConfig, kinds: tuple[str, ...]) -> tuple[type[BaseModel], type[BaseModel]]:
    """The /translate and /attention request bodies under ``config``'s limits and for a model
    with attention ``kinds`` (strict: "5" is not a beam size; unknown fields are refused)."""
    Line = Annotated[str, StringConstraints(max_length=config.max_chars)]
    Beam = Annotated[int, Field(ge=1, le=config.max_beam, description="1: greedy search.")]
    Penalty = Annotated[float, Field(ge=0, allow_inf_nan=False, description="GNMT alpha for beam search.")]
    strict = ConfigDict(extra="forbid", strict=True)

    class TranslateRequest(BaseModel):
        model_config = strict
        text: Annotated[list[Line], Field(min_length=1, max_length=config.max_lines)]
        beam: Beam = 1
        nbest: Annotated[int, Field(ge=1, description="Translations per line, at most beam.")] = 1
        length_penalty: Penalty = DEFAULT_LENGTH_PENALTY

        _nbest_within_beam = model_validator(mode="after")(lambda self: _within_beam(self, "nbest"))

    class AttentionRequest(BaseModel):
        model_config = strict
        text: Annotated[Line, Field(min_length=1, description="One sentence.")]
        beam: Beam = 1
        rank: Annotated[int, Field(ge=1, description="Which of the n best: 1 the best.")] = 1
        length_penalty: Penalty = DEFAULT_LENGTH_PENALTY
        kind: Literal[kinds] = "cross"  # type: ignore[valid-type]

        _rank_within_beam = model_validator(mode="after")(lambda self: _within_beam(self, "rank"))

    return TranslateRequest, AttentionRequest


def _within_beam(request: BaseModel, field: str) -> BaseModel:
    """``request`` if its ``field`` (nbest or rank) is at most its beam."""
    if getattr(request, field) > request.beam:
        raise ValueError(f"{field} ({getattr(request, field)}) must be at most beam ({request.beam})")
    return request


class BodyLimit:
    """Refuses a request body over ``limit`` bytes with 413 before the application reads it;
    the body is read here once and handed on."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope["headers"]).get(b"content-length", b"0")
        if not declared.isdigit() or int(declared) > self.limit:
            return await self._refuse(scope, receive, send)
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.limit:
                return await self._refuse(scope, receive, send)
            more = message.get("more_body", False)
        body: Message | None = {"type": "http.request", "body": b"".join(chunks), "more_body": False}

        async def replay() -> Message:
            nonlocal body
            message, body = body, None
            return message if message is not None else await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = JSONResponse({"error": f"the request body is over the service's limit of {self.limit} bytes"},
                                status_code=413, headers={"Connection": "close"})
        await response(scope, receive, send)


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
                refusal = JSONResponse({"error": f"this service answers requests for this machine only, "
                                                 f"not for Host {host!r}"}, status_code=400)
                return await refusal(scope, receive, send)
        await self.app(scope, receive, send)


def _local_name(host: str) -> bool:
    """Whether a Host header (name or address, and a port) names this machine."""
    return names_this_machine(host[1:host.find("]")] if host.startswith("[") else host.rsplit(":", 1)[0])


def _location(loc: tuple) -> str:
    parts = [str(p) for p in loc if p != "body"]
    return ".".join(parts) + ": " if parts else ""


def _handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, e: RequestValidationError) -> JSONResponse:
        errors = e.errors()
        if any(error["type"] == "json_invalid" for error in errors):
            return JSONResponse({"error": "the body is not valid JSON: " + errors[0]["msg"]}, 400)
        text = "; ".join(_location(error["loc"]) + error["msg"].removeprefix("Value error, ") for error in errors)
        return JSONResponse({"error": text}, 422)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, e: HTTPException) -> JSONResponse:
        return JSONResponse({"error": str(e.detail)}, e.status_code, headers=e.headers)

    @app.exception_handler(Busy)
    async def busy(request: Request, e: Busy) -> JSONResponse:
        return JSONResponse({"error": str(e)}, 503, headers={"Retry-After": "1"})

    @app.exception_handler(NmtError)
    async def refused(request: Request, e: NmtError) -> JSONResponse:
        return JSONResponse({"error": str(e)}, 422)

    @app.exception_handler(TimeoutError)
    async def too_slow(request: Request, e: TimeoutError) -> JSONResponse:
        return JSONResponse({"error": "the translation took longer than the service's limit; send fewer or "
                                      "shorter lines, or retry"}, 503, headers={"Retry-After": "1"})

    @app.exception_handler(Exception)
    async def failed(request: Request, e: Exception) -> JSONResponse:
        # No logging here: Starlette re-raises after this answer, and uvicorn logs the traceback
        return JSONResponse({"error": f"internal error ({type(e).__name__}); the service log has the details"}, 500)


def create_app(model: Model, config: ServeConfig, card: dict[str, Any]) -> FastAPI:
    """The service of ``model``; ``card`` is the run's model card (``nmt info``)."""
    TranslateRequest, AttentionRequest = request_models(config, model.attention_kinds)
    batcher = Batcher(model, config.batch_wait_ms / 1000, config.max_batch_lines, config.max_queue_lines)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        batcher.start()
        yield
        await batcher.stop()

    refusals = {code: {"model": Refusal} for code in (400, 413, 422, 503)}
    app = FastAPI(title="nmt", version=__version__, lifespan=lifespan, docs_url=None, redoc_url=None,
                  description="Translate with a trained nmt run; see its attention.", responses=refusals)
    _handlers(app)
    app.add_middleware(BodyLimit, limit=config.max_body_bytes)
    if config.loopback:
        app.add_middleware(LocalNamesOnly)

    @app.post("/translate", response_model=Translations)
    async def translate(request: TranslateRequest) -> JSONResponse:
        """The n best translations of each line, decoded in a batch with other clients' lines."""
        results = await asyncio.wait_for(
            batcher.translate(request.text, request.beam, request.nbest, request.length_penalty), config.timeout_s)
        # Sent as built: validating it against the response model again cost ~8% of the requests/s
        return JSONResponse({"translations": [[{"text": t.text, "score": t.score, "pieces": t.pieces} for t in hyps]
                                              for hyps in results]})

    def attention_reply(request: Any) -> bytes:
        """The /attention answer, encoded on the worker: a large map takes the event loop seconds."""
        maps = model.attention(request.text, request.beam, request.rank, request.length_penalty)
        weights = maps.weights[request.kind]
        queries, keys = maps.pieces[request.kind]
        answer = {"source": maps.source, "translation": maps.text, "score": maps.score, "kind": request.kind,
                  "layers": weights.size(0), "heads": weights.size(1), "queries": queries, "keys": keys,
                  "weights": weights.round(decimals=4).tolist()}
        try:
            return json.dumps(answer, ensure_ascii=False, allow_nan=False).encode()
        except ValueError:
            raise NmtError("the model gave non-finite attention weights or scores: is the run diverged?") from None

    @app.post("/attention", response_model=Attention)
    async def attention(request: AttentionRequest) -> Response:
        """Every layer's and head's weights of one attention while the model reads a sentence
        and its ``rank``-th best translation."""
        body = await asyncio.wait_for(batcher.call(attention_reply, request), config.timeout_s)
        return Response(body, media_type="application/json")

    @app.get("/health")
    async def health() -> dict[str, str]:
        """200 while the service answers."""
        return {"status": "ok"}

    @app.get("/info")
    async def info() -> dict[str, Any]:
        """The model card (as ``nmt info`` shows it), how it decodes, and the request limits."""
        return {"model": card, "device": str(model.device), "precision": model.precision,
                "attention kinds": list(model.attention_kinds), "limits": config.limits(),
                "batches decoded": batcher.batches, "lines waiting": batcher.waiting}

    page = resources.files("nmt.serve").joinpath("page.html").read_text(encoding="utf-8")

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def home() -> HTMLResponse:
        return HTMLResponse(page, headers={"Content-Security-Policy": PAGE_POLICY})

    return app
