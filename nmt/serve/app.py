"""The HTTP application: FastAPI, for its request validation and the OpenAPI schema it derives
from the same typed models, on uvicorn (a real ASGI server).

Every refusal is JSON, ``{"error": "..."}``: 400 malformed JSON or HTTP, 408 a request too slow
to arrive, 413 a body over the limit, 415 a body not declared as JSON, 422 a request the limits
or the model refuse, 503 busy or too slow; never a traceback. No request names a file: the run
is chosen when the service starts. A request whose client disconnects while it waits is dropped.
"""
# No ``from __future__ import annotations``: the request models are built per limits inside
# a function, and pydantic must see their annotations as objects.
import asyncio
import json
import logging
from collections.abc import Awaitable
from contextlib import asynccontextmanager
from importlib import resources
from typing import Annotated, Any, Literal, TypeVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator
from starlette.exceptions import HTTPException

from nmt import __version__
from nmt.api import NO_ATTENTION, ExportedModel, Model
from nmt.errors import NmtError, SettingError
from nmt.inference.settings import DEFAULT_LENGTH_PENALTY, Sampling, SearchOptions, check_search
from nmt.serve.batcher import Batcher, Busy, attention_work
from nmt.serve.config import ServeConfig
from nmt.serve.middleware import BodyLimit, HeadAsGet, JsonBodies, LocalNamesOnly

log = logging.getLogger(__name__)
T = TypeVar("T")

# The page may run its own inline script and talk to this service, and nothing else.
PAGE_POLICY = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
               "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'")
# What /info shows of the model card to a network: no paths on this machine, no library versions
PUBLIC_CARD = ("engine", "quantization", "architecture", "sizes", "parameters", "parameters per block", "vocabulary",
               "pairs", "training", "best validation BLEU", "throughput")


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
    Penalty = Annotated[float, Field(description="GNMT alpha for beam search: a finite number >= 0.")]
    strict = ConfigDict(extra="forbid", strict=True)

    class SampleRequest(BaseModel):
        """Sampling's settings (:class:`nmt.inference.settings.Sampling`)."""
        model_config = strict
        temperature: Annotated[float, Field(description="Logits divided by this (> 0).")] = 1.0
        top_k: Annotated[int, Field(ge=0, description="Draw among the k most likely pieces (0: all).")] = 0
        top_p: Annotated[float, Field(description="Draw among the most likely pieces whose probability reaches "
                                                  "p (1: all).")] = 1.0
        seed: Annotated[int, Field(ge=0, description="The same request and seed give the same samples.")] = 0

    class TranslateRequest(BaseModel):
        model_config = strict
        text: Annotated[list[Line], Field(min_length=1, max_length=config.max_lines)]
        beam: Beam = 1
        nbest: Annotated[int, Field(ge=1, le=config.max_beam, description="Translations per line: at most beam, "
                                    "or with sample, samples per line.")] = 1
        length_penalty: Penalty = DEFAULT_LENGTH_PENALTY
        sample: Annotated[SampleRequest | None, Field(description="Draw each piece instead of searching "
                                                                  "(beam 1).")] = None

        _search = model_validator(mode="after")(lambda self: _checked_options(self))

        def options(self) -> SearchOptions:
            sampling = Sampling(**self.sample.model_dump()) if self.sample is not None else None
            return SearchOptions(self.beam, self.nbest, self.length_penalty, sampling)

    class AttentionRequest(BaseModel):
        model_config = strict
        text: Annotated[str, StringConstraints(min_length=1, max_length=min(config.max_attention_chars,
                                                                            config.max_chars)),
                        Field(description="One sentence.")]
        beam: Beam = 1
        rank: Annotated[int, Field(ge=1, description="Which of the n best: 1 the best.")] = 1
        length_penalty: Penalty = DEFAULT_LENGTH_PENALTY
        kind: Literal[kinds] = "cross"  # type: ignore[valid-type]

        _search = model_validator(mode="after")(lambda self: _checked_search(self, "rank"))

    return TranslateRequest, AttentionRequest


def _checked_options(request: Any) -> BaseModel:
    """``request`` if its options pass the checks the CLI and the API make (SearchOptions)."""
    try:
        request.options()
    except SettingError as e:
        raise ValueError(str(e)) from None
    return request


def _checked_search(request: BaseModel, field: str) -> BaseModel:
    """``request`` if its search settings pass the checks the CLI and the API make
    (:func:`nmt.inference.settings.check_search`; ``field``, nbest or rank, at most beam)."""
    try:
        check_search(request.beam, request.length_penalty, getattr(request, field), field)
    except SettingError as e:
        raise ValueError(str(e)) from None
    return request


class ClientGone(Exception):
    """The client disconnected before its answer."""


async def unless_gone(request: Request, answer: Awaitable[T], timeout: float) -> T:
    """``answer``'s result within ``timeout`` seconds (else :class:`TimeoutError`). If the client
    disconnects first, ``answer`` is cancelled, so a request still queued never reaches the
    worker, and :class:`ClientGone` is raised."""
    task, gone = asyncio.ensure_future(answer), asyncio.ensure_future(_disconnected(request))
    try:
        done, _ = await asyncio.wait((task, gone), timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        task.cancel()
        gone.cancel()
    if task in done:
        return task.result()
    if gone in done:
        raise ClientGone
    raise TimeoutError


async def _disconnected(request: Request) -> None:
    """Returns when the client disconnects: the body has been read, so the server's next message
    is ``http.disconnect``, sent when the connection is lost. Nothing else asks for it."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


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

    @app.exception_handler(ClientGone)
    async def gone(request: Request, e: ClientGone) -> JSONResponse:
        log.info("%s %s: the client disconnected before its answer; its request was dropped or its answer "
                 "discarded", request.method, request.url.path)
        return JSONResponse({"error": "the client disconnected"}, 499)  # nginx's code; nobody receives it

    @app.exception_handler(Exception)
    async def failed(request: Request, e: Exception) -> JSONResponse:
        # No logging here: Starlette re-raises after this answer, and uvicorn logs the traceback
        return JSONResponse({"error": f"internal error ({type(e).__name__}); the service log has the details"}, 500)


def create_app(model: Model | ExportedModel, config: ServeConfig, card: dict[str, Any]) -> FastAPI:
    """The service of ``model``; ``card`` is the run's model card (``nmt info``)."""
    TranslateRequest, AttentionRequest = request_models(config, model.attention_kinds or ("cross",))
    batcher = Batcher(model, config.batch_wait_ms / 1000, config.max_batch_lines, config.max_queue_chars)
    shown = card if config.loopback or config.expose_paths else {k: card[k] for k in PUBLIC_CARD if k in card}

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        batcher.start()
        yield
        await batcher.stop()

    refusals = {code: {"model": Refusal} for code in (400, 408, 413, 415, 422, 503)}
    app = FastAPI(title="nmt", version=__version__, lifespan=lifespan, docs_url=None, redoc_url=None,
                  description="Translate with a trained nmt run; see its attention.", responses=refusals)
    _handlers(app)
    # Innermost first: a body is read whole (bounded in size and time) before its type is judged
    app.add_middleware(HeadAsGet)
    app.add_middleware(JsonBodies)
    app.add_middleware(BodyLimit, limit=config.max_body_bytes, seconds=config.read_timeout_s)
    if config.loopback:
        app.add_middleware(LocalNamesOnly)

    @app.post("/translate", response_model=Translations)
    async def translate(body: TranslateRequest, request: Request) -> JSONResponse:
        """The n best translations of each line, decoded in a batch with other clients' lines."""
        answer = batcher.translate(body.text, body.options())
        results = await unless_gone(request, answer, config.timeout_s)
        # Sent as built: validating it against the response model again cost ~8% of the requests/s
        return JSONResponse({"translations": [[{"text": t.text, "score": t.score, "pieces": t.pieces} for t in hyps]
                                              for hyps in results]})

    def attention_reply(body: Any) -> bytes:
        """The /attention answer, encoded on the worker: a large map takes the event loop seconds."""
        maps = model.attention(body.text, body.beam, body.rank, body.length_penalty)
        weights = maps.weights[body.kind]
        queries, keys = maps.pieces[body.kind]
        answer = {"source": maps.source, "translation": maps.text, "score": maps.score, "kind": body.kind,
                  "layers": weights.size(0), "heads": weights.size(1), "queries": queries, "keys": keys,
                  "weights": weights.round(decimals=4).tolist()}
        try:
            return json.dumps(answer, ensure_ascii=False, allow_nan=False).encode()
        except ValueError:
            raise NmtError("the model gave non-finite attention weights or scores: is the run diverged?") from None

    @app.post("/attention", response_model=Attention)
    async def attention(body: AttentionRequest, request: Request) -> Response:
        """Every layer's and head's weights of one attention while the model reads a sentence
        and its ``rank``-th best translation."""
        if not model.attention_kinds:
            raise NmtError(NO_ATTENTION)
        reply = batcher.call(attention_work(body.text, body.beam), attention_reply, body)
        return Response(await unless_gone(request, reply, config.timeout_s), media_type="application/json")

    @app.get("/health")
    async def health() -> dict[str, str]:
        """200 while the service answers."""
        return {"status": "ok"}

    @app.get("/info")
    async def info() -> dict[str, Any]:
        """The model card (as ``nmt info`` shows it; beyond loopback, without paths or library
        versions unless --expose-paths), how it decodes, the request limits and the queue."""
        return {"model": shown, "device": str(model.device), "precision": model.precision,
                "attention kinds": list(model.attention_kinds), "limits": config.limits(),
                "batches decoded": batcher.batches, "lines waiting": batcher.waiting,
                "queued work": batcher.work}

    page = resources.files("nmt.serve").joinpath("page.html").read_text(encoding="utf-8")

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def home() -> HTMLResponse:
        return HTMLResponse(page, headers={"Content-Security-Policy": PAGE_POLICY})

    return app
