"""The package's layout for docs/architecture.md, made from the source: every package and module.

``layout(package)`` is a tree of ``flowerbed/`` as it stands on disk: each package (a folder with
Python files; its line from its ``__init__.py``) and each module, with the first sentence of its
module docstring. Files come before subpackages, each in name order. Read with ``ast``, nothing
imported, so it works on any layout, and a module without a docstring stops the generator, naming
it. ``docs_gen.tables.write_docs`` writes it between the markers ``LAYOUT_START`` and ``LAYOUT_END`` of
``ARCHITECTURE_PAGE`` (``python -m flowerbed.catalog --write``); ``tests/test_docs.py`` checks that
the page holds what this module makes now. This module imports nothing of flowerbed's.
"""

from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path

ARCHITECTURE_PAGE = Path("docs") / "architecture.md"
LAYOUT_START = "<!-- layout: "
LAYOUT_END = "<!-- end of layout -->"
WIDTH = 100  # columns of a line of the tree
INDENT = "  "  # per level of the tree

# A sentence ends at a full stop followed by white space, unless the word before it is one of
# these abbreviations ("Eq. 2", "et al. 2017", "e.g. digits").
_ABBREVIATIONS = ("e.g", "i.e", "eq", "eqs", "fig", "sec", "al", "vs", "cf", "no")
_SENTENCE_END = re.compile(r"\.(?=\s)")


class MissingDocstring(ValueError):
    """A module of the package has no module docstring (the layout has nothing to say of it)."""


def first_sentence(docstring: str) -> str:
    """The docstring's first sentence, on one line, without its full stop; ``double`` backticks
    (reStructuredText literals) become single ones. A first paragraph that ends without a full
    stop (a colon before a list, say) is taken whole, its colon dropped."""
    paragraph = " ".join(docstring.strip().split("\n\n")[0].split())
    for match in _SENTENCE_END.finditer(paragraph):
        word = paragraph[: match.start()].rsplit(" ", 1)[-1].lower()
        if word.rstrip(".") not in _ABBREVIATIONS and not word.endswith("."):
            paragraph = paragraph[: match.start()]
            break
    return paragraph.rstrip(".:").replace("``", "`")


def module_sentence(path: Path) -> str:
    """The first sentence of the module docstring of the file ``path``."""
    docstring = ast.get_docstring(ast.parse(path.read_text()), clean=True)
    if not docstring:
        raise MissingDocstring(f"{path}: no module docstring; write one (its first sentence)")
    return first_sentence(docstring)


def _is_package(folder: Path) -> bool:
    return folder.is_dir() and any(folder.rglob("*.py"))


def _entries(folder: Path, depth: int) -> list[tuple[str, str]]:
    """(the name column, the sentence) of every module and package under ``folder``."""
    pad = INDENT * depth
    rows = []
    for path in sorted(folder.glob("*.py")):
        if path.name != "__init__.py":
            rows.append((pad + path.name, module_sentence(path)))
    for sub in sorted(p for p in folder.iterdir() if p.name != "__pycache__" and _is_package(p)):
        init = sub / "__init__.py"
        rows.append((pad + sub.name + "/", module_sentence(init) if init.exists() else ""))
        rows += _entries(sub, depth + 1)
    return rows


def layout(package: Path) -> str:
    """The tree of ``package`` (a folder): its own line, then one line per module and package,
    each sentence wrapped at ``WIDTH`` columns under its column."""
    rows = [(package.name + "/", module_sentence(package / "__init__.py"))]
    rows += _entries(package, 1)
    column = max(len(name) for name, _ in rows) + 2
    lines = []
    for name, sentence in rows:
        wrapped = textwrap.wrap(sentence, WIDTH - column, break_on_hyphens=False) or [""]
        lines.append((name.ljust(column) + wrapped[0]).rstrip())
        lines += [" " * column + more for more in wrapped[1:]]
    return "\n".join(lines)


def layout_block(package: Path) -> str:
    """What the architecture page holds between the markers: the tree in a code block."""
    return "\n".join(["```text", layout(package), "```"])
