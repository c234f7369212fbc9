"""Reading a small YAML file safely: a run's config.yaml or a user's --config. The size is
capped before parsing, the text must be UTF-8, and aliases are refused, so that a hostile or
mistaken file is one clear error and never gigabytes of memory."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from nmt.encoding import binary_problem, conversion_hint, wide_encoding
from nmt.errors import ConfigError

MAX_CONFIG_BYTES = 1 << 20  # a real config is a few hundred bytes; /dev/zero is endless


def read_yaml_file(path: Path, what: str) -> Any:
    """A YAML file's content: at most :data:`MAX_CONFIG_BYTES` of UTF-8, read with a cap so that
    an endless or huge file is refused before it is parsed, and parsed safely (libyaml's parser
    where PyYAML has it: 5x faster). Every failure is one error naming ``path``."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_CONFIG_BYTES + 1)
    except IsADirectoryError:
        raise ConfigError(None, None, f"{path}: is a directory, expected a YAML {what}") from None
    except OSError as e:
        raise ConfigError(None, None, f"{path}: cannot read {what} ({e.strerror})") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(None, None, f"{path}: over {MAX_CONFIG_BYTES:,} bytes; not an nmt {what} (a config "
                                      "sets a few dozen options)")
    encoding = wide_encoding(data[:4096])
    if encoding is not None:  # UTF-16 of Latin text is valid UTF-8, a NUL byte between letters
        raise ConfigError(None, None, f"{path}: not UTF-8 text ({encoding}; {conversion_hint(path, encoding)})")
    if problem := binary_problem(data[:4096]):
        raise ConfigError(None, None, f"{path}: {problem}, expected a YAML {what}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(None, None, f"{path}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset "
                                      f"{e.start})") from None
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        # An alias repeats what its anchor holds: ten nested ones in 482 bytes stand for a value
        # that prints as gigabytes. A config has no use for them.
        if any(isinstance(event, yaml.AliasEvent) for event in yaml.parse(text, Loader=loader)):
            raise ConfigError(None, None, f"{path}: YAML aliases (*name) are not allowed in an nmt {what}")
        return yaml.load(text, Loader=loader)
    except yaml.YAMLError as e:
        raise ConfigError(None, None, f"{path}: not valid YAML ({str(e).splitlines()[0]})") from None
