"""The HTML of a report page: escaping, number formats, counted words, tables, sections, the
page."""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Iterable

import numpy as np

MAX_TABLE_ROWS = 25  # longer tables show evenly spaced rows, the first and the last


STYLE = """
body { font-family: Helvetica, Arial, sans-serif; max-width: 60em; margin: 1.5em auto;
  padding: 0 1em; color: #111; line-height: 1.4; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; } h2 { font-size: 1.2em; margin-top: 1.6em;
  border-bottom: 1px solid #999; page-break-after: avoid; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 0.9em; }
th, td { border: 1px solid #bbb; padding: 0.15em 0.5em; text-align: right; }
th { background: #eee; } td.text, th.text { text-align: left; }
img { max-width: 100%; page-break-inside: avoid; display: block; margin: 0.5em 0; }
.absent { color: #555; font-style: italic; }
.status-completed { color: #185; font-weight: bold; }
.status-failed, .status-interrupted, .status-running { color: #b20; font-weight: bold; }
pre { background: #f4f4f4; padding: 0.6em; overflow-x: auto; font-size: 0.85em; }
nav a { margin-right: 0.8em; }
tr.groups th { text-align: center; }
.wide { overflow-x: auto; }
@media print {
  body { max-width: none; margin: 0; padding: 0; font-size: 10pt; }
  pre { white-space: pre-wrap; overflow-wrap: anywhere; }
  .wide { overflow-x: visible; } .wide table { font-size: 0.8em; }
  table, tr, thead { page-break-inside: avoid; }
}
"""  # .wide: a table that may outgrow the page (a confusion matrix of many classes) scrolls


def img(png: bytes, alt: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def esc(value) -> str:
    return html.escape(str(value))


def plural(count: int, word: str, many: str = "") -> str:
    """``count`` and ``word``, with ``many`` (``word`` + s unless given) when it is not 1."""
    return f"{count} {word if count == 1 else many or word + 's'}"


FIXED_RANGE = (0.01, 1e6)  # floats in it print with fixed decimals; others keep their magnitude


def fmt(value, digits: int = 4) -> str:
    """A table cell's text. Floats with 0.01 <= |x| < 10^6 (and zero) get ``digits`` decimals,
    so a column of comparable values lines up (0.8734, 0.9000); smaller and larger ones get
    ``digits`` significant digits (1e-05, 0.001234, 2.5e+07), never 0.0000; NaN reads
    ``NaN`` and infinities ``inf``, ``-inf``; None (no value) reads ``-``."""
    if isinstance(value, bool) or value is None:
        return "-" if value is None else str(value)
    if isinstance(value, (int, np.integer)):
        return f"{value:,}" if abs(value) >= 10000 else str(value)
    if isinstance(value, (float, np.floating)):
        value = float(value)
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        low, high = FIXED_RANGE
        if value == 0 or low <= abs(value) < high:
            return f"{value:.{digits}f}"
        return f"{value:.{digits}g}"
    return str(value)


def setting_text(value) -> str:
    """A run-config value as written: floats in their shortest exact form (``1e-05``,
    ``0.05``, ``3600.0``), booleans as in TOML (``true``), strings quoted only when empty."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return repr(value)
    if value == "":
        return '""'
    return str(value)


def table(
    header: list[str],
    rows: Iterable[list],
    text_columns: Iterable[int] = (0,),
    groups: Iterable[tuple[str, int]] = (),
) -> str:
    """An HTML table; ``groups``: (label, columns) headings above ``header``, left to right
    (a two-level header keeps many columns narrow: "AUROC" over "server", "clients")."""
    text_columns = set(text_columns)

    def cell(tag: str, i: int, value) -> str:
        kind = ' class="text"' if i in text_columns else ""
        return f"<{tag}{kind}>{esc(fmt(value))}</{tag}>"

    lines = ["<table><thead>"]
    if groups := list(groups):
        spans = "".join(f'<th colspan="{n}">{esc(label)}</th>' for label, n in groups)
        lines.append(f'<tr class="groups">{spans}</tr>')
    lines.append("<tr>" + "".join(cell("th", i, h) for i, h in enumerate(header)) + "</tr>")
    lines.append("</thead>")
    for row in rows:
        lines.append("<tr>" + "".join(cell("td", i, v) for i, v in enumerate(row)) + "</tr>")
    return "\n".join(lines + ["</table>"])


def shown(rows: list, limit: int = MAX_TABLE_ROWS) -> tuple[list, str]:
    """At most ``limit`` evenly spaced rows (always the first and the last), and a note."""
    if len(rows) <= limit:
        return rows, ""
    keep = sorted({round(float(i)) for i in np.linspace(0, len(rows) - 1, limit)})
    return [rows[i] for i in keep], f"<p>{len(keep)} of {len(rows)} rows shown, evenly spaced.</p>"


def absent(what: str) -> str:
    return f'<p class="absent">Absent: {esc(what)}</p>'


class Section:
    def __init__(self, anchor: str, title: str, body: str) -> None:
        self.anchor, self.title, self.body = anchor, title, body

    def html(self) -> str:
        return f'<h2 id="{self.anchor}">{esc(self.title)}</h2>\n{self.body}'


def page(title: str, subtitle: str, sections: list[Section]) -> str:
    nav = " ".join(f'<a href="#{s.anchor}">{esc(s.title)}</a>' for s in sections)
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f"<title>{esc(title)}</title>",
            f"<style>{STYLE}</style></head><body>",
            f"<h1>{esc(title)}</h1>",
            f"<p>{esc(subtitle)}</p>",
            f"<nav>{nav}</nav>",
            *(s.html() for s in sections),
            "</body></html>",
        ]
    )
