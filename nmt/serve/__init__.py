"""``nmt serve``: a trained run over HTTP. FastAPI on uvicorn (:mod:`nmt.serve.app`), requests
decoded together as they arrive (:mod:`nmt.serve.batcher`), and a page that translates and
draws attention (``page.html``)."""
