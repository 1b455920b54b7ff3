"""The report's differential-privacy section: the privacy a run spent.

``privacy_section`` (a run with ``dp`` set): the mechanism (``flowerbed.privacy``), z, delta,
the budget, the clipping norm C by round (``dp_clipping_norm`` of the history with adaptive
clipping, else the fixed ``dp-clipping-norm``), epsilon by round (``dp_epsilon``), the final
epsilon and how the run ended (``privacy.json``), a plot and one sentence that says it all.
"""

from __future__ import annotations

import math

from .markup import Section, absent, esc, img, plural, shown, table
from .plots import integer_ticks, png_bytes, pyplot, style
from .run_folder import RunFolder, column, number

NO_DP = "none"
LOCAL_DP = "local"
ADAPTIVE_DP = ("central-server-adaptive", "central-client-adaptive")
EPSILON_COLUMN, CLIPPING_COLUMN = "dp_epsilon", "dp_clipping_norm"
UNCLIPPED_COLUMN = "dp_unclipped_fraction"  # adaptive clipping: the noised fraction not clipped

# what each dp mode does, for a reader (flowerbed.privacy's package docstring)
DP_MODES = {
    "central-server-fixed": (
        "central DP: the server clips every client's update to the norm C and adds Gaussian"
        " noise of standard deviation z C / n to the mean of the n sampled clients' clipped"
        " updates (Flower's DifferentialPrivacyServerSideFixedClipping)"
    ),
    "central-server-adaptive": (
        "central DP: the server clips every client's update to a norm C that adapts each round"
        " toward the dp-clipped-quantile of the update norms (Andrew et al., NeurIPS 2021), and"
        " adds Gaussian noise of standard deviation z C / n to the mean of the n sampled"
        " clients' clipped updates"
    ),
    "central-client-fixed": (
        "central DP: each client clips its own update to the norm C the server sends; the"
        " server adds Gaussian noise of standard deviation z C / n to the mean of the n sampled"
        " clients' updates (Flower's DifferentialPrivacyClientSideFixedClipping)"
    ),
    "central-client-adaptive": (
        "central DP: each client clips its own update to a norm C that the server adapts each"
        " round toward the dp-clipped-quantile of the update norms; the server adds Gaussian"
        " noise of standard deviation z C / n to the mean of the n sampled clients' updates"
    ),
    LOCAL_DP: (
        "local DP: every client clips its own update to C and adds Gaussian noise of standard"
        " deviation z C before it leaves the node; the server sees only noisy updates"
        " (Flower's LocalDpMod)"
    ),
}


def short(value: float) -> str:
    """A number in a sentence: three significant digits (3.21, 0.000123, 1e-05)."""
    return "NaN" if not math.isfinite(value) else f"{value:.3g}"


def per_round(record: dict, word: str) -> dict[int, float]:
    """A per-round list of ``privacy.json`` whose key holds ``word``: ``{round: value}``,
    ``[{"round": r, ...: value}]``, or ``[value, ...]`` numbered by the record's ``rounds``
    list when it is as long, else rounds 1, 2, ...; {} when there is none."""
    rounds = record.get("rounds")
    for key, value in record.items():
        if word not in key:
            continue
        out: dict[int, float] = {}
        if isinstance(value, dict):
            for r, c in value.items():
                if str(r).lstrip("-").isdigit():
                    out[int(r)] = number(c)
        elif isinstance(value, list):
            numbered = (
                rounds
                if isinstance(rounds, list) and len(rounds) == len(value)
                else range(1, len(value) + 1)
            )
            for r, item in zip(numbered, value, strict=True):
                if isinstance(item, dict) and "round" in item:
                    c = next((v for k, v in item.items() if k != "round"), None)
                    out[int(item["round"])] = number(c)
                else:
                    out[int(r)] = number(item)
        out = {r: c for r, c in out.items() if math.isfinite(c)}
        if out:
            return out
    return {}


def recorded_norms(record: dict) -> dict[int, float]:
    """The per-round clipping norms of ``privacy.json``, if it holds them."""
    return per_round(record, "clipping_norm")


def clipping_by_round(run: RunFolder, record: dict) -> tuple[dict[int, float], str]:
    """C by round and where it comes from."""
    rounds, values = column(run.history, CLIPPING_COLUMN)
    if values:
        return dict(zip(rounds, values, strict=True)), f"history.json's {CLIPPING_COLUMN}"
    norms = recorded_norms(record)
    if norms:
        return norms, "privacy.json"
    fixed = number(run.config.get("dp-clipping-norm"))
    if math.isfinite(fixed) and run.config.get("dp") not in ADAPTIVE_DP:
        return {r["round"]: fixed for r in run.history}, "fixed: dp-clipping-norm"
    return {}, ""


def privacy_png(
    epsilon: tuple[list[int], list[float]],
    norms: dict[int, float],
    budget: float,
    adaptive: bool,
    title: str,
) -> bytes:
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    rounds, values = epsilon
    if values:
        left.plot(rounds, values, label="epsilon spent", color="black", **style(0))
    if budget > 0:
        left.axhline(budget, color="grey", linestyle="--", linewidth=1, label="budget")
    left.set_xlabel("round")
    left.set_ylabel("epsilon (at the run's delta)")
    left.set_title("Privacy spent by round", fontsize=10)
    left.set_ylim(bottom=0)
    if values or budget > 0:
        left.legend(fontsize=7, loc="best")
    if norms:
        r = sorted(norms)
        label = "C (adaptive)" if adaptive else "C (fixed)"
        right.plot(r, [norms[i] for i in r], label=label, color="black", **style(1))
        right.legend(fontsize=7, loc="best")
        if not adaptive:
            c = norms[r[0]]
            right.set_ylim(0, 2 * c if c > 0 else 1)
    else:
        right.text(0.5, 0.5, "no clipping norm recorded", ha="center", transform=right.transAxes)
    right.set_xlabel("round")
    right.set_ylabel("clipping norm C (L2)")
    right.set_title("Clipping norm by round", fontsize=10)
    for ax in (left, right):
        ax.grid(alpha=0.3)
        integer_ticks(ax)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return png_bytes(fig)


def privacy_section(run: RunFolder) -> Section | None:
    title = "Differential privacy"
    mode = str(run.config.get("dp", NO_DP))
    record = run.file("privacy.json")
    if mode == NO_DP and not isinstance(record, dict):
        return None
    record = record if isinstance(record, dict) else {}
    mode = str(record.get("dp", mode))
    z = number(record.get("noise_multiplier", run.config.get("dp-noise-multiplier")))
    delta = number(record.get("delta", run.config.get("dp-delta")))
    budget = number(record.get("epsilon_budget", run.config.get("dp-epsilon-budget", 0.0)))
    epsilon = column(run.history, EPSILON_COLUMN)
    final = number(record.get("epsilon"))
    if not math.isfinite(final) and epsilon[1]:
        final = epsilon[1][-1]
    adaptive = mode in ADAPTIVE_DP
    norms, norms_from = clipping_by_round(run, record)
    releases = record.get("releases")
    rounds_done = max((r["round"] for r in run.history), default=0)

    body = []
    # the sentence
    if math.isfinite(final):
        count = releases if isinstance(releases, int) else rounds_done
        if mode == LOCAL_DP:
            over = f"by the worst client, over the {plural(count, 'round')} it took part in"
        else:
            over = f"over {plural(count, 'round')}"
        sentence = (
            f"(epsilon, delta) = ({short(final)}, {short(delta)}) spent {over}, client-level"
            f" (replace-one: one client's data replaced), noise multiplier z = {short(z)},"
            f" {mode}."
        )
    else:
        sentence = f"dp={mode}: no epsilon was recorded (the run ended before its first round)."
    body.append(f"<p><strong>{esc(sentence)}</strong></p>")
    stopped = str(record.get("stopped") or "")
    if stopped:
        said = stopped.removeprefix("privacy budget: ")
        body.append(f"<p>The privacy budget ended the run: {esc(said)}</p>")
    elif not record:
        body.append(absent("privacy.json (written when the FL rounds end)"))

    body.append(
        f"<p>{esc(mode)}: {esc(DP_MODES.get(mode, 'a mode this report does not know'))}.</p>"
    )

    # the facts
    status = run.status.get("status")
    facts: list[list] = [["dp (mode)", mode], ["noise multiplier z", z]]
    if "update_noise_multiplier" in record:  # adaptive clipping splits z (privacy/rounds.py)
        facts.append(["z of the update (z_update)", number(record["update_noise_multiplier"])])
    if "clipped_count_stddev" in record:
        facts.append(["noise on the clipped count (std)", number(record["clipped_count_stddev"])])
    facts.append(["delta", delta])
    facts.append(["epsilon budget", budget if budget > 0 else "none (0: no budget)"])
    if adaptive:
        facts.append(["clipping norm C, initial", number(run.config.get("dp-clipping-norm"))])
        quantile = run.config.get("dp-clipped-quantile")
        if quantile is not None:
            facts.append(["share of updates C aims to clip", number(quantile)])
        if norms:
            facts.append([f"clipping norm C, round {max(norms)}", norms[max(norms)]])
        if "next_clipping_norm" in record:
            facts.append(["clipping norm C, next round", number(record["next_clipping_norm"])])
    else:
        facts.append(["clipping norm C (fixed)", number(run.config.get("dp-clipping-norm"))])
    if "sampled_per_round" in record and "clients" in record:
        facts.append(
            ["clients per round", f"{record['sampled_per_round']} of {record['clients']} sampled"]
        )
    if isinstance(releases, int):
        what = "rounds it took part in, worst client" if mode == LOCAL_DP else "rounds"
        facts.append([f"releases ({what})", releases])
    facts.append(["final epsilon", final if math.isfinite(final) else "none recorded"])
    ended = "stopped by the privacy budget" if stopped else (status or "unknown")
    facts.append(["how the run ended", ended])
    body.append(table(["", "value"], facts, text_columns=(0, 1)))
    if record.get("accounting"):
        body.append(f"<p>Accounting: {esc(record['accounting'])}.</p>")

    # the plot and the rows
    if epsilon[1] or norms:
        png = privacy_png(epsilon, norms, budget, adaptive, run.title)
        body.append(img(png, "epsilon spent and clipping norm by round"))
    by_round = dict(zip(*epsilon, strict=True))
    unclipped = dict(zip(*column(run.history, UNCLIPPED_COLUMN), strict=True))
    unclipped = unclipped or per_round(record, "unclipped_fraction")
    rounds = sorted(set(by_round) | set(norms))
    if rounds:
        header = ["round", "epsilon spent (dp_epsilon)", f"C of the round ({norms_from})"]
        rows = [[r, by_round.get(r, math.nan), norms.get(r, math.nan)] for r in rounds]
        if unclipped:
            header.append("noised fraction of updates not clipped")
            for row in rows:
                row.append(unclipped.get(row[0], math.nan))
        rows, note = shown(rows)
        body.append(table(header, rows))
        body.append(note)
    body.append(
        "<p>Epsilon is accounted with Renyi DP (Google's dp-accounting) for client-level"
        " adjacency: it bounds what the released models reveal about any one client's whole"
        " data set, at the delta above. Round 0 is the initial model (nothing released). The"
        " noise comes from the operating system's entropy, so a DP run does not repeat bit for"
        " bit. docs/privacy.md states the guarantees and their limits.</p>"
    )
    return Section("privacy", title, "\n".join(body))
