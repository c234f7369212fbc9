"""The exceptions a user's mistake raises; the CLI turns them into one-line messages."""
from __future__ import annotations

import re
import reprlib
from collections.abc import Callable


class NmtError(Exception):
    """A problem with the user's input, files or environment, not a bug in nmt."""


_SHOWN = reprlib.Repr()  # (keyword settings need Python 3.12)
_SHOWN.maxlevel, _SHOWN.maxlist, _SHOWN.maxtuple, _SHOWN.maxdict = 2, 5, 5, 5
_SHOWN.maxstring = _SHOWN.maxother = 60


def shown(value: object) -> str:
    """``repr(value)`` cut short, for a message that quotes what the user gave: a value from a
    file may be any size (a YAML list of millions, or one of aliases that prints as gigabytes)."""
    return _SHOWN.repr(value)


class SettingMessage:
    """Something to say about a setting's value: why it cannot be used (in a
    :class:`SettingError`), or what it will do (a warning logged as the message object itself).

    The library names settings as it knows them (``device cuda:3: only 1 CUDA device(s)
    here``); a front end names them its own way (the CLI: ``--device cuda:3: ...``) with
    :meth:`render`. ``reason`` writes the other settings it mentions as ``{name}``, each listed
    in ``mentions``; nothing else in it is substituted, so it may quote any text.
    """

    def __init__(self, setting: str | None, value: object, reason: str, mentions: tuple[str, ...] = ()) -> None:
        self.setting, self.value, self.reason, self.mentions = setting, value, reason, mentions

    def render(self, name_of: Callable[[str], str]) -> str:
        """The message with every setting named by ``name_of``."""
        names = "|".join(re.escape(m) for m in self.mentions)
        reason = (re.sub(r"\{(" + names + r")\}", lambda m: name_of(m.group(1)), self.reason)
                  if names else self.reason)
        if self.setting is None:
            return reason
        head = name_of(self.setting) + ("" if self.value is None else f" {self.value}")
        return f"{head}: {reason}"

    def __str__(self) -> str:
        return self.render(lambda name: name)


class SettingError(NmtError):
    """A setting's value cannot be used, or another setting is needed (a
    :class:`SettingMessage` says which, and why)."""

    def __init__(self, setting: str | None, value: object, reason: str,
                 mentions: tuple[str, ...] = ()) -> None:
        self.message = SettingMessage(setting, value, reason, mentions)
        super().__init__(str(self.message))

    def render(self, name_of: Callable[[str], str]) -> str:
        """The message with every setting named by ``name_of``."""
        return self.message.render(name_of)


class ConfigError(SettingError):
    """A config file or option has an unknown key or an invalid value (``setting`` None: a
    message about no one setting)."""
