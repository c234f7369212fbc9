"""``nmt serve``: a trained run over HTTP. The application (``app``: FastAPI, its routes and
JSON refusals), what is refused before a route sees a request (``middleware``), the HTTP/1.1
connection with its bounds (``protocol``), requests decoded together as they arrive
(``batcher``), the service's settings (``config``), running it on uvicorn (``server``), and the
page that translates and draws attention (``page.html``).

May import anything below the CLI.
"""
