"""The ``nmt`` command line: the Typer app (``app``: train, translate, eval; ``tool_commands``:
attn-plot, info, bench; ``serve_command``: serve; ``demo_command``: demo) parses, calls the library and prints; shared flags and error handling
(``options``), input and output streams (``streams``), text and JSON formats (``output``) and
terminal renderings (``display``). Nothing else lives here, and nothing below imports it.

May import anything.
"""
from nmt.cli.app import app, main

__all__ = ["app", "main"]
