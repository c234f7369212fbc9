"""``nmt compare --html FILE``: one self-contained page (no script or style from elsewhere)
with the scores, their intervals and p-values, the verdicts, and the sentences where the
systems differ most, every text escaped. Laid out for a phone as well as a desktop; the
examples can be narrowed to those where one system scores best."""
from __future__ import annotations

import html
import re
from importlib.resources import files

from nmt.comparison.compare import Comparison, verdicts
from nmt.comparison.differences import Example
from nmt.comparison.significance import Estimate

METRIC_NAMES = {"bleu": "BLEU", "chrf": "chrF2", "ter": "TER"}


def render(comparison: Comparison, examples: list[Example], meta: str, asked: int = 1) -> str:
    """The page's HTML, with ``examples`` of the ``asked`` for."""
    names = [s.name for s in comparison.systems]
    parts = {
        "title": _e(f"nmt compare: {', '.join(names)}"),
        "meta": _e(meta),
        "scores": "".join(_scores_table(metric, rows, names, comparison.signatures[metric])
                          for metric, rows in comparison.estimates.items()),
        "verdicts": "".join(f"<li>{_e(line)}</li>" for line in verdicts(comparison)),
        "examples_title": _e(f"The {len(examples)} sentences where the systems differ most" if examples else
                             "No sentence where the systems differ" if asked else "No examples (--examples 0)"),
        "filter": '<option value="">all examples</option>' + "".join(
            f'<option value="{k}">where {_e(name)} scores best</option>' for k, name in enumerate(names)),
        "examples": "".join(_example(e, names) for e in examples),
    }
    page = files("nmt.comparison").joinpath("page.html").read_text(encoding="utf-8")
    # one pass: a system name that reads {{examples}} stays text, not a place to fill
    return re.sub(r"\{\{(\w+)\}\}", lambda m: parts.get(m[1], m[0]), page)


def _e(text: str) -> str:
    return html.escape(text, quote=True)


def _scores_table(metric: str, rows: list[Estimate], names: list[str], signature: str) -> str:
    head = "".join(f"<th scope=\"col\">{h}</th>" for h in ("system", "score", "95% CI", "Δ", "p", ""))
    body = "".join(_score_row(name, e) for name, e in zip(names, rows))
    return (f'<div class="scroll"><table class="scores" data-metric="{metric}"><caption>{METRIC_NAMES[metric]}'
            f"</caption><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"
            f'<p class="signature">{_e(signature)}</p>')


def _score_row(name: str, e: Estimate) -> str:
    if e.delta is None:
        delta, p, verdict = "", "", '<span class="verdict">baseline</span>'
    else:
        kind, words = (("same", "identical") if e.identical else
                       ("better" if e.better else "worse", "significant") if e.significant else ("noise", "not significant"))
        delta, p = f"{e.delta:+.2f}", f"{e.p:.4f}"
        verdict = f'<span class="verdict {kind}">{words}</span>'
    cells = [f'<th scope="row">{_e(name)}</th>', f'<td class="score">{e.score:.2f}</td>',
             f'<td class="ci">{e.mean:.2f} ± {e.ci:.2f}</td>', f'<td class="delta">{delta}</td>',
             f'<td class="p">{p}</td>', f"<td>{verdict}</td>"]
    return f"<tr>{''.join(cells)}</tr>"


def _example(example: Example, names: list[str]) -> str:
    top, bottom = max(example.chrf), min(example.chrf)
    best = " ".join(str(k) for k, c in enumerate(example.chrf) if c == top)
    known = {word for ref in example.refs for word in ref.split()}
    rows = [f'<dt>source</dt><dd dir="auto" class="source">{_e(example.source)}</dd>']
    rows += [f'<dt>reference</dt><dd dir="auto" class="ref">{_e(ref)}</dd>' for ref in example.refs]
    for k, (name, hyp, chrf) in enumerate(zip(names, example.hyps, example.chrf)):
        badge = ('<span class="badge better">best</span>' if chrf == top else
                 '<span class="badge worse">worst</span>' if chrf == bottom else "")
        words = " ".join(_e(w) if w in known else f"<mark>{_e(w)}</mark>" for w in hyp.split())
        rows.append(f'<dt>{_e(name)}</dt><dd dir="auto" class="hyp{" best" if chrf == top else ""}" '
                    f'data-system="{k}" data-chrf="{chrf:.2f}"><span class="text">{words}</span> '
                    f'<span class="chrf">chrF {chrf:.1f}</span> {badge}</dd>')
    return (f'<article data-index="{example.index}" data-best="{best}"><h3>Sentence {example.index + 1} · chrF '
            f'spread {example.spread:.1f}</h3><dl>{"".join(rows)}</dl></article>')
