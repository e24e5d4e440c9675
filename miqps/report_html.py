"""A :class:`~miqps.report.ReportView` as one self-contained HTML page.

Everything is inline (CSS, JavaScript, SVG plots, the explanations as JSON) and a Content
Security Policy forbids the page any request, so it works offline and from a file. Every
text from the URLs or the maps is escaped: as HTML text and attributes here, and in the
embedded JSON with ``<``, ``>`` and ``&`` as ``\\u`` escapes, so no input can end the
``<script>`` element holding it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from html import escape
from importlib import resources
from typing import Any

from miqps.report import DomainView, PatternView, ReportView

_CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; "
    "img-src data:; form-action 'none'; base-uri 'none'"
)
_LABEL_CHARS = 38
_ESTIMATE = "estimate"
_ESTIMATE_NOTE = "from the maps' evidence; <code>miqps learn</code> counts every fetch"


def _asset(name: str) -> str:
    return resources.files("miqps").joinpath(f"data/{name}").read_text("utf-8")


def script_json(value: Any) -> str:
    """``value`` as JSON that is safe inside a ``<script>`` element."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _count(number: int) -> str:
    return f"{number:,}"


def _share(part: int, whole: int) -> str:
    return f"{part / whole:.1%}" if whole else "–"


def render(view: ReportView, sources: Sequence[str] = ()) -> str:
    """The whole page; ``sources`` name the inputs (file names) in its header."""
    return "".join(_page(view, sources))


def _page(view: ReportView, sources: Sequence[str]) -> Iterator[str]:
    yield (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        "<title>miqps parameter-sprawl report</title>"
        f"<style>{_asset('report.css')}</style></head><body>"
    )
    yield "<header><h1>Parameter-sprawl report</h1>"
    if sources:
        yield f"<p class=sources>{escape(' · '.join(sources))}</p>"
    yield "</header><main>"
    yield from _totals(view)
    yield from _explain(view)
    yield from _plots(view)
    yield from _domain_table(view)
    for number, domain in enumerate(view.domains):
        yield from _domain_section(number, domain)
    yield from _skipped(view)
    yield "</main>"
    answers = script_json(view.explanations)
    yield f'<script type="application/json" id="explanations">{answers}</script>'
    yield (f"<script>{_asset('report.explain.js')}\n{_asset('report.js')}</script></body></html>\n")


def _totals(view: ReportView) -> Iterator[str]:
    cards = (
        (
            "lines",
            "lines read",
            _count(view.lines),
            f"{_count(view.blank)} blank, {_count(view.invalid)} invalid",
        ),
        ("distinct", "distinct URLs", _count(view.distinct_urls), f"of {_count(view.urls)} valid"),
        ("canonical", "canonical URLs", _count(view.canonical_urls), ""),
        (
            "saved",
            "duplicates saved",
            _count(view.duplicates_saved),
            _share(view.duplicates_saved, view.distinct_urls) + " of distinct URLs",
        ),
        (
            "learned",
            "learned share",
            _share(view.learned_urls, view.distinct_urls),
            "of distinct URLs in a learned pattern",
        ),
        ("fetches", f"fetches spent ({_ESTIMATE})", _count(view.fetches), _ESTIMATE_NOTE),
        ("domains", "domains", _count(view.domain_count), ""),
    )
    yield "<section id=totals><dl class=cards>"
    for key, label, value, note in cards:
        yield (
            f'<div><dt>{label}</dt><dd data-total="{key}">{value}</dd>'
            f"<dd class=note>{note}</dd></div>"
        )
    yield "</dl></section>"


def _explain(view: ReportView) -> Iterator[str]:
    example = view.explanations[0]["url"] if view.explanations else "https://example.com/?id=1"
    hidden = (
        f" ({_count(view.hidden_explanations)} more distinct URLs are not embedded)"
        if view.hidden_explanations
        else ""
    )
    yield (
        "<section id=explain-section><h2>Explain a URL</h2>"
        f"<p>The answer of <code>miqps canonicalize --json</code> for the "
        f"{_count(len(view.explanations))} distinct URLs of this report that are embedded"
        f"{hidden}, at least one per pattern.</p>"
        "<form id=explain><input id=explain-url type=text autocomplete=off "
        f'spellcheck=false placeholder="{escape(example)}" aria-label="URL">'
        "<button type=submit>Explain</button></form>"
        '<div id=explain-result aria-live="polite"></div></section>'
    )


def _plots(view: ReportView) -> Iterator[str]:
    yield "<section id=plots><h2>At a glance</h2><div class=plots>"
    yield _bar_chart(
        "plot-variants",
        f"Distinct URLs each parameter creates (top {len(view.variants_by_param)})",
        [(bar.label, [(bar.value, bar.kind)]) for bar in view.variants_by_param],
        [("dropped", "dropped in this list"), ("kept", "kept everywhere")],
    )
    yield _bar_chart(
        "plot-saved",
        "Duplicates saved and fetches spent, per domain",
        [
            (domain, [(saved, "saved"), (fetches, "fetches")])
            for domain, saved, fetches in view.saved_and_fetches
        ],
        [("saved", "duplicates saved"), ("fetches", f"fetches spent ({_ESTIMATE})")],
    )
    yield "</div></section>"


def _bar_chart(
    chart_id: str,
    caption: str,
    rows: Sequence[tuple[str, Sequence[tuple[int, str]]]],
    legend: Sequence[tuple[str, str]],
) -> str:
    """Horizontal bars, one group per row, labelled on the left and valued on the right."""
    label_width, bar_width, bar_height, gap = 230, 290, 12, 6
    largest = max((value for _, values in rows for value, _ in values), default=0) or 1
    parts: list[str] = []
    y = 28
    for label, values in rows:
        short = label if len(label) <= _LABEL_CHARS else label[: _LABEL_CHARS - 1] + "…"
        group_height = bar_height * len(values)
        parts.append(
            f"<g class=row><title>{escape(label)}</title>"
            f'<text x="{label_width - 6}" y="{y + group_height / 2 + 4}" '
            f'text-anchor="end">{escape(short)}</text>'
        )
        for value, kind in values:
            width = round(bar_width * value / largest, 1)
            parts.append(
                f'<rect class="{escape(kind)}" x="{label_width}" y="{y}" '
                f'width="{width}" height="{bar_height - 2}"></rect>'
                f'<text class=value x="{label_width + width + 4}" '
                f'y="{y + bar_height - 3}">{_count(value)}</text>'
            )
            y += bar_height
        parts.append("</g>")
        y += gap
    x = 0
    keys: list[str] = []
    for kind, text in legend:
        keys.append(
            f'<rect class="{kind}" x="{x}" y="4" width="12" height="12"></rect>'
            f'<text x="{x + 16}" y="14">{escape(text)}</text>'
        )
        x += 40 + 7 * len(text)
    if not rows:
        parts.append(f'<text x="0" y="{y + 12}">nothing to plot</text>')
        y += 20
    height = y + 4
    return (
        f'<figure id="{chart_id}"><figcaption>{escape(caption)}</figcaption>'
        f'<svg role="img" width="{label_width + bar_width + 60}" height="{height}" '
        f'viewBox="0 0 {label_width + bar_width + 60} {height}">'
        f"<g class=legend>{''.join(keys)}</g>{''.join(parts)}</svg></figure>"
    )


def _domain_table(view: ReportView) -> Iterator[str]:
    yield (
        "<section id=domains-section><h2>Domains</h2>"
        '<input id=domain-filter type=search placeholder="filter domains" '
        'aria-label="filter domains">'
        "<table id=domains><thead><tr><th>domain</th><th>URLs</th><th>distinct</th>"
        "<th>canonical</th><th>duplicates saved</th><th>learned share</th>"
        f"<th>fetches spent ({_ESTIMATE})</th><th>map version</th><th>map updated</th>"
        "</tr></thead><tbody>"
    )
    for number, domain in enumerate(view.domains):
        yield (
            f'<tr data-domain="{escape(domain.domain)}">'
            f'<td><a href="#domain-{number}">{escape(domain.domain)}</a></td>'
            f"<td>{_count(domain.urls)}</td><td>{_count(domain.distinct_urls)}</td>"
            f"<td>{_count(domain.canonical_urls)}</td>"
            f"<td>{_count(domain.duplicates_saved)}</td>"
            f"<td>{_share(domain.learned_urls, domain.distinct_urls)}</td>"
            f"<td>{_count(domain.fetches)}</td>"
            f"<td>{domain.map_version or 'no map'}</td>"
            f"<td>{escape(domain.updated_at)}</td></tr>"
        )
    yield "</tbody></table>"
    yield _hidden_note(view.hidden_domains, "domains with fewer distinct URLs")
    yield "</section>"


def _hidden_note(hidden: int, what: str) -> str:
    return f"<p class=hidden-rows>{_count(hidden)} more {what} not shown</p>" if hidden else ""


def _domain_section(number: int, domain: DomainView) -> Iterator[str]:
    yield (
        f'<section class=domain id="domain-{number}"><h2>{escape(domain.domain)}</h2>'
        f"<p>{_count(domain.distinct_urls)} distinct URLs become "
        f"{_count(domain.canonical_urls)} canonical ones: {_count(domain.duplicates_saved)} "
        f"duplicates saved for an estimated {_count(domain.fetches)} fetches.</p>"
    )
    yield (
        "<h3>Parameter sprawl</h3><table class=sprawl><thead><tr><th>parameter</th>"
        "<th>distinct URLs with it</th><th>URLs it creates</th><th>dropped in</th>"
        "</tr></thead><tbody>"
    )
    for row in domain.sprawl:
        yield (
            f"<tr><td>{escape(row.name)}</td><td>{_count(row.urls_with)}</td>"
            f"<td>{_count(row.variants)}</td><td>{_count(row.dropped_in)}</td></tr>"
        )
    yield "</tbody></table>"
    yield _hidden_note(domain.hidden_params, "parameters")
    yield (
        "<h3>Patterns</h3><table class=patterns><thead><tr><th>parameter</th>"
        "<th>map says</th><th>layer</th><th>samples</th><th>changed</th><th>unchanged</th>"
        "<th>inconclusive</th><th>default values</th><th>in this list</th>"
        "</tr></thead>"
    )
    for pattern in domain.patterns:
        yield from _pattern_rows(pattern)
    yield "</table>"
    yield _hidden_note(domain.hidden_patterns, "patterns with fewer URLs")
    yield "</section>"


def _pattern_rows(pattern: PatternView) -> Iterator[str]:
    if pattern.learned:
        restored = f", restored {escape(', '.join(pattern.restored))}" if pattern.restored else ""
        about = (
            f"learned from {_count(pattern.urls_seen)} URLs, last verified "
            f"{escape(pattern.decided_at)}: {pattern.verification_samples} samples, "
            f"{pattern.verification_changed} changed, "
            f"{pattern.verification_inconclusive} inconclusive{restored}"
        )
    else:
        about = "not in the map: the conservative default"
    yield (
        f"<tbody><tr class=pattern><th colspan=9><code>{escape(pattern.key)}</code> "
        f"<span>{_count(pattern.urls_in_list)} URLs in this list · {about}</span>"
        "</th></tr>"
    )
    for param in pattern.params:
        applied = ", ".join(f"{escape(text)} ×{_count(count)}" for text, count in param.applied)
        yield (
            f'<tr class="{escape(param.map_decision)}"><td>{escape(param.name)}</td>'
            f"<td>{escape(param.map_decision or '–')}</td>"
            f"<td>{escape(param.map_layer or '–')}</td><td>{param.samples}</td>"
            f"<td>{param.changed}</td><td>{param.unchanged}</td>"
            f"<td>{param.inconclusive}</td>"
            f"<td>{escape(', '.join(param.default_values))}</td><td>{applied}</td></tr>"
        )
    yield "</tbody>"


def _skipped(view: ReportView) -> Iterator[str]:
    if not view.invalid_examples:
        return
    yield "<section id=skipped><h2>Skipped lines</h2><ul>"
    for example in view.invalid_examples:
        yield f"<li>{escape(example)}</li>"
    yield "</ul>"
    yield _hidden_note(view.invalid - len(view.invalid_examples), "invalid lines")
    yield "</section>"
