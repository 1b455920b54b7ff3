"""The architecture page's layout (``flowerbed.docs_gen.layout``): a tree of any package's modules
and packages, each with the first sentence of its docstring, read from the source alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from flowerbed.docs_gen.layout import WIDTH, MissingDocstring, first_sentence, layout


def write(path: Path, docstring: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'"""{docstring}"""\n\nVALUE = 1\n')


@pytest.mark.parametrize(
    "docstring, sentence",
    [
        ("One sentence.", "One sentence"),
        ("First one. Second one.", "First one"),
        ("Wrapped over\n  two lines. Then more.", "Wrapped over two lines"),
        (
            "As in Eq. 2 of Li et al. 2020, e.g. digits. Rest.",
            "As in Eq. 2 of Li et al. 2020, e.g. digits",
        ),
        ("A ``literal`` and `x` stay code.", "A `literal` and `x` stay code"),
        ("A list follows:\n\n* one\n* two", "A list follows"),
        ("Version 1.42 of flwr. Rest.", "Version 1.42 of flwr"),
    ],
)
def test_first_sentence(docstring, sentence):
    assert first_sentence(docstring) == sentence


def test_a_tree_lists_files_then_packages_each_by_name(tmp_path):
    package = tmp_path / "pkg"
    write(package / "__init__.py", "The package.")
    write(package / "zeta.py", "Last by name. Not shown.")
    write(package / "alpha.py", "First by name.")
    write(package / "sub" / "__init__.py", "A subpackage.")
    write(package / "sub" / "inner.py", "Inside it.")
    (package / "data").mkdir()  # a folder without Python files is no package
    (package / "data" / "table.csv").write_text("a,b\n")
    assert layout(package) == (
        "pkg/          The package\n"
        "  alpha.py    First by name\n"
        "  zeta.py     Last by name\n"
        "  sub/        A subpackage\n"
        "    inner.py  Inside it"
    )


def test_a_long_sentence_wraps_under_its_column(tmp_path):
    package = tmp_path / "pkg"
    write(package / "__init__.py", "P.")
    write(package / "long.py", " ".join(["word"] * 40) + ".")
    lines = layout(package).splitlines()[1:]
    assert len(lines) > 1 and all(len(line) <= WIDTH for line in lines)
    assert all(line.startswith(" " * len("  long.py  ")) for line in lines[1:])
    assert " ".join(" ".join(lines).split()[1:]) == " ".join(["word"] * 40)


def test_a_module_without_a_docstring_is_named(tmp_path):
    package = tmp_path / "pkg"
    write(package / "__init__.py", "The package.")
    (package / "bare.py").write_text("VALUE = 1\n")
    with pytest.raises(MissingDocstring, match="bare.py"):
        layout(package)
