"""What the benchmarks' report steps share: typed result files, mean ± std cells, paired
intervals, and the generated blocks of the documentation pages.

A benchmark writes one row per run into its data file (``rows.jsonl`` for a study of the study
driver, ``runs.csv`` for the others: the committed record) and makes its tables from that file
alone, into ``table.md`` beside it. A documentation page shows a table by including that file
(``docs_include``: a pymdownx.snippets line, resolved when the site is built), so that no
published number is typed by hand (``tests/test_published_tables.py`` checks the files against
their data and the pages' include lines).

Intervals: ``paired_test`` (and ``welch_test``, both in ``flowerbed.experiments.stats``) give a
95 % t interval with the two-sided p-value of the same t test; ``interval_text`` writes it, in
bold only where it excludes 0 and the values vary, "(no spread)" after a zero-width one. A report
step writes a table with ``write_table``, which records every interval the table shows and
writes them, placed by row and column, with their p-values into ``<table>.intervals.csv``, and
rewrites the Holm block (``page_block``: how many intervals the page shows, how many exclude 0,
which survive a Holm-Bonferroni correction (``holm``) over all of them) of every documentation
page that includes the table, ``benchmarks/results/holm/<page>.md``.
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from flowerbed.core.results import atomic_write
from flowerbed.experiments.provenance import (  # noqa: F401 - the benchmarks import them here
    PROVENANCE,
    UNRECORDED,
    measurement_lines,
    provenance_line,
    record_provenance,
    unrecorded_provenance_line,
)
from flowerbed.experiments.stats import Interval, Ratio, holm, paired_test, same_within
from flowerbed.sweep import mean_std


def measured_where(folder: Path) -> str:
    """Where the rows in ``folder`` were measured (``measurement_lines``), or that it is not
    known."""
    return " ".join(measurement_lines(folder)) or unrecorded_provenance_line(folder)


def joined(rows: list[dict], key: str, first: Callable = str) -> str:
    """The rows' different values of ``key`` (``first`` of each), in order, joined by "/":
    a caption's "20/40 epochs" when the rows were measured in more than one setting."""
    return "/".join(dict.fromkeys(first(r[key]) for r in rows))


def table_head(caption: str, first: str, columns: list[str]) -> list[str]:
    """A markdown table's caption paragraph and header rows."""
    return [
        caption,
        "",
        f"| {first} | " + " | ".join(columns) + " |",
        "|---|" + "---|" * len(columns),
    ]


def read_runs(path: Path, floats: tuple[str, ...], ints: tuple[str, ...]) -> list[dict]:
    """The rows of a ``runs.csv``, with the named columns as floats and ints."""
    with path.open() as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        for key in floats:
            row[key] = float(row[key])
        for key in ints:
            row[key] = int(row[key])
    return rows


def percent_cell(values: list[float]) -> str:
    """``"94.4 ± 0.7"``: mean ± sample std of fractions, in %; one value has std 0; none: –."""
    if not values:
        return "–"
    mean, std = mean_std(values)
    return f"{100 * mean:.1f} ± {100 * (std or 0.0):.1f}"


def column(runs: list[dict], key: str = "final", **labels) -> list:
    """``key`` of every run whose labels match (``column(runs, "final", defence="krum")``)."""
    return [r[key] for r in runs if all(r[name] == value for name, value in labels.items())]


def accuracy_cell(runs: list[dict], stopped_word: str, **labels) -> str:
    """mean ± std of the matching runs' final accuracy, and how many of them stopped early
    (their ``stopped`` round is not 0), e.g. ``"51.3 ± 36.1 (1/3 stopped)"``."""
    stopped = sum(1 for s in column(runs, "stopped", **labels) if s)
    finals = column(runs, "final", **labels)
    note = f" ({stopped}/{len(finals)} {stopped_word})" if stopped else ""
    return percent_cell(finals) + note


def paired_cell(runs: list[dict], mine: dict, base: dict, key: str = "final") -> str:
    """The runs labelled ``mine`` minus those labelled ``base``, paired by seed, in percentage
    points: ``"+4.2 [+1.0, +7.4]"`` (mean [95 % t interval], ``paired_test``), in bold
    where the interval excludes 0 and the differences vary; – when no seed has both."""

    def by_seed(labels: dict) -> dict[int, float]:
        return {r["seed"]: r[key] for r in runs if all(r[k] == v for k, v in labels.items())}

    mine_values, base_values = by_seed(mine), by_seed(base)
    seeds = sorted(set(mine_values) & set(base_values))
    return interval_cell([100 * (mine_values[s] - base_values[s]) for s in seeds])


def interval_cell(differences: list[float], digits: int = 1) -> str:
    """``"+4.2 [+1.0, +7.4]"``: the mean of per-seed differences and its 95 % t interval
    (``paired_test``) with ``digits`` decimals, as ``interval_text`` writes it; "(1 seed)"
    instead of an interval for one difference; – for none."""
    if not differences:
        return "–"
    test = paired_test(differences, same_within(digits))
    if test.n < 2:
        return f"{test.mean:+.{digits}f} (1 seed)"
    return interval_text(test, digits)


def ratio_cell(ratio: Ratio | None, digits: int = 2) -> str:
    """``"1.23x (1.10x – 1.40x)"``: the median of paired ratios (``stats.paired_ratio``) and
    their lowest and highest, with ``digits`` decimals; – where nothing was paired."""
    if ratio is None:
        return "–"
    return f"{ratio.median:.{digits}f}x ({ratio.low:.{digits}f}x – {ratio.high:.{digits}f}x)"


NO_SPREAD = "(no spread)"


def interval_text(interval: Interval, digits: int = 1) -> str:
    """``"+4.2 [+1.0, +7.4]"`` for any interval: in bold where it is beyond noise (it excludes
    0 and the values vary); followed by "(no spread)" where every value was the same (a zero-
    width interval, which no t test can judge). While ``recording`` is on, the interval and
    this text are recorded (the p-values of a table's data file)."""
    core = f"{interval.mean:+.{digits}f} [{interval.low:+.{digits}f}, {interval.high:+.{digits}f}]"
    if not interval.spread:
        text = f"{core} {NO_SPREAD}"
    else:
        text = f"**{core}**" if interval.beyond_noise else core
    if _recorded is not None:
        _recorded.append((interval, core))
    return text


# --- the intervals a table shows, their p-values, and the page's Holm correction ------------

_recorded: list[tuple[Interval, str]] | None = None


@contextmanager
def recording() -> Iterator[list[tuple[Interval, str]]]:
    """Inside, every interval ``interval_text`` writes is appended to the list this yields, as
    (interval, its "mean [low, high]" text), in the order written."""
    global _recorded
    outer, _recorded = _recorded, []
    try:
        yield _recorded
    finally:
        _recorded = outer


SHOWN = re.compile(r"[+\-]\d+(?:\.\d+)? \[[+\-]\d+(?:\.\d+)?, [+\-]\d+(?:\.\d+)?\]")


def _places(text: str) -> Iterator[tuple[int, str, str, str]]:
    """(table number in the file, row label (``_row_label``), column label, "mean [low, high]") of every
    interval-shaped text in ``text``, in order; outside a table: (0, "text", "", ...)."""
    part, header, in_table = 0, [], False
    for line in text.splitlines():
        if not line.startswith("|"):
            in_table = False
            for match in SHOWN.finditer(line):
                yield 0, "text", "", match.group()
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not in_table:
            part, header, in_table = part + 1, cells, True
            continue
        if set("".join(cells)) <= set("-: "):
            continue  # the separator row
        for j, cell in enumerate(cells):
            for match in SHOWN.finditer(cell):
                yield part, _row_label(cells), header[j] if j < len(header) else "", match.group()


def _row_label(cells: list[str]) -> str:
    """A table row's label: its first cell and the cells after it up to the first that starts
    like a number, a sign or a dash ("fedavg-r0 (9.4), vanilla, labeled")."""
    label = [cells[0]]
    for cell in cells[1:]:
        if not cell or cell[0].isdigit() or cell[0] in "+-−–*":
            break
        label.append(cell)
    return ", ".join(label)


def shown_intervals(text: str, recorded: list[tuple[Interval, str]]) -> list[dict]:
    """Every recorded interval, placed where ``text`` shows it (table number, row, column):
    the i-th appearance of a "mean [low, high]" text is the i-th recorded interval written so.
    Raises where an interval was recorded but is not in the text."""
    pending: dict[str, list[Interval]] = {}
    for interval, core in recorded:
        pending.setdefault(core, []).append(interval)
    rows = []
    for part, row, column_, core in _places(text):
        if pending.get(core):
            interval = pending[core].pop(0)
            rows.append(
                {"table": part, "row": row, "column": column_, "shown": core, "interval": interval}
            )
    left = [core for core, intervals in pending.items() for _ in intervals]
    if left:
        raise ValueError(f"intervals recorded but not in the table: {left}")
    return rows


def unrecorded_intervals(text: str, recorded: list[tuple[Interval, str]]) -> list[str]:
    """Interval-shaped texts of ``text`` that no recorded interval accounts for (a range such
    as "median [min, max]", or an interval made without ``interval_text``)."""
    counts: dict[str, int] = {}
    for _, core in recorded:
        counts[core] = counts.get(core, 0) + 1
    unmatched = []
    for *_, core in _places(text):
        if counts.get(core):
            counts[core] -= 1
        else:
            unmatched.append(core)
    return unmatched


INTERVAL_FIELDS = ("table", "row", "column", "shown", "test", "n", "mean", "low", "high", "p")


def _number(value: float) -> str:
    return "" if math.isnan(value) else f"{value:.6g}"


def intervals_csv(text: str, recorded: list[tuple[Interval, str]]) -> str | None:
    """The data file of the intervals a table shows: one row per interval, where it is (table
    number in the file, row, column), the text shown, the test, n, mean, bounds and the two-
    sided p-value of the t test the interval comes from (empty where the values have no
    spread); None for a table without intervals."""
    rows = shown_intervals(text, recorded)
    if not rows:
        return None
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(INTERVAL_FIELDS)
    for r in rows:
        i = r["interval"]
        writer.writerow(
            [r["table"], r["row"], r["column"], r["shown"], i.test, i.n]
            + [_number(v) for v in (i.mean, i.low, i.high, i.p)]
        )
    return out.getvalue()


def intervals_file(table: Path) -> Path:
    """Where the intervals of ``table`` (``x.md``) and their p-values are: ``x.intervals.csv``."""
    return table.with_name(table.stem + ".intervals.csv")


def write_table(table: Path, make: Callable[[], str]) -> str:
    """What a report step does with a table: ``make()`` it while recording its intervals,
    write it to ``table``, its intervals' data to ``intervals_file(table)`` (removed where it
    shows none), and the Holm block of every documentation page that includes it."""
    with recording() as recorded:
        text = make()
    atomic_write(table, lambda f: f.write(text))
    data = intervals_csv(text, recorded)
    path = intervals_file(table)
    if data is not None:
        atomic_write(path, lambda f: f.write(data))
    elif path.exists():
        path.unlink()
    for page in pages_including(table):
        write_page_block(page)
    return text


def write_page_block(page: Path) -> None:
    """Write ``page``'s Holm block (``page_block``) where the page includes it or shows any
    interval (tests/test_published_tables.py then asks the page to include it)."""
    path = page_block_file(page)
    if docs_include(path) in page.read_text() or any(map(read_intervals, page_tables(page))):
        block = page_block(page)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, lambda f: f.write(block))


ROOT = Path(__file__).resolve().parent.parent
PAGE_BLOCKS = ROOT / "benchmarks" / "results" / "holm"


def page_block_file(page: Path) -> Path:
    """The generated block of a documentation page: ``benchmarks/results/holm/<page>.md``."""
    return PAGE_BLOCKS / page.name


def page_tables(page: Path) -> list[Path]:
    """The result tables ``page`` includes, in order (its Holm block aside)."""
    tables = []
    for name in re.findall(r'--8<-- "(benchmarks/results/[^"]+)"', page.read_text()):
        path = ROOT / name
        if path.parent != PAGE_BLOCKS:
            tables.append(path)
    return tables


def pages_including(table: Path) -> list[Path]:
    """The documentation pages that include ``table``: none for a table outside the checkout
    (a measurement written into another ``--out``)."""
    if not table.resolve().is_relative_to(ROOT):
        return []
    line = docs_include(table)
    return [page for page in sorted((ROOT / "docs").glob("*.md")) if line in page.read_text()]


def read_intervals(table: Path) -> list[dict]:
    """The rows of ``intervals_file(table)`` (none where it does not exist), p as a float."""
    path = intervals_file(table)
    if not path.is_file():
        return []
    with path.open() as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        row["p"] = float(row["p"]) if row["p"] else math.nan
        row["low"], row["high"] = float(row["low"]), float(row["high"])
    return rows


def page_block(page: Path, alpha: float = 0.05) -> str:
    """The block that says how many intervals ``page`` shows (every interval of the tables it
    includes, from their intervals' data files), how many exclude 0, and which of them survive
    a Holm correction over all of them at family-wise ``alpha``."""
    rows = []
    sources = []
    for table in page_tables(page):
        found = read_intervals(table)
        if found:
            sources.append(f"`{intervals_file(table).relative_to(ROOT).as_posix()}`")
        name = table.relative_to(ROOT / "benchmarks" / "results").as_posix()
        rows += [{**r, "file": name} for r in found]
    m = len(rows)
    if not m:
        return (
            "**Multiple comparisons.** This page shows no intervals: its tables hold"
            " measurements (means, medians, ranges), not tests of a difference.\n"
        )
    adjusted, survives = holm([r["p"] for r in rows], alpha)
    beyond = [i for i, r in enumerate(rows) if not math.isnan(r["p"]) and r["p"] < alpha]
    flat = [i for i, r in enumerate(rows) if math.isnan(r["p"])]
    kept = [i for i in beyond if survives[i]]
    flat_text = (
        f"; {len(flat)} more {'has' if len(flat) == 1 else 'have'} no spread (every seed's difference the same, marked"
        f' "{NO_SPREAD}": no t test applies, so they count in the family but cannot survive)'
        if flat
        else ""
    )
    text = (
        f"**Multiple comparisons.** This page shows {m} intervals (95 % t intervals, each with"
        f" the two-sided p-value of its t test); {len(beyond)} exclude zero (bold){flat_text}."
        f" {len(kept)} of the {len(beyond)} survive a Holm correction over the page's {m}"
        f" intervals at family-wise {alpha:g}"
    )
    text += ":" if beyond else "."
    lines = [text]
    if beyond:
        lines += [
            "",
            "| table | row | column | interval | p | Holm-adjusted p | survives |",
            "|---|---|---|---|---|---|---|",
        ]
        for i in beyond:
            r = rows[i]
            where = r["file"] if r["table"] == "0" else f"{r['file']}, table {r['table']}"
            lines.append(
                f"| {where} | {r['row']} | {r['column']} | {r['shown']} | {r['p']:.2g}"
                f" | {min(adjusted[i], 1.0):.2g} | {'yes' if survives[i] else 'no'} |"
            )
    lines += [
        "",
        "Made by the report steps from the intervals' data files (p-values per interval): "
        + ", ".join(sources)
        + ".",
    ]
    return "\n".join(lines) + "\n"


def docs_include(table: Path) -> str:
    """The line of a docs page that includes ``table`` (a file under the repository root) when
    the site is built: ``--8<-- "benchmarks/results/<name>/table.md"`` (pymdownx.snippets)."""
    root = Path(__file__).resolve().parent.parent
    return f'--8<-- "{table.resolve().relative_to(root).as_posix()}"'
