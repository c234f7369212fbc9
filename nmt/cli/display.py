"""Terminal renderings with rich: attention as shaded cells, score tables, model cards."""
from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

from nmt.report.plotting import AttentionPanel

_SHADES = " ░▒▓█"


def attention_table(panel: AttentionPanel) -> Table:
    """A row per query piece, a column per key piece; darker cells mean more weight."""
    table = Table(title=panel.title, show_lines=False, pad_edge=False, box=None)
    table.add_column("")
    for token in panel.keys:
        table.add_column(token, justify="center", no_wrap=True)
    for row, token in zip(panel.weights.tolist(), panel.queries):
        cells = [Text(_SHADES[min(int(w * len(_SHADES)), len(_SHADES) - 1)] * 2,
                      style=f"rgb({int(255 * w)},{int(255 * w)},{int(80 + 175 * w)})") for w in row]
        table.add_row(token, *cells)
    return table


def key_value_table(title: str, rows: list[tuple[str, Any]]) -> Table:
    """One row a key; a mapping value is shown as ``key value, key value``."""
    table = Table(title=title, show_header=False)
    table.add_column(style="bold")
    table.add_column()
    for key, value in rows:
        if isinstance(value, dict):
            value = ", ".join(f"{k} {_number(v)}" for k, v in value.items())
        table.add_row(key, str(_number(value)))
    return table


def _number(value: Any) -> Any:
    """Counts with thousands separators (5,274,485), as every other figure nmt prints."""
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else value
