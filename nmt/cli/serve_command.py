"""``nmt serve``: a trained run over HTTP, with a page that shows its attention."""
from __future__ import annotations

from typing import Annotated

import typer

from nmt.cli.options import (CheckpointOpt, DeviceOpt, EngineOpt, Opt, RunArg, WeightsOpt, check_engine, err,
                             one_run, user_errors)
from nmt.serve.config import ServeConfig

LIMITS = "Limits"


def register(app: typer.Typer) -> None:
    """Add ``serve`` to ``app``."""
    app.command(epilog="Example: nmt serve checkpoints/run --port 8000, then open "
                       "http://127.0.0.1:8000/")(serve)


def serve(
    run: RunArg = None,
    checkpoint: CheckpointOpt = None,
    weights: WeightsOpt = "default",
    engine: EngineOpt = "nmt",
    host: Annotated[str, Opt(help="Address to listen on; 0.0.0.0 serves every interface (an explicit "
                                  "choice: anyone who can reach the machine can use it).")] = ServeConfig.host,
    port: Annotated[int, Opt(help="Port; 0 lets the system pick one.")] = ServeConfig.port,
    device: DeviceOpt = "auto",
    precision: Annotated[str, Opt(help="auto, fp32, bf16, fp16 (CUDA only) or int8 (CPU only). auto: fp32 on a "
                                       "CPU, where a service's small batches decode faster in float32 than in "
                                       "bf16; elsewhere as nmt train's.")] = "auto",
    batch_wait_ms: Annotated[float, Opt(help="How long a request waits for others to share its batch.")]
    = ServeConfig.batch_wait_ms,
    max_batch_lines: Annotated[int, Opt(help="Lines decoded in one batch.")] = ServeConfig.max_batch_lines,
    timeout: Annotated[float, Opt(help="Seconds a request may take before it gets a 503.")] = ServeConfig.timeout_s,
    read_timeout: Annotated[float, Opt(help="Seconds a client has to send a request's line and headers, and as "
                                            "many for its body, before a 408 closes the connection.")]
    = ServeConfig.read_timeout_s,
    max_lines: Annotated[int, Opt(help="Lines in one request.", rich_help_panel=LIMITS)] = ServeConfig.max_lines,
    max_chars: Annotated[int, Opt(help="Characters in one line.", rich_help_panel=LIMITS)] = ServeConfig.max_chars,
    max_attention_chars: Annotated[int, Opt(help="Characters in an /attention sentence (its map grows with the "
                                                 "square of the length).", rich_help_panel=LIMITS)]
    = ServeConfig.max_attention_chars,
    max_beam: Annotated[int, Opt(help="Largest beam a request may ask for.", rich_help_panel=LIMITS)]
    = ServeConfig.max_beam,
    max_body_bytes: Annotated[int, Opt(help="Size of one request body.", rich_help_panel=LIMITS)]
    = ServeConfig.max_body_bytes,
    max_queue_chars: Annotated[int, Opt(help="Characters waiting, each counted once per beam, before the service "
                                             "answers 503 (busy); a larger request is taken when nothing waits.",
                                        rich_help_panel=LIMITS)] = ServeConfig.max_queue_chars,
    max_connections: Annotated[int, Opt(help="Open connections; one more is answered 503 and closed.",
                                        rich_help_panel=LIMITS)] = ServeConfig.max_connections,
    expose_paths: Annotated[bool, Opt(help="Show the run's paths and library versions in /info when --host is "
                                           "not a loopback address (a loopback service always does).")]
    = ServeConfig.expose_paths,
    access_log: Annotated[bool, Opt(help="Log each request.")] = True,
) -> None:
    """Serve a run over HTTP, with a page that translates.

    The page also draws attention. POST /translate and /attention, GET /health, /info, the OpenAPI schema at /openapi.json,
    and the page at /. With --engine ctranslate2, a directory made by nmt export, decoded by CTranslate2 (no
    attention)."""
    from nmt.api import load
    from nmt.serve.app import create_app
    from nmt.serve.server import bind
    from nmt.serve.server import serve as run_server
    from nmt.serve.server import serving_precision, url
    from nmt.tools.inspect import export_card, model_card

    with user_errors():
        config = ServeConfig(host=host, port=port, max_body_bytes=max_body_bytes, max_lines=max_lines,
                             max_chars=max_chars, max_attention_chars=max_attention_chars, max_beam=max_beam,
                             batch_wait_ms=batch_wait_ms, max_batch_lines=max_batch_lines,
                             max_queue_chars=max_queue_chars, timeout_s=timeout, read_timeout_s=read_timeout,
                             max_connections=max_connections, expose_paths=expose_paths)
        check_engine(engine)
        if engine == "nmt":
            precision = serving_precision(precision, device)
        sock = bind(config)  # before loading: a port in use should not cost a model load
        try:
            model = load(one_run("serve", checkpoint, run), device, precision, weights, engine)
            card = (export_card(model.run, model.exported.manifest) if engine == "ctranslate2"
                    else model_card(model.run))
            app = create_app(model, config, card)
            if not config.loopback:
                err.print(f"[bold yellow]warning:[/] serving on {host}: anyone who can reach this machine "
                          f"can use the service", highlight=False, soft_wrap=True)
            # the socket listens already: a client that connects now waits for uvicorn to start
            err.print(f"serving {model.run} ({model.precision} on {model.device}) at {url(sock)}  "
                      f"(Ctrl+C to stop)", highlight=False, soft_wrap=True)
            run_server(app, config, sock, access_log)
        finally:
            sock.close()
