"""The one exception type a user's mistake raises; the CLI turns it into a one-line message."""


class NmtError(Exception):
    """A problem with the user's input, files or environment, not a bug in nmt."""
