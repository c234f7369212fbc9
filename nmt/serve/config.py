"""The service's settings: where it listens and what one request may ask for."""
from __future__ import annotations

import ipaddress
import math
from dataclasses import asdict, dataclass, fields
from typing import Any

from nmt.errors import NmtError


@dataclass(frozen=True)
class ServeConfig:
    """How ``nmt serve`` listens and what it accepts.

    A batch starts ``batch_wait_ms`` after the later of its first request's arrival and the
    previous batch's end, and holds at most ``max_batch_lines`` lines of requests with the same
    search settings (:class:`nmt.serve.batcher.Batcher`). Queued work is weighed in characters
    times beam: past ``max_queue_chars`` the service answers 503, as it does to a request not
    answered within ``timeout_s``. A client has ``read_timeout_s`` for a request's headers and
    then as long for its body; at most ``max_connections`` connections are open at once. /info
    shows the run's paths and library versions on a loopback ``host``, or with ``expose_paths``.
    """

    host: str = "127.0.0.1"
    port: int = 8000
    max_body_bytes: int = 64 * 1024
    max_lines: int = 64
    max_chars: int = 1000
    # An attention map grows with the square of the sentence's length: at 1,000 characters one
    # /attention kept the worker 1.4-3.8 s (issue 39); 300 is a long sentence and a tenth of that map
    max_attention_chars: int = 300
    max_beam: int = 8
    batch_wait_ms: float = 5.0
    max_batch_lines: int = 64
    # About what the limit of 4,096 lines that it replaced held at 60 characters a line
    max_queue_chars: int = 250_000
    timeout_s: float = 30.0
    read_timeout_s: float = 10.0
    max_connections: int = 256
    expose_paths: bool = False

    def __post_init__(self) -> None:
        for f in fields(self):
            if f.type in ("int", "float"):
                self._check(f.name, getattr(self, f.name))

    @staticmethod
    def _check(name: str, value: float) -> None:
        if name in ("timeout_s", "read_timeout_s"):
            ok, wanted = value > 0, "> 0"
        elif name == "port":
            ok, wanted = 0 <= value <= 65535, "between 0 and 65535"
        else:
            low = 0 if name == "batch_wait_ms" else 1
            ok, wanted = value >= low, f">= {low}"
        if not (ok and math.isfinite(value)):
            raise NmtError(f"{flag(name)} must be a finite number {wanted}, got {value}")

    @property
    def loopback(self) -> bool:
        """Whether only this machine can reach the service."""
        return names_this_machine(self.host)

    def limits(self) -> dict[str, Any]:
        """What a client may send, as /info reports it."""
        return {k: v for k, v in asdict(self).items() if k not in ("host", "port", "expose_paths")}


def flag(setting: str) -> str:
    """The ``nmt serve`` flag of a :class:`ServeConfig` field."""
    return "--" + setting.removesuffix("_s").replace("_", "-")


def names_this_machine(name: str) -> bool:
    """Whether a host name or address is this machine's own: localhost or a loopback address."""
    if name.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False
