"""The five seed papers' headline tables as data: each number as the paper prints it, where it is
printed, and the orderings the paper claims.

One ``PaperTable`` per paper (``PAPERS``, keyed ``qkt``, ``fedsa``, ``flkd``, ``qfedfisher``,
``ctl``): the table its abstract or conclusion leans on (for FedSA, the FL + KD benchmark and CTL
the one ``SEEDS.md`` names), cut to its headline cells. A row is one cell: the method as the paper
names it, the value in the paper's unit (the table's ``metric`` says which) and the column it
sits in (``setting``). A claim is (better, worse, setting): an ordering the paper states, or that
its table shows and its text relies on; "better" is on the side ``higher_is_better`` names.

Every number was checked by hand against the text files in ``/work/shared/papers/`` on
2026-11-28, and ``tests/test_papers.py`` checks each value against its table's block in those
files (where they exist) and each claim against the rows.

One cell is not a printed number: CTL's Local strategy never reaches the 0.85 the table counts
iterations to ("failed to reach 0.85 even after 100 iterations"), so its value is ``math.inf``.

A table that summarises a grid of distilled students by objective, beside the headline table
(the FL + KD benchmark's Table 4), is a ``PaperSummary`` (``SUMMARIES``, keyed by paper): per
objective its numbers (``ObjectiveRow``), the orderings its text claims between objectives and
what it says without an ordering.

A result a paper shows only in a figure, with no number printed, is a ``PaperFigure``
(``FIGURES``, keyed by paper as ``PAPERS``): the methods and settings it plots and what its
text claims of them, orderings within a setting, contrasts across two settings (``Contrast``)
and methods it calls comparable. CTL's Simulation 2 (Fig. 4) is one.
"""

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class PaperRow:
    """One cell of a paper's headline table: the method's name as the paper writes it, the value
    as printed (in the table's ``metric``), and the column or setting it belongs to."""

    method: str
    value: float
    setting: str = ""


@dataclass(frozen=True)
class PaperTable:
    """A paper's headline table: its cells and the orderings (better, worse, setting) it claims."""

    paper: str
    title: str
    source: str
    metric: str
    higher_is_better: bool
    rows: tuple[PaperRow, ...]
    claims: tuple[tuple[str, str, str], ...]

    def value(self, method: str, setting: str = "") -> float:
        """The value of ``method``'s cell in ``setting``; KeyError if the table has none."""
        for row in self.rows:
            if row.method == method and row.setting == setting:
                return row.value
        raise KeyError(f"{self.paper}: no cell for {method!r} in setting {setting!r}")

    def holds(self, better: str, worse: str, setting: str = "") -> bool:
        """Whether the table's numbers put ``better`` strictly ahead of ``worse`` in ``setting``."""
        a, b = self.value(better, setting), self.value(worse, setting)
        return a > b if self.higher_is_better else a < b


def _cells(columns: tuple[str, ...], table: dict[str, tuple[float, ...]]) -> tuple[PaperRow, ...]:
    """Rows from a method -> (one value per column) mapping, in the paper's order."""
    return tuple(
        PaperRow(method, value, setting)
        for method, values in table.items()
        for setting, value in zip(columns, values, strict=True)
    )


def _beats(better: str, worse: tuple[str, ...], settings: tuple[str, ...]):
    """The claims that ``better`` is ahead of each of ``worse`` in each of ``settings``."""
    return tuple((better, w, s) for s in settings for w in worse)


# QKT: Table 2's "Average" columns (the mean over CIFAR10, CIFAR100, CINIC10, BloodMNIST and
# PathMNIST), which the abstract's "outperforms ... by an average of 20.91 % points in
# single-class query settings and ... 14.32 % points in multi-class" summarises. The methods are
# those flowerbed runs (benchmarks/qkt.py): multi-round FedAvg, the one-round baselines, QKT Light.
_QKT_SETTINGS = ("single-class, Path", "single-class, Dir", "multi-class, Path", "multi-class, Dir")
_QKT_METHODS = ("FedAvg", "FedAvg(1)", "Ensemble", "KD", "QKT Light")
QKT = PaperTable(
    paper="qkt",
    title="Query-based Knowledge Transfer for Heterogeneous Learning Environments",
    source="Table 2, p. 7 (ICLR 2025), columns Average Path / Dir",
    metric="average accuracy (%) over the five data sets, 10 clients; FedAvg is 100 rounds",
    higher_is_better=True,
    rows=_cells(
        _QKT_SETTINGS,
        {
            "FedAvg": (44.19, 50.49, 44.04, 56.25),
            "FedAvg(1)": (9.27, 6.74, 12.07, 5.33),
            "Ensemble": (41.20, 49.29, 45.13, 48.85),
            "KD": (48.68, 43.97, 37.41, 38.00),
            "QKT Light": (74.12, 66.85, 59.87, 57.83),
            "QKT": (75.02, 69.89, 63.57, 59.31),
        },
    ),
    # Sec. 4.2: "For single-class queries, QKT consistently outperforms existing methods ...
    # When querying for multiple classes, QKT demonstrates superior performance".
    claims=_beats("QKT", _QKT_METHODS, _QKT_SETTINGS),
)

# FedSA: Table 1, CIFAR-10 with homogeneous (ResNet34) students, by the labelled share of each
# class; the conclusion's "FedSA achieves performance superior to baseline methods". The rows
# are the baselines flowerbed has an analogue of (Scratch, FedAvg+ = every teacher every round)
# and the two strongest others (Transfer, FedMD+).
_FEDSA_SETTINGS = ("1%", "5%", "10%", "100%")
_FEDSA_BASELINES = ("Scratch Training", "Transfer", "FedAvg+", "FedMD+")
FEDSA = PaperTable(
    paper="fedsa",
    title="Federated Selective Aggregation for Knowledge Amalgamation",
    source="Table 1, Sec. 4.2 (no page numbers in the text), CIFAR-10, Homogeneous columns",
    metric="test accuracy (%) of the ResNet34 target model on CIFAR-10; setting = labelled share",
    higher_is_better=True,
    rows=_cells(
        _FEDSA_SETTINGS,
        {
            "Scratch Training": (40.00, 62.14, 75.43, 91.56),
            "Transfer": (63.70, 79.38, 83.34, 92.88),
            "FedAvg+": (69.96, 71.58, 78.04, 89.24),
            "FedMD+": (71.25, 83.20, 85.52, 92.37),
            "FedSA": (77.15, 85.30, 87.57, 93.83),
        },
    ),
    # Sec. 4.2: "The proposed FedSA outperforms other baselines on both homogeneous and
    # heterogeneous network settings."
    claims=_beats("FedSA", _FEDSA_BASELINES, _FEDSA_SETTINGS),
)

# The FL + KD point-cloud benchmark: Table 1, standalone FL (the abstract's first finding: "the
# strongest method reaches only 76.32 % against a 92.26 % centralized reference ... the best
# reaches 75.83 % against 100 % ... the four server-side optimizers collapse"). Ten of its 14
# methods: those its text compares, and two of the four collapsed server optimisers.
_MN40, _CRANIO = "ModelNet40", "Craniosynostosis"
FLKD = PaperTable(
    paper="flkd",
    title="Benchmarking Federated Learning & Knowledge Distillation for Point Cloud Classification",
    source="Table 1, Sec. 4.2 (no page numbers in the text)",
    metric="best instance accuracy (%) over 20 rounds, mean of three seeds; 5 label-skew clients",
    higher_is_better=True,
    rows=_cells(
        (_MN40, _CRANIO),
        {
            "Centralized": (92.26, 100.00),
            "FedNova": (76.32, 50.83),
            "FedProx": (71.04, 75.83),
            "FedDyn": (66.00, 58.33),
            "SCAFFOLD": (64.26, 36.67),
            "FedAvg": (58.51, 69.58),
            "MOON": (45.84, 69.17),
            "FedMedian": (39.13, 64.58),
            "FedAdam": (4.71, 25.00),
            "FedAvgM": (4.05, 25.00),
        },
    ),
    claims=(
        # "the strongest FL method trails the centralized reference" on both data sets
        ("Centralized", "FedNova", _MN40),
        ("Centralized", "FedProx", _CRANIO),
        # "FedNova leads on ModelNet40 ... where FedProx leads" on the clinical data
        ("FedNova", "FedProx", _MN40),
        ("FedProx", "FedNova", _CRANIO),
        # "the drift-correction methods (FedProx, FedDyn, SCAFFOLD) improve on plain FedAvg,
        # whereas MOON falls below it"
        ("FedProx", "FedAvg", _MN40),
        ("FedDyn", "FedAvg", _MN40),
        ("SCAFFOLD", "FedAvg", _MN40),
        ("FedAvg", "MOON", _MN40),
        # FedMedian below FedAvg on both (SEEDS.md ordering (d))
        ("FedAvg", "FedMedian", _MN40),
        ("FedAvg", "FedMedian", _CRANIO),
        # "the four server-side optimizers collapse to near-chance accuracy on both"
        ("FedAvg", "FedAdam", _MN40),
        ("FedAvg", "FedAvgM", _MN40),
        ("FedAvg", "FedAdam", _CRANIO),
        ("FedAvg", "FedAvgM", _CRANIO),
    ),
)

# QFedFisher: Table I, accuracy column (its Loss and Time columns left out); the conclusion's
# "surpasses the performance of quantum federated averaging and quantum federated Adam".
_ADNI, _MNIST = "ADNI", "MNIST"
QFEDFISHER = PaperTable(
    paper="qfedfisher",
    title="Enhancing Quantum Federated Learning with Fisher Information-Based Optimization",
    source="Table I, Sec. IV (no page numbers in the text), column Accuracy",
    metric="test accuracy (%) of the global model; ADNI 10 clients 100 rounds, MNIST 100 clients "
    "(5 % a round) 300 rounds",
    higher_is_better=True,
    rows=_cells(
        (_ADNI, _MNIST),
        {"QFedAvg": (87.0, 84.8), "QFedAdam": (88.2, 86.3), "QFedFisher": (89.9, 91.2)},
    ),
    claims=_beats("QFedFisher", ("QFedAvg", "QFedAdam"), (_ADNI, _MNIST)),
)

# CTL: the paper has no table; its headline numbers are the ones Sec. 4.1.3 reads off Fig. 2(d)
# (Simulation 1, breast cancer, 100 simulations): the iteration at which each guest-selection
# strategy's mean accuracy on non-local tasks first exceeds 0.85.
CTL = PaperTable(
    paper="ctl",
    title="Distributed Collaborative Learning with Representative Knowledge Sharing",
    source="Sec. 4.1.3 (Results) on Fig. 2(d), Mathematics 2025, 13(6), 1004 (no tables, no pages)",
    metric="first iteration at which the mean accuracy on non-local tasks exceeds 0.85 "
    "(Simulation 1, mean of 100 simulations); ∞: not reached within 100 iterations",
    higher_is_better=False,
    rows=(
        PaperRow("Best", 12),
        PaperRow("All", 15),
        PaperRow("Random", 16),
        PaperRow("Worst", 23),
        PaperRow("Local", math.inf),
    ),
    # "The best strategy was the first to surpass an accuracy of 0.85 ... Other strategies took
    # longer ... The local strategy ... failed to reach 0.85 even after 100 iterations"; worst
    # last of the collaborative ones (SEEDS.md ordering (a)).
    claims=(
        ("Best", "All", ""),
        ("Best", "Random", ""),
        ("Best", "Worst", ""),
        ("Best", "Local", ""),
        ("All", "Worst", ""),
        ("Random", "Worst", ""),
        ("Worst", "Local", ""),
    ),
)


@dataclass(frozen=True)
class Contrast:
    """A claim across two settings: ``better``'s lead over ``worse`` (better - worse, on the
    metric's better side) is larger in the setting ``larger`` than in the setting
    ``smaller``."""

    better: str
    worse: str
    larger: str
    smaller: str


@dataclass(frozen=True)
class PaperFigure:
    """A result a paper shows only in a figure, without a printed number: its name in the
    report (``title``), where the paper shows and describes it, the metric we measure it by
    and its better side, the methods and settings plotted; the orderings its text claims
    within a setting (better, worse, setting, as ``PaperTable.claims``); its ``Contrast``s
    across settings; and the pairs it calls comparable (method, method, setting): shown with
    their interval, never judged, since "comparable" is no ordering."""

    paper: str
    title: str
    source: str
    metric: str
    higher_is_better: bool
    methods: tuple[str, ...]
    settings: tuple[str, ...]
    claims: tuple[tuple[str, str, str], ...]
    contrasts: tuple[Contrast, ...]
    comparable: tuple[tuple[str, str, str], ...]


# CTL's Simulation 2 (Sec. 4.2): Gaussian nodes at high spread and low dispersion, and at low
# spread and high dispersion; the values are the authors' code's (the paper says "high" and
# "low"). Fig. 4 plots accuracy curves of All, Best and Local in each; Sec. 4.2.2 reads it.
_HIGH_SPREAD, _LOW_SPREAD = "spread 3, dispersion 0.5", "spread 0.5, dispersion 3"
CTL_FIGURE_4 = PaperFigure(
    paper="ctl",
    title="Simulation 2 (spread and dispersion)",
    source="Sec. 4.2.2 (Results) on Fig. 4, Mathematics 2025, 13(6), 1004; the settings' values"
    " are the authors' code's (the paper: high spread and low dispersion, low spread and high"
    " dispersion)",
    metric="accuracy (%) on all tasks (each node's own and its 2 other tasks, mean over nodes)"
    " after the last iteration",
    higher_is_better=True,
    methods=("Best", "All", "Local"),
    settings=(_HIGH_SPREAD, _LOW_SPREAD),
    # "when nodes are far apart (high spread) but have limited local variability (low
    # dispersion), collaboration becomes crucial, and best significantly outperforms local"
    claims=(("Best", "Local", _HIGH_SPREAD),),
    # the two panels' contrast (SEEDS.md ordering (d)): "best showed limited improvement over
    # local" at low spread, "significant improvement" at high spread
    contrasts=(Contrast("Best", "Local", _HIGH_SPREAD, _LOW_SPREAD),),
    # "the local strategy performs comparably to best" at low spread
    comparable=(("Best", "Local", _LOW_SPREAD),),
)

FIGURES: dict[str, tuple[PaperFigure, ...]] = {"ctl": (CTL_FIGURE_4,)}

# the columns of a summary by objective (``PaperSummary``), and of its claims
BEHIND_WEAKEST, BEHIND_STRONGEST, RANGE, R = (
    "behind the weakest teacher",
    "behind the strongest teacher",
    "range",
    "r",
)


@dataclass(frozen=True)
class ObjectiveRow:
    """One row of a summary by distillation objective: the objective as the paper names it, the
    weight of its hard-label cross-entropy term, the student's accuracy behind the weakest
    teacher and behind the strongest, its range over the teachers (max - min of the students'
    means) and Pearson's r between the student's and the teacher's mean accuracy over the
    teachers."""

    objective: str
    ce_weight: float
    weakest: float
    strongest: float
    range: float
    r: float


@dataclass(frozen=True)
class Unjudged:
    """What a paper says of some of its rows without an ordering ("regardless of teacher
    quality"): its ``words`` (as its text prints them) and the objectives it says them of;
    shown with their intervals, never judged."""

    words: str
    objectives: tuple[str, ...]


@dataclass(frozen=True)
class PaperSummary:
    """A paper's table that summarises a grid of students distilled behind teachers, one row
    per objective (``ObjectiveRow``): measured in the ``setting`` (a column of the paper's
    headline table), its weakest and strongest teachers as the paper names them (methods of
    that table); the orderings it claims (better, worse, column), "better" on the
    ``higher_is_better`` side, the column ``BEHIND_WEAKEST`` (the students' accuracy) or ``R``
    (their Pearson r, judged per seed); and what it says without an ordering (``Unjudged``)."""

    paper: str
    title: str
    source: str
    metric: str
    setting: str
    weakest: str
    strongest: str
    claims: tuple[tuple[str, str, str], ...]
    unjudged: tuple[Unjudged, ...]
    rows: tuple[ObjectiveRow, ...]
    higher_is_better: bool = True

    def row(self, objective: str) -> ObjectiveRow:
        """The row of ``objective``; KeyError if the table has none."""
        for row in self.rows:
            if row.objective == objective:
                return row
        raise KeyError(f"{self.paper}: no row for {objective!r}")

    def value(self, objective: str, column: str) -> float:
        """``objective``'s value in ``column`` (``BEHIND_WEAKEST``, ``BEHIND_STRONGEST``,
        ``RANGE``, ``R``)."""
        row = self.row(objective)
        columns = {
            BEHIND_WEAKEST: row.weakest,
            BEHIND_STRONGEST: row.strongest,
            RANGE: row.range,
            R: row.r,
        }
        return columns[column]

    def holds(self, better: str, worse: str, column: str) -> bool:
        """Whether the table's numbers put ``better`` strictly ahead of ``worse`` in
        ``column``."""
        a, b = self.value(better, column), self.value(worse, column)
        return a > b if self.higher_is_better else a < b


# The FL + KD benchmark's Table 4: the two-stage pipeline on the clinical task (its
# craniosynostosis column), one row per objective over the 13 FL teachers (CE weight, the student
# behind FedAvgM, "a teacher at the 25 % chance level", and behind FedProx, the best at 75.83 %;
# range; r). Per-cell values: its Tables A8 (means) and A9 (stds); tests/test_papers.py checks
# the range and r of each row against Table A8.
#
# The judged claims are the orderings its text states about named cells and numbers, paired by
# seed here, two of each kind: "A teacher frozen at the 25 % chance level (FedAvgM) still yields
# a 97.5 % student under Vanilla KD and 100 % under CRD ... fall to chance when the teacher does
# (FedAvgM with Attention Transfer or SP yields 25.0 %)": Vanilla KD ahead of Attention Transfer
# and CRD ahead of SP behind the weakest teacher (the pairs it names); and "the four
# pure-transfer objectives ... track the teacher almost perfectly (r = 0.986 to 0.990)" against
# "does not correlate with teacher quality (r from -0.53 to +0.37)": the same two pairs the
# other way round on r, per seed. Four claims, not the 24 pairs of six hard-label and four
# pure-transfer objectives: the pairs the text names, so that the page's intervals stay few
# (``verdicts.chance_crossings``). "Regardless of teacher quality", "r ~ 0" and "track the
# teacher" are no ordering between two cells: shown with their intervals, not judged
# (``Unjudged``), as a figure's comparable pairs are.
_HARD_LABEL = (
    "Vanilla KD",
    "Self-Distillation",
    "Cosine Similarity",
    "Contrastive (CRD)",
    "Logit-MSE",
    "Decoupled KD",
)
_PURE_TRANSFER = ("Feature KD", "Attention Transfer", "Relational KD", "Similarity-Preserving")
FLKD_TABLE_4 = PaperSummary(
    paper="flkd",
    title="Table 4 (the two-stage pipeline by objective)",
    source="Table 4, Sec. 4.5 (no page numbers in the text), the clinical task; per-cell values"
    " in its Tables A8 and A9",
    metric="the student's best instance accuracy (%), mean of three seeds, behind each of the"
    " 13 FL teachers (each one's best round); r: Pearson's between the student's and the"
    " teacher's mean accuracy over the 13 teachers",
    setting=_CRANIO,
    weakest="FedAvgM",
    strongest="FedProx",
    rows=(
        ObjectiveRow("Vanilla KD", 0.5, 97.5, 99.6, 2.5, 0.37),
        ObjectiveRow("Self-Distillation", 0.5, 99.2, 99.6, 1.2, 0.19),
        ObjectiveRow("Cosine Similarity", 0.5, 99.6, 100.0, 0.8, -0.05),
        ObjectiveRow("Contrastive (CRD)", 0.5, 100.0, 99.6, 0.8, -0.53),
        ObjectiveRow("Logit-MSE", 0.5, 97.5, 99.2, 3.8, 0.10),
        ObjectiveRow("Decoupled KD", 1.0, 93.8, 96.7, 7.5, -0.10),
        ObjectiveRow("Feature KD", 0.0, 27.1, 84.2, 57.5, 0.99),
        ObjectiveRow("Attention Transfer", 0.0, 25.0, 83.3, 58.3, 0.99),
        ObjectiveRow("Relational KD", 0.0, 27.5, 81.7, 57.5, 0.99),
        ObjectiveRow("Similarity-Preserving", 0.0, 25.0, 82.9, 58.3, 0.99),
    ),
    claims=(
        ("Vanilla KD", "Attention Transfer", BEHIND_WEAKEST),
        ("Contrastive (CRD)", "Similarity-Preserving", BEHIND_WEAKEST),
        ("Attention Transfer", "Vanilla KD", R),
        ("Similarity-Preserving", "Contrastive (CRD)", R),
    ),
    unjudged=(
        Unjudged("recover the student regardless of teacher quality", _HARD_LABEL),
        Unjudged("track the teacher", _PURE_TRANSFER),
    ),
)

SUMMARIES: dict[str, tuple[PaperSummary, ...]] = {"flkd": (FLKD_TABLE_4,)}

PAPERS: dict[str, PaperTable] = {
    table.paper: table for table in (QKT, FEDSA, FLKD, QFEDFISHER, CTL)
}
