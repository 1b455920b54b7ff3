"""The documentation: the MkDocs site builds with ``--strict`` (offline) and a broken link fails
that build; the built site reads from disk (file://: links to ``.html`` files, the search index
as a script, no script from the network); the generated pieces (the README's protocol table,
the run-config and command reference pages, the documentation lists of the README and the home
page, from mkdocs.yml's nav, the strategies page's table and the architecture page's layout) are
what ``flowerbed.docs_gen``'s ``tables``, ``nav`` and ``layout`` make now;
the README stays short.

The generated files are rewritten by ``python -m flowerbed.catalog --write``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from flowerbed.catalog import PROTOCOLS, SETTING_GROUPS, SETTINGS
from flowerbed.cli import parser
from flowerbed.docs_gen import layout, nav, tables

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
REGENERATE = "regenerate with python -m flowerbed.catalog --write"


def mkdocs_build(root: Path, site: Path) -> tuple[subprocess.CompletedProcess, float]:
    """``mkdocs build --strict`` of ``root``'s mkdocs.yml (the venv's mkdocs), and its seconds."""
    mkdocs = Path(sys.executable).parent / "mkdocs"
    command = [str(mkdocs)] if mkdocs.exists() else [sys.executable, "-m", "mkdocs"]
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    start = time.perf_counter()
    result = subprocess.run(
        [*command, "build", "--strict", "--site-dir", str(site)],
        check=False,
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return result, time.perf_counter() - start


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The repository's site, built once for the tests that read it."""
    site = tmp_path_factory.mktemp("docs") / "site"
    result, seconds = mkdocs_build(ROOT, site)
    assert result.returncode == 0, result.stdout + result.stderr
    print(f"mkdocs build --strict: {seconds:.1f} s")
    return site


def test_the_site_builds_strictly_offline(site):
    home = (site / "index.html").read_text()
    # the README's sections the home page includes (pymdownx.snippets) are there
    assert "flowerbed run" in re.sub(r"<[^>]+>", "", home)
    assert all(f"<code>{name}</code>" in home for name in PROTOCOLS)
    # the measured tables included from benchmarks/results/ and the plots the hook copies
    robustness = (site / "robustness.html").read_text()
    assert "fedavg+clip" in robustness and "--8&lt;--" not in robustness
    assert (site / "results" / "robustness" / "accuracy.png").is_file()
    # no font or script is fetched from the network: the search's worker shim is the site's own
    assert "fonts.googleapis.com" not in home
    assert not re.findall(r'<script src="(?:https?:)?//[^"]*"', home)
    assert '<script src="assets/javascripts/iframe-worker-shim.js">' in home
    assert (site / "assets" / "javascripts" / "iframe-worker-shim.js").is_file()


def test_the_built_site_reads_from_disk(site):
    """Opened from file:// (a zipped site/), a link must name a file (a folder URL opens a
    listing) and the search index must load as a script (the offline plugin's
    search/search_index.js: ``var __index = <the JSON index>``)."""
    home = (site / "index.html").read_text()
    assert 'href="tutorial-first-run.html"' in home and 'href="tutorial-first-run/"' not in home
    not_files = []
    for page in site.rglob("*.html"):
        if page.name == "404.html":  # the server's page for a missing URL: absolute links
            continue
        for url in re.findall(r'(?:href|src)="([^"#?]+)[^"]*"', page.read_text()):
            if not re.match(r"[a-z]+:|//", url) and not (page.parent / url).is_file():
                not_files.append(f"{page.relative_to(site)}: {url}")
    assert not not_files, not_files[:10]
    script = (site / "search" / "search_index.js").read_text()
    assert script.startswith("var __index = {")
    assert '"location":"tutorial-first-run.html"' in script.replace(" ", "")


def test_a_broken_link_fails_the_strict_build(tmp_path):
    """The same site with one link to a page that does not exist does not build."""
    root = tmp_path / "repo"
    shutil.copytree(ROOT / "docs", root / "docs")
    for name in ("mkdocs.yml", "README.md"):
        shutil.copy(ROOT / name, root / name)
    (root / "benchmarks").symlink_to(ROOT / "benchmarks")  # the included result files
    (root / "reproductions").symlink_to(ROOT / "reproductions")
    page = root / "docs" / "gpus.md"
    page.write_text(page.read_text() + "\nSee [the missing page](no-such-page.md).\n")
    result, _ = mkdocs_build(root, tmp_path / "site")
    assert result.returncode != 0
    assert "no-such-page.md" in result.stdout + result.stderr


def test_a_broken_anchor_fails_the_strict_build(tmp_path):
    root = tmp_path / "repo"
    shutil.copytree(ROOT / "docs", root / "docs")
    for name in ("mkdocs.yml", "README.md"):
        shutil.copy(ROOT / name, root / name)
    (root / "benchmarks").symlink_to(ROOT / "benchmarks")
    (root / "reproductions").symlink_to(ROOT / "reproductions")
    page = root / "docs" / "gpus.md"
    page.write_text(page.read_text() + "\nSee [resume](resume.md#no-such-section).\n")
    result, _ = mkdocs_build(root, tmp_path / "site")
    assert result.returncode != 0
    assert "no-such-section" in result.stdout + result.stderr


def test_the_readme_protocol_table_is_generated():
    block = tables.readme_protocol_block(README)
    assert block == tables.protocol_table(PROTOCOLS, ROOT), REGENERATE


def test_the_run_config_reference_is_what_the_generator_makes_now():
    page = (ROOT / tables.RUN_CONFIG_PAGE).read_text()
    assert page == tables.run_config_reference(SETTING_GROUPS, PROTOCOLS), REGENERATE


def test_the_commands_reference_is_what_the_generator_makes_now():
    page = (ROOT / tables.COMMANDS_PAGE).read_text()
    assert page == tables.commands_reference(), REGENERATE


def test_the_documentation_lists_are_generated_from_the_nav():
    """The README's and the home page's lists hold what mkdocs.yml's nav makes now."""
    for name, block in nav.nav_lists(ROOT).items():
        text = (ROOT / name).read_text()
        assert tables.marked_block(text, nav.NAV_START, nav.NAV_END) == block, (
            f"{name}: {REGENERATE}"
        )


def test_the_write_path_rewrites_the_lists_from_the_nav(tmp_path):
    """``python -m flowerbed.catalog --write`` (``tables.write_docs``): a page renamed in
    mkdocs.yml's nav is renamed in both lists."""
    for name in (
        "mkdocs.yml",
        "README.md",
        "docs/index.md",
        "docs/strategies.md",
        "docs/robustness.md",
    ):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    mkdocs = tmp_path / "mkdocs.yml"
    mkdocs.write_text(mkdocs.read_text().replace("- Use GPUs: gpus.md", "- GPUs, renamed: gpus.md"))
    mkdocs.write_text(mkdocs.read_text().replace("(CTL): ctl.md", "(CTL), renamed: ctl.md"))
    # the layout of a package with one module: the architecture page's block is rewritten
    (tmp_path / "flowerbed").mkdir()
    (tmp_path / "flowerbed" / "__init__.py").write_text('"""A package."""\n')
    (tmp_path / "flowerbed" / "only.py").write_text('"""The only module. More."""\n')
    (tmp_path / layout.ARCHITECTURE_PAGE).write_text(
        f"# A\n\n{layout.LAYOUT_START}-->\nstale\n{layout.LAYOUT_END}\n\nrest\n"
    )
    tables.write_docs(tmp_path, SETTING_GROUPS, PROTOCOLS)
    assert "- [GPUs, renamed](docs/gpus.md)" in (tmp_path / "README.md").read_text()
    assert "- [GPUs, renamed](gpus.md)" in (tmp_path / "docs" / "index.md").read_text()
    strategies = (tmp_path / tables.STRATEGIES_PAGE).read_text()
    assert "see [Collaborative transfer learning (CTL), renamed](ctl.md)" in strategies
    architecture = (tmp_path / layout.ARCHITECTURE_PAGE).read_text()
    assert "stale" not in architecture and architecture.endswith("\n\nrest\n")
    assert "\nflowerbed/  A package\n  only.py   The only module\n" in architecture


def test_every_nav_description_names_a_section_or_page_of_the_nav():
    mkdocs = nav.read_mkdocs((ROOT / "mkdocs.yml").read_text())
    stale = set(mkdocs["extra"]["nav_descriptions"]) - nav.nav_titles(mkdocs)
    assert not stale, f"mkdocs.yml's nav_descriptions name no nav entry: {sorted(stale)}"


def test_a_nav_list_links_the_pages_from_where_it_is_read():
    mkdocs = {
        "nav": [
            {"Home": "index.md"},
            {"Guides": [{"One": "one.md"}, {"Flower": "https://flower.ai"}]},
        ],
        "extra": {"nav_descriptions": {"Guides": "do things.", "one.md": "see [two](two.md)"}},
    }
    expected = (
        "**Guides** do things.\n\n- [One](docs/one.md): see [two](docs/two.md)\n"
        "- [Flower](https://flower.ai)"
    )
    assert nav.nav_list(mkdocs, "docs/") == expected
    assert nav.nav_list(mkdocs, "") == expected.replace("docs/", "")
    untitled = {"nav": [{"Guides": ["one.md"]}]}
    with pytest.raises(ValueError, match="title"):
        nav.nav_list(untitled, "")


def test_every_key_and_command_is_in_the_reference():
    keys = tables.run_config_reference(SETTING_GROUPS, PROTOCOLS)
    assert all(keys.count(f"| `{key}` |") == 1 for key in SETTINGS)
    commands = tables.commands_reference()
    for action in parser()._actions:
        for name in getattr(action, "choices", None) or ():
            assert f"## `flowerbed {name}`" in commands


def test_the_strategies_table_is_generated_from_the_specs():
    """docs/strategies.md's table holds what the protocols' ``summary`` and ``paper`` make now,
    one row per protocol, each protocol's own page linked where the nav has one."""
    page = (ROOT / tables.STRATEGIES_PAGE).read_text()
    block = tables.marked_block(page, tables.STRATEGIES_START, tables.STRATEGIES_END)
    mkdocs = nav.read_mkdocs((ROOT / "mkdocs.yml").read_text())
    assert block == tables.strategy_table(PROTOCOLS, nav.page_titles(mkdocs)), REGENERATE
    rows = [
        line for line in block.splitlines() if line.startswith("| `") and "strategy" not in line
    ]
    assert [row.split("`")[1] for row in rows] == list(PROTOCOLS)
    assert "see [Collaborative transfer learning (CTL)](ctl.md)" in block


def test_the_robust_aggregation_table_is_generated_from_the_specs():
    """docs/robustness.md's table: the strategies table's rows of every robust rule."""
    page = (ROOT / tables.ROBUSTNESS_PAGE).read_text()
    block = tables.marked_block(page, tables.ROBUST_START, tables.ROBUST_END)
    mkdocs = nav.read_mkdocs((ROOT / "mkdocs.yml").read_text())
    assert block == tables.robust_table(PROTOCOLS, nav.page_titles(mkdocs)), REGENERATE
    rows = [line.split("`")[1] for line in block.splitlines()[2:]]
    assert rows == ["fedmedian", "krum", "multikrum", "bulyan", "trimmedavg"]


def test_a_strategy_row_is_its_specs_summary_and_paper():
    """A ``|`` in a summary is escaped; a page named after the protocol is linked with its title."""
    spec = PROTOCOLS["fedavg"]
    odd = replace(spec, name="odd", summary="mean over |S| clients", paper="Someone, 2024")
    table = tables.strategy_table({"odd": odd}, {"odd.md": "The odd one"})
    expected = "| `odd` | mean over \\|S\\| clients; see [The odd one](odd.md) | Someone, 2024 |"
    assert table.splitlines()[2] == expected
    assert "see [" not in tables.strategy_table({"odd": odd}, {"qkt.md": "QKT"})


def test_the_architecture_layout_is_generated_from_the_package():
    page = (ROOT / layout.ARCHITECTURE_PAGE).read_text()
    block = tables.marked_block(page, layout.LAYOUT_START, layout.LAYOUT_END)
    assert block == layout.layout_block(ROOT / "flowerbed"), REGENERATE


def test_every_protocol_says_what_it_is_and_what_crosses_the_network():
    for name, spec in PROTOCOLS.items():
        assert spec.kind and spec.exchanged, name


def test_the_readme_is_short_and_holds_the_two_commands():
    assert len(README.splitlines()) <= 250
    assert (
        "python3 -m venv .venv && . .venv/bin/activate && pip install -e . && flowerbed run"
    ) in README
    assert (
        '. .venv/bin/activate && pip install -e ".[test]" && ruff format --check . && ruff check .'
        " && pytest -q"
    ) in README


def test_the_home_pages_protocol_table_is_generated_with_links_from_docs():
    home = (ROOT / "docs" / "index.md").read_text()
    block = tables.marked_block(home, tables.PROTOCOLS_START, tables.PROTOCOLS_END)
    assert block == tables.protocol_table(PROTOCOLS, ROOT, from_docs=True), REGENERATE
    # a protocol whose paper has published results links them, from each page's folder
    readme_row = next(line for line in README.splitlines() if line.startswith("| `ctl` |"))
    assert "([reproduction](docs/reproduction-ctl.md))" in readme_row
    assert "([reproduction](reproduction-ctl.md))" in block
