"""``nmt serve``: a trained run over HTTP. The application (``app``: FastAPI, its routes,
request limits and JSON refusals), requests decoded together as they arrive (``batcher``),
the service's settings (``config``), running it on uvicorn (``server``), and the page that
translates and draws attention (``page.html``).

May import anything below the CLI.
"""
