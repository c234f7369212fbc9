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
    search settings (:class:`nmt.serve.batcher.Batcher`); ``max_queue_lines`` lines may wait
    before the service answers 503; a request not answered within ``timeout_s`` gets a 503 too.
    """

    host: str = "127.0.0.1"
    port: int = 8000
    max_body_bytes: int = 64 * 1024
    max_lines: int = 64
    max_chars: int = 1000
    max_beam: int = 8
    batch_wait_ms: float = 5.0
    max_batch_lines: int = 64
    max_queue_lines: int = 4096
    timeout_s: float = 30.0

    def __post_init__(self) -> None:
        for f in fields(self):
            if f.name != "host":
                self._check(f.name, getattr(self, f.name))
        if self.max_queue_lines < self.max_lines:
            raise NmtError(f"--max-queue-lines ({self.max_queue_lines}) must be at least --max-lines "
                           f"({self.max_lines}): a request of --max-lines lines must fit in the queue")

    @staticmethod
    def _check(name: str, value: float) -> None:
        if name == "timeout_s":
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
        return {k: v for k, v in asdict(self).items() if k not in ("host", "port")}


def flag(setting: str) -> str:
    """The ``nmt serve`` flag of a :class:`ServeConfig` field."""
    return "--timeout" if setting == "timeout_s" else "--" + setting.replace("_", "-")


def names_this_machine(name: str) -> bool:
    """Whether a host name or address is this machine's own: localhost or a loopback address."""
    if name.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False
