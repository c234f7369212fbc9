"""``python -m nmt``: the same as the ``nmt`` command."""
from nmt.cli import main

main()
