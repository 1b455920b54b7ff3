"""A small document (a title, then headings, paragraphs and tables) written two ways from the
same blocks: Markdown (``markdown``) and one self-contained HTML page (``html_page``: no script,
no link, no network; every text escaped), with the standard library alone. The reproduction
report (``reproduction_report``) says what it shows once and gets both files from it."""

from __future__ import annotations

import html
from dataclasses import dataclass

STYLE = """
body { font-family: Helvetica, Arial, sans-serif; max-width: 64em; margin: 1.5em auto;
  padding: 0 1em; color: #111; line-height: 1.4; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.6em;
  border-bottom: 1px solid #999; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 0.9em; }
th, td { border: 1px solid #bbb; padding: 0.15em 0.5em; text-align: left; }
th { background: #eee; }
"""


@dataclass(frozen=True)
class Heading:
    text: str


@dataclass(frozen=True)
class Paragraph:
    text: str


@dataclass(frozen=True)
class Table:
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


Block = Heading | Paragraph | Table


def markdown_cell(text: str) -> str:
    """A table cell's text for Markdown: a ``|`` escaped, a line break made a space."""
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(title: str, blocks: list[Block]) -> str:
    """The document as Markdown: ``# title``, ``## heading``, paragraphs, pipe tables."""
    lines = [f"# {title}", ""]
    for block in blocks:
        if isinstance(block, Heading):
            lines += [f"## {block.text}", ""]
        elif isinstance(block, Paragraph):
            lines += [block.text, ""]
        else:
            lines.append("| " + " | ".join(markdown_cell(h) for h in block.header) + " |")
            lines.append("|" + "---|" * len(block.header))
            lines += ["| " + " | ".join(markdown_cell(c) for c in row) + " |" for row in block.rows]
            lines.append("")
    return "\n".join(lines)


def html_page(title: str, blocks: list[Block]) -> str:
    """The document as one HTML page, every text escaped (``html.escape``)."""
    esc = html.escape
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{esc(title)}</title>",
        f"<style>{STYLE}</style></head><body>",
        f"<h1>{esc(title)}</h1>",
    ]
    for block in blocks:
        if isinstance(block, Heading):
            parts.append(f"<h2>{esc(block.text)}</h2>")
        elif isinstance(block, Paragraph):
            parts.append(f"<p>{esc(block.text)}</p>")
        else:
            parts.append("<table><thead><tr>")
            parts.append("".join(f"<th>{esc(h)}</th>" for h in block.header))
            parts.append("</tr></thead><tbody>")
            parts += [
                "<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in block.rows
            ]
            parts.append("</tbody></table>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
