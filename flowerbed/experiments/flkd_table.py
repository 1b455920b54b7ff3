"""The table of the FL + KD benchmark's Table 1 reproduction (``experiments.flkd``), made from
its rows alone: per method and column, the best round's accuracy (the paper's metric) and the
final round's, in %, mean ± sample std over seeds (n).

A row holds ``acc/<method>`` (best round over rounds 1..R; Centralized: best epoch) and
``final/<method>`` (the last round or epoch) for every method its run measured, with the
``setting`` (the paper's column), ``data`` and ``model`` it ran on.
"""

from __future__ import annotations

import math
import statistics

from .driver import Value
from .flkd_stage1 import BN_AVERAGED, CENTRALIZED, METHODS, SERVER_OPTIMIZERS

SETTINGS = ("ModelNet40", "Craniosynostosis")


def accuracies(rows: list[dict[str, Value]], metric: str = "acc") -> dict[tuple, dict[int, float]]:
    """(method, setting) -> {seed: ``metric`` in %} for every method a row has."""
    table: dict[tuple, dict[int, float]] = {}
    for row in rows:
        for key, value in row.items():
            if key.startswith(f"{metric}/"):
                method = key.removeprefix(f"{metric}/")
                table.setdefault((method, str(row["setting"])), {})[int(row["seed"])] = float(value)
    return table


def accuracy_table(rows: list[dict[str, Value]]) -> str:
    """Per method and column: the best round's and the final round's accuracy in %, mean ±
    sample std over seeds (n), with the data set and model each column ran on."""
    best, final = accuracies(rows), accuracies(rows, "final")
    settings = [s for s in SETTINGS if any(k[1] == s for k in best)]
    ran_on = {str(r["setting"]): f"{r['data']}, {r.get('model', '?')}" for r in rows}
    methods = [CENTRALIZED] + [m for m, _ in METHODS]
    methods += [m + BN_AVERAGED for m, s in METHODS if s in SERVER_OPTIMIZERS]
    head = " | ".join(f"{s} ({ran_on[s]}): best | final" for s in settings)
    lines = [
        (
            "Accuracy (%) of the global model on the test set, best round over rounds 1..R (the"
            " paper's metric) and final round; Centralized: best and final epoch. Mean ± sample"
            " std over seeds (n). A method with no row in any column is left out."
        ),
        "",
        f"| Method | {head} |",
        "|---|" + "---|---|" * len(settings),
    ]
    for method in methods:
        if not any((method, s) in best for s in settings):
            continue
        values = []
        for s in settings:
            values += [
                mean_std_cell(best.get((method, s), {})),
                mean_std_cell(final.get((method, s), {})),
            ]
        lines.append(f"| {method} | " + " | ".join(values) + " |")
    return "\n".join(lines) + "\n"


def mean_std_cell(by_seed: dict[int, float]) -> str:
    """``75.0 ± 1.2 (n=3)`` over the finite values; – for none."""
    values = [v for v in by_seed.values() if math.isfinite(v)]
    if not values:
        return "–"
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.1f} ± {std:.1f} (n={len(values)})"
