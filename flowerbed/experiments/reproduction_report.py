"""The report of a reproduction, ``reproduction.md`` and ``report.html`` (the same content):
the paper's headline table beside ours, and a verdict on each ordering the paper claims.

``reproduction_tables(table, cells, regime, budget, seconds)`` makes both from the paper's
table (``papers.PaperTable``), the measured ``Cell``s, the regime's differences, the budget's
name and the measured time. What they show:

* the title and where the paper's numbers are printed;
* per row of the paper's table: method, setting, the paper's number, ours as mean ± std over
  seeds (std with n - 1; "not measured" for a cell without a value); a value that is not
  finite (CTL's Local never reaching its target: ``math.inf``) is shown as ``∞``, never as a
  number, with the mean ± std of the finite seeds beside it;
* per claim (better, worse, setting): the paired per-seed differences (better - worse, the
  seeds both have), their mean and 95 % t interval, in how many seeds the claimed order holds,
  and the verdict (``verdicts.verdict`` with the table's ``higher_is_better``);
* how many intervals exclude 0 against how many would by chance alone
  (``verdicts.chance_crossings``);
* the regime's differences from the paper's, the budget, the measured time, and where each
  invocation measured its rows (``provenance.provenance_lines``: commit, command, machine, date),
  with how many of the folder's runs no invocation records (measured before ``measured.jsonl``
  existed, or by an invocation killed before its end);
* then ``more``: the reproduction's other parts (``reproduction.Part``: a result shown only in a
  figure, ``figure_report``; the FL + KD benchmark's Table 4, ``flkd_table4_report``).

A claim whose paired values include an infinity (CTL's Local never reaching its target) is
judged by the sign test instead of a t interval (``verdicts.sign_verdict``): the distribution-free
95 % interval of the median per-seed difference, where 12 - ∞ is -∞ and two ∞ of the same sign
are a tie. A t interval of such differences has no meaning, and putting a number in the place
of ∞ (the last round + 1, say) would make the interval depend on that choice; the sign test uses
only the differences' order. Its interval needs at least 6 seeds to exclude 0. A claim with a
NaN value is "not judged" (reason ``NOT_FINITE``), and so is a claim about a method without any
cell in its setting (``not_measured``: a method flowerbed does not run, such as FedSA's FedMD+).
Every claim also shows, per seed, both values
and whether the claimed order holds (∞ is behind every finite value when lower is better, ahead
of it when higher is; two ∞ are a tie, so the order does not hold). Only judged claims (at least
2 seeds) count in the chance line, and a t interval without spread (``stats.Interval.spread``)
never counts as excluding 0.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from .document import Block, Heading, Paragraph, Table, html_page, markdown
from .papers import PaperFigure, PaperSummary, PaperTable
from .reproduction import Cell, RegimeDifference
from .stats import SIGN_TEST, Interval, paired_test
from .verdicts import NO_SEED, NOT_JUDGED, Verdict, chance_crossings, sign_verdict, verdict

MARKDOWN, HTML = "reproduction.md", "report.html"
NOT_FINITE = "a value is NaN: no interval (see how claims are judged)"


def not_measured(methods: list[str]) -> str:
    """The reason of a claim about methods without a cell: they were not measured."""
    return f"{' and '.join(methods)} not measured here"


NOT_MEASURED = "not measured"


@dataclass(frozen=True)
class ClaimResult:
    """The judgement of one claim: the seeds both methods have, the per-seed values of each,
    the differences (better - worse), in how many seeds the claimed order holds, the verdict."""

    better: str
    worse: str
    setting: str
    seeds: tuple[int, ...]
    better_values: tuple[float, ...]
    worse_values: tuple[float, ...]
    ordered: int
    verdict: Verdict

    @property
    def differences(self) -> tuple[float, ...]:
        return tuple(a - b for a, b in zip(self.better_values, self.worse_values, strict=True))

    @property
    def judged(self) -> bool:
        return self.verdict.word != NOT_JUDGED


def number(value: float, digits: int = 2) -> str:
    """A value as shown: ``∞``, ``-∞`` or ``NaN`` where it is not finite, else ``digits``
    decimals."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "∞" if value > 0 else "-∞"
    return f"{value:.{digits}f}"


def paper_number(value: float) -> str:
    """A paper's number, shortest form (12, 44.19), ``∞`` where it is not finite."""
    return number(value) if not math.isfinite(value) else f"{value:g}"


def values_of(cells: list[Cell], method: str, setting: str) -> dict[int, float]:
    """{seed: value} of one paper cell; ValueError if a seed has two values."""
    found: dict[int, float] = {}
    for cell in cells:
        if cell.method == method and cell.setting == setting:
            if cell.seed in found:
                raise ValueError(f"two values for {method!r} {setting!r} seed {cell.seed}")
            found[cell.seed] = cell.value
    return found


def summary(values: list[float]) -> str:
    """Ours for a cell: "mean ± std (n seeds)", the mean alone for one seed, "not measured"
    for none; with values that are not finite, how many and the finite ones' mean ± std."""
    if not values:
        return NOT_MEASURED
    finite = [v for v in values if math.isfinite(v)]
    seeds = f"{len(values)} seed" + ("s" if len(values) > 1 else "")
    if len(finite) < len(values):
        shown = sorted({number(v) for v in values if not math.isfinite(v)})
        text = f"{' / '.join(shown)} in {len(values) - len(finite)} of {seeds}"
        return text + (f"; the other {len(finite)}: {mean_std(finite)}" if finite else "")
    return f"{mean_std(finite)} ({seeds})"


def mean_std(values: list[float]) -> str:
    if len(values) == 1:
        return number(values[0])
    return f"{number(statistics.mean(values))} ± {number(statistics.stdev(values))}"


def ahead(a: float, b: float, higher_is_better: bool) -> bool:
    """Whether ``a`` is strictly on the better side of ``b``."""
    return a > b if higher_is_better else a < b


def judge(
    table: PaperTable | PaperFigure | PaperSummary,
    cells: list[Cell],
    claim: tuple[str, str, str],
) -> ClaimResult:
    """A claim's paired per-seed values and verdict (module docstring); of a figure's or a
    summary's claim too, which is judged alike (its ``higher_is_better`` is all ``judge``
    reads of any)."""
    better, worse, setting = claim
    a, b = values_of(cells, better, setting), values_of(cells, worse, setting)
    seeds = tuple(sorted(set(a) & set(b)))
    pairs = [(a[s], b[s]) for s in seeds]
    missing = [method for method, values in ((better, a), (worse, b)) if not values]
    if missing:
        judged = Verdict(NOT_JUDGED, NO_SEED, not_measured(missing))
    elif all(math.isfinite(x) and math.isfinite(y) for x, y in pairs):
        judged = verdict([x - y for x, y in pairs], table.higher_is_better)
    elif not any(math.isnan(x) or math.isnan(y) for x, y in pairs):  # an infinity
        differences = [0.0 if x == y else x - y for x, y in pairs]  # ∞ vs ∞: a tie
        judged = sign_verdict(differences, table.higher_is_better)
    else:
        no_interval = Interval(
            math.nan, math.nan, math.nan, len(seeds), math.nan, False, "paired t"
        )
        judged = Verdict(NOT_JUDGED, no_interval, NOT_FINITE)
    return ClaimResult(
        better,
        worse,
        setting,
        seeds,
        tuple(x for x, _ in pairs),
        tuple(y for _, y in pairs),
        sum(ahead(x, y, table.higher_is_better) for x, y in pairs),
        judged,
    )


def judge_claims(table: PaperTable, cells: list[Cell]) -> list[ClaimResult]:
    return [judge(table, cells, claim) for claim in table.claims]


def claim_name(result: ClaimResult) -> str:
    where = f" ({result.setting})" if result.setting else ""
    return f"{result.better} ahead of {result.worse}{where}"


def interval_text(interval: Interval) -> str:
    """ "[low, high]", "(no spread)" where the differences do not vary, "–" without one; a
    sign test's bounds may be infinite ("[-∞, -∞] (sign test)")."""
    if interval.test == SIGN_TEST:
        return f"[{number(interval.low)}, {number(interval.high)}] (sign test)"
    if not math.isfinite(interval.low) or not math.isfinite(interval.high):
        return "–"
    text = f"[{number(interval.low)}, {number(interval.high)}]"
    return text + (" (no spread)" if not interval.spread else "")


def centre_text(interval: Interval) -> str:
    """The interval's centre, named: the mean of a t interval, the median of a sign test's."""
    return f"{'median' if interval.test == SIGN_TEST else 'mean'} {number(interval.mean)}"


def interval_cells(values: list[float]) -> tuple[str, str]:
    """The mean and the 95 % t interval of the finite ``values`` as a table shows them, with no
    verdict ("–" for none)."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return "–", "–"
    interval = paired_test(finite)
    return centre_text(interval), interval_text(interval)


def verdict_line(name: str, verdict: Verdict, centre: str, counted: str = "") -> str:
    """A line as the command prints it: the name, the verdict's word, then in brackets
    ``centre`` (the interval, where judged), ``counted`` and the reason."""
    shown = centre if verdict.word != NOT_JUDGED else ""
    return f"{name}: {verdict.word} ({shown}{counted}{verdict.reason})"


def claim_line(result: ClaimResult) -> str:
    """One line per claim, as the command prints it."""
    interval = result.verdict.interval
    return verdict_line(
        claim_name(result),
        result.verdict,
        f"{centre_text(interval)}, 95 % interval {interval_text(interval)}, ",
        f"order holds in {result.ordered} of {len(result.seeds)} seeds; ",
    )


def chance_line(verdicts: list[Verdict]) -> str:
    """How many of the judged ``verdicts``' intervals exclude 0, and how many would by chance."""
    judged = [v for v in verdicts if v.word != NOT_JUDGED]
    excluding = sum(v.interval.beyond_noise for v in judged)
    return (
        f"{excluding} of {len(judged)} intervals exclude 0; about"
        f" {chance_crossings(len(judged)):g} would by chance alone (claims not judged have no"
        " interval; an interval without spread is not counted as excluding 0)."
    )


def difference_text(better: float, worse: float) -> str:
    if math.isfinite(better) and math.isfinite(worse):
        return f"{better - worse:+.2f}"
    return f"{number(better)} vs {number(worse)}"


def paper_blocks(table: PaperTable, cells: list[Cell]) -> list[Block]:
    with_setting = any(row.setting for row in table.rows)
    header = ("method", "setting", "paper", "ours") if with_setting else ("method", "paper", "ours")
    rows = []
    for row in table.rows:
        ours = summary(list(values_of(cells, row.method, row.setting).values()))
        setting = (row.setting,) if with_setting else ()
        rows.append((row.method, *setting, paper_number(row.value), ours))
    return [
        Heading("The paper's numbers and ours"),
        Paragraph(
            f"Metric: {table.metric}; {'higher' if table.higher_is_better else 'lower'} is"
            " better. Ours: mean ± standard deviation over seeds (n - 1 in the denominator)"
            + ("; ∞: not finite (the target was never reached)." if infinite(cells) else ".")
        ),
        Table(header, tuple(rows)),
    ]


SIGN_TEST_TEXT = (
    " Where a value is ∞ (a target never reached) a t interval has no meaning and replacing ∞ by"
    " a number would make the interval that number's: such a claim is judged by the sign test,"
    " the distribution-free 95 % interval of the median difference (12 - ∞ = -∞; two ∞ are a"
    " tie; at least 6 seeds to exclude 0)."
)


def infinite(cells: list[Cell]) -> bool:
    """Whether any measured value is ∞ (a target never reached)."""
    return any(math.isinf(cell.value) for cell in cells)


CLAIM_HEADER = ("claim", "seeds", "centre", "95 % interval", "order holds", "verdict", "reason")


def claim_row(r: ClaimResult) -> tuple[str, ...]:
    """A claim's row of a claims table (``CLAIM_HEADER``)."""
    return (
        claim_name(r),
        str(len(r.seeds)),
        centre_text(r.verdict.interval) if r.judged else "–",
        interval_text(r.verdict.interval) if r.judged else "–",
        f"{r.ordered} of {len(r.seeds)}",
        r.verdict.word,
        r.verdict.reason,
    )


def seed_differences(r: ClaimResult) -> Paragraph:
    """A claim's per-seed differences, one paragraph."""
    pairs = zip(r.seeds, r.better_values, r.worse_values, strict=True)
    listed = "; ".join(f"seed {s}: {difference_text(a, b)}" for s, a, b in pairs)
    return Paragraph(f"{claim_name(r)}: {listed or 'no seed measured for both'}.")


def claim_blocks(table: PaperTable, results: list[ClaimResult]) -> list[Block]:
    side = "positive" if table.higher_is_better else "negative"
    blocks: list[Block] = [
        Heading("The paper's claims"),
        Paragraph(
            "Each claim paired by seed (the seeds both methods have): the differences better -"
            f" worse, their mean and 95 % t interval; the claimed side is {side}."
            + (SIGN_TEST_TEXT if any(r.verdict.interval.test == SIGN_TEST for r in results) else "")
            + " The seeds in which the claimed order holds are counted for every claim."
        ),
        Table(CLAIM_HEADER, tuple(claim_row(r) for r in results)),
        Paragraph(chance_line([r.verdict for r in results])),
        Heading("Per-seed differences"),
    ]
    return blocks + [seed_differences(r) for r in results]


def regime_table(regime: list[RegimeDifference]) -> Table:
    """The regime's differences from the paper's, one row each."""
    return Table(
        ("aspect", "paper", "ours", "why"),
        tuple((d.aspect, d.paper, d.ours, d.reason) for d in regime),
    )


def measured_time(seconds: float) -> str:
    return f"Measured time: {seconds:.0f} s ({seconds / 60:.1f} min)"


def regime_blocks(
    regime: list[RegimeDifference],
    budget: str,
    seconds: float,
    provenance: list[str],
    unrecorded: int = 0,
) -> list[Block]:
    """The regime's heading, budget, time, where it was measured (``provenance``, and the
    ``unrecorded`` runs no invocation records) and differences from the paper's."""
    measured = " ".join(f"Measured: {line}" for line in provenance) or (
        "Where it was measured was not recorded (rows measured before measured.jsonl existed)."
    )
    if provenance and unrecorded > 0:
        measured += (
            f" {unrecorded} of the folder's runs are in no invocation's record (measured before"
            " measured.jsonl existed, or by an invocation killed before its end): where is not"
            " recorded."
        )
    return [
        Heading("Regime"),
        Paragraph(
            f"Budget: {budget}. {measured_time(seconds)}, the sum of the runs' own times."
            f" {measured}"
        ),
        regime_table(regime),
    ]


def part_regime_blocks(
    title: str, regime: list[RegimeDifference], budget: str, seconds: float
) -> list[Block]:
    """The regime of a reproduction's other part (``reproduction.Part``) named ``title``: its
    budget, its runs' measured time and its differences from the paper's."""
    return [
        Heading(f"{title}: regime"),
        Paragraph(
            f"Budget: {budget}. {measured_time(seconds)}, the sum of these runs' own times;"
            " where they were measured: the invocations listed in the regime above."
        ),
        regime_table(regime),
    ]


def reproduction_tables(
    table: PaperTable,
    cells: list[Cell],
    regime: list[RegimeDifference],
    budget: str,
    seconds: float,
    provenance: list[str] = (),
    unrecorded: int = 0,
    more: list[Block] = (),
) -> dict[str, str]:
    """``reproduction.md`` and ``report.html`` (module docstring), {file name: text};
    ``provenance``: one sentence per invocation that measured the rows
    (``provenance.provenance_lines``); ``unrecorded``: how many runs none of them records;
    ``more``: the blocks after the regime (the reproduction's other parts)."""
    results = judge_claims(table, cells)
    blocks: list[Block] = [
        Paragraph(f"The paper's numbers: {table.source}."),
        *paper_blocks(table, cells),
        *claim_blocks(table, results),
        *regime_blocks(regime, budget, seconds, list(provenance), unrecorded),
        *more,
    ]
    title = f"Reproduction: {table.title}"
    return {MARKDOWN: markdown(title, blocks), HTML: html_page(title, blocks)}
