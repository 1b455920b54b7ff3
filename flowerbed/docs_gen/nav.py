"""The documentation's table of contents, written once: ``mkdocs.yml``'s ``nav``.

The README's documentation list (links to ``docs/<page>.md``, which read on GitHub) and the
site's home page's (``docs/index.md``, links to the pages) are made from it, between the markers
``NAV_START`` and ``NAV_END``: one bold line per section, with its description, then one item
per page, with its description, both from ``extra.nav_descriptions`` in mkdocs.yml (keyed by a
section's title or a page's file; optional). The home page (``index.md``) is not listed.

``python -m flowerbed.catalog --write`` rewrites both lists (``docs_gen.tables.write_docs``, with
the other generated pieces); ``tests/test_docs.py`` checks that they hold what this module makes
now from mkdocs.yml. This module imports nothing of flowerbed's (it sits below docs_gen.tables).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

MKDOCS = Path("mkdocs.yml")
README = Path("README.md")
HOME = Path("docs") / "index.md"
NAV_START = "<!-- docs list: "
NAV_END = "<!-- end of docs list -->"


class _MkdocsLoader(yaml.SafeLoader):
    """YAML with MkDocs' own tags (``!relative``, ``!ENV``) read as nothing: the nav needs none."""


_MkdocsLoader.add_multi_constructor("!", lambda loader, suffix, node: None)


def read_mkdocs(text: str) -> dict[str, Any]:
    """mkdocs.yml's settings (what ``nav`` and ``extra`` hold, at least)."""
    return yaml.load(text, Loader=_MkdocsLoader)  # a SafeLoader: no object is built


def _entry(item: Any) -> tuple[str, Any]:
    """A nav item's title and its page (a file or a URL) or its section's items."""
    if not isinstance(item, dict) or len(item) != 1:
        raise ValueError(f"mkdocs.yml: give every nav entry a title ('- Title: page.md'): {item!r}")
    return next(iter(item.items()))


def _line(title: str, description: str | None, page: str | None = None) -> str:
    """A section's bold title or a page's link, with its description (unwrapped)."""
    text = f"[{title}]({page})" if page else f"**{title}**"
    if description:
        text += (": " if page else " ") + " ".join(description.split())
    return text


def nav_list(mkdocs: dict[str, Any], docs_prefix: str) -> str:
    """The nav as markdown; links relative to docs/ (the pages', those in descriptions) are
    prefixed with ``docs_prefix`` (``"docs/"`` from the repository's root, ``""`` from a page)."""
    descriptions = mkdocs.get("extra", {}).get("nav_descriptions", {})

    def items(entries: list, depth: int) -> list[str]:
        lines = []
        for title, target in map(_entry, entries):
            if isinstance(target, list):
                lines.append("    " * depth + "- " + _line(title, descriptions.get(title)))
                lines += items(target, depth + 1)
            elif target != "index.md":
                lines.append("    " * depth + "- " + _line(title, descriptions.get(target), target))
        return lines

    blocks, pages = [], []
    for title, target in map(_entry, mkdocs["nav"]):
        if isinstance(target, list):
            blocks.append("\n".join([_line(title, descriptions.get(title)), "", *items(target, 0)]))
        else:
            pages += items([{title: target}], 0)
    text = "\n\n".join(["\n".join(pages)] * bool(pages) + blocks)
    return re.sub(r"\]\((?![a-z]+:|#|/)", "](" + docs_prefix, text)


def nav_titles(mkdocs: dict[str, Any]) -> set[str]:
    """Every section's title and every page's file in the nav (what a description may name)."""

    def names(entries: list) -> set[str]:
        found = set()
        for title, target in map(_entry, entries):
            found.update({title, *names(target)} if isinstance(target, list) else {target})
        return found

    return names(mkdocs["nav"])


def page_titles(mkdocs: dict[str, Any]) -> dict[str, str]:
    """Every page's file in the nav (``"qkt.md"``), with its title there."""

    def titles(entries: list) -> dict[str, str]:
        found = {}
        for title, target in map(_entry, entries):
            found.update(titles(target) if isinstance(target, list) else {target: title})
        return found

    return titles(mkdocs["nav"])


def nav_lists(app_dir: Path) -> dict[Path, str]:
    """The lists the README and docs/index.md hold between the markers, made now, by file."""
    mkdocs = read_mkdocs((app_dir / MKDOCS).read_text())
    return {README: nav_list(mkdocs, "docs/"), HOME: nav_list(mkdocs, "")}
