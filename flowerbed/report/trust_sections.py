"""The report's sections on what a reader must trust: the privacy a run spent, how it fared
against declared attacks and faulty clients, and the versions and machine it ran on.

* ``privacy_section`` (a run with ``dp`` set): the mechanism (``flowerbed.privacy``), z, delta,
  the budget, the clipping norm C by round (``dp_clipping_norm`` of the history with adaptive
  clipping, else the fixed ``dp-clipping-norm``), epsilon by round (``dp_epsilon``), the final
  epsilon and how the run ended (``privacy.json``), a plot and one sentence that says it all;
* ``robustness_section`` (an attack, a robust aggregation rule, ``max-update-norm``,
  ``failing-partitions``, or any reply dropped or clipped): the attack and its attackers (the
  partition ids of ``attackers`` in ``config.json``), the defences, and per round the replies
  dropped and why (``clients_failed``, ``failures``) and the updates clipped
  (``clients_clipped``);
* ``environment_section`` (a run folder with ``environment.json``, ``runtime.environment``).
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from typing import Any

import numpy as np

from ..catalog import PROTOCOLS
from .markup import Section, absent, esc, fmt, img, setting_text, shown, table
from .plots import integer_ticks, png_bytes, pyplot, style
from .run_folder import RunFolder, column, number

NO_DP, NO_ATTACK = "none", "none"
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

# what an attacker replies instead of its honest model w, g the global model it received
# (flowerbed.attacks' module docstring)
ATTACK_RULES = {
    "sign-flip": "replies g - (w - g): its honest update negated",
    "scale": "replies g + s (w - g): its honest update boosted by s = attack-scale",
    "noise": "replies w + e, e ~ N(0, std^2) per entry, std = attack-noise-std",
    "free-rider": "replies the global model g unchanged, claiming its real num-examples",
    "inflate-examples": "claims k times its num-examples, k = attack-inflation (arrays honest)",
    "label-flip": "trains on flipped labels y -> C - 1 - y (its local test split stays clean)",
}
ATTACK_PARAMETERS = {
    "scale": "attack-scale",
    "noise": "attack-noise-std",
    "inflate-examples": "attack-inflation",
}

FAILURE = re.compile(r"^(partition \d+|node \d+): (.*)$", re.DOTALL)
MAX_REASON = 160  # characters of a failure reason in the per-round table


def attacker_ids(config: dict) -> list[int]:
    """The partitions that attack (config.json's ``attackers``; none without an ``attack``)."""
    if str(config.get("attack", NO_ATTACK)) == NO_ATTACK:
        return []
    return id_list(config.get("attackers"))


def id_list(text: Any) -> list[int]:
    """``"0, 3"`` -> [0, 3] (ids that do not parse are left out)."""
    ids = []
    for token in str(text or "").replace(",", " ").split():
        try:
            ids.append(int(token))
        except ValueError:
            continue
    return sorted(set(ids))


def plural(count: int, word: str, many: str = "") -> str:
    return f"{count} {word if count == 1 else many or word + 's'}"


def short(value: float) -> str:
    """A number in a sentence: three significant digits (3.21, 0.000123, 1e-05)."""
    return "NaN" if not math.isfinite(value) else f"{value:.3g}"


# --- privacy ------------------------------------------------------------------------------------


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
    if "update_noise_multiplier" in record:  # adaptive clipping splits z (privacy/server.py)
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


# --- robustness ---------------------------------------------------------------------------------


def strategy_spec(name: str):
    """The protocol's catalog entry (None when unknown)."""
    return PROTOCOLS.get(name)


def failure_reason(text: str) -> tuple[str, str]:
    """``"partition 3: reason"`` -> ("partition 3", "reason"); ("", text) otherwise."""
    match = FAILURE.match(str(text))
    return (match.group(1), match.group(2)) if match else ("", str(text))


def robustness_png(rows: list[dict], title: str) -> bytes:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 3.4))
    drawn = 0
    for key, label in (
        ("clients_trained", "replies aggregated (clients_trained)"),
        ("clients_failed", "replies dropped (clients_failed)"),
        ("clients_clipped", "updates clipped (clients_clipped)"),
    ):
        rounds, values = column(rows, key)
        if values:
            ax.plot(rounds, values, label=label, **style(drawn))
            drawn += 1
    keys = ("clients_trained", "clients_failed", "clients_clipped")
    counts = [number(r.get(k)) for r in rows for k in keys]
    top = max((c for c in counts if math.isfinite(c)), default=1.0)
    top = top if top > 0 else 1.0
    ax.set_xlabel("round")
    ax.set_ylabel("clients")
    ax.set_ylim(0, top * 1.35 + 0.5)  # room for the legend above the lines
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    integer_ticks(ax)
    ax.yaxis.get_major_locator().set_params(integer=True)
    if drawn:
        ax.legend(fontsize=7, loc="upper center", ncol=3)
    fig.tight_layout()
    return png_bytes(fig)


def robustness_section(run: RunFolder) -> Section | None:
    title = "Robustness: attacks, dropped and clipped replies"
    config, rows = run.config, [r for r in run.history if r.get("round", 0) >= 1]
    attack = str(config.get("attack", NO_ATTACK))
    attackers = attacker_ids(config)
    failing = id_list(config.get("failing-partitions"))
    norm_bound = number(config.get("max-update-norm", 0.0))
    clipping = math.isfinite(norm_bound) and norm_bound > 0
    spec = strategy_spec(str(config.get("strategy")))
    robust = spec is not None and "robust" in str(spec.kind)
    dropped = sum(_int(r.get("clients_failed")) or 0 for r in rows)
    clipped = sum(_int(r.get("clients_clipped")) or 0 for r in rows)
    if not (attack != NO_ATTACK or robust or clipping or failing or dropped or clipped):
        return None

    body = []
    clients = config.get("num-partitions")
    # what the run declared
    facts: list[list] = []
    if attack != NO_ATTACK:
        rule = ATTACK_RULES.get(attack, "")
        parameter = ATTACK_PARAMETERS.get(attack)
        detail = f" ({parameter} = {setting_text(config.get(parameter))})" if parameter else ""
        facts.append(["attack", f"{attack}{detail}: each attacker {rule}".rstrip(": ")])
        of = f" of {clients}" if clients else ""
        ids = ", ".join(map(str, attackers))
        who = f"{ids} ({len(attackers)}{of} clients; config.json's attackers)"
        facts.append(["attackers (partition ids)", who])
    if spec is not None:
        summary = f"{spec.name}: {spec.summary}" if getattr(spec, "summary", "") else spec.name
        facts.append(["aggregation", summary + (" (robust aggregation)" if robust else "")])
        if robust:
            for setting in spec.settings:
                if setting.key in config:
                    facts.append([setting.key, setting_text(config[setting.key])])
    checks = (
        "on (always): a malformed, non-finite or overflowing reply, or one claiming more"
        " examples than its data, is dropped with its reason"
    )
    facts.append(["reply checks", checks])
    bound = f"{setting_text(norm_bound)}: every training update is clipped to this L2 norm"
    facts.append(["max-update-norm", bound if clipping else "0 (off: updates are not clipped)"])
    if failing:
        mode = setting_text(config.get("failure-mode", "raise"))
        ids = ", ".join(map(str, failing))
        facts.append(["failing-partitions (fault injection)", f"{ids} (failure-mode {mode})"])
    body.append(table(["", "value"], facts, text_columns=(0, 1)))
    if attack != NO_ATTACK:
        body.append(
            "<p>g: the global model a client received; w: the model its honest training gives."
            " The attackers are fixed for the run (the partitions named in config.json's"
            " attackers); they attack in every round they are sampled in.</p>"
        )

    if not rows:
        body.append(absent("history.json rows after round 0 (no round was recorded)"))
        return Section("robustness", title, "\n".join(body))
    # the rounds
    has_clipped = any("clients_clipped" in r for r in rows)
    body.append(
        f"<p>Over {plural(len(rows), 'round')}: {plural(dropped, 'reply', 'replies')} dropped"
        + (f", {plural(clipped, 'update')} clipped" if has_clipped else "")
        + ".</p>"
    )
    if dropped or clipped:
        body.append(img(robustness_png(rows, run.title), "replies dropped and clipped by round"))
    reasons: dict[str, list[str]] = defaultdict(list)
    table_rows = []
    for row in rows:
        failures = row.get("failures") or []
        failures = failures if isinstance(failures, list) else [failures]
        for text in failures:
            who, reason = failure_reason(text)
            reasons[reason].append(who)
        cells = [row["round"], _int(row.get("clients_trained")), _int(row.get("clients_failed"))]
        if has_clipped:
            cells.append(_int(row.get("clients_clipped")))
        joined = "; ".join(map(str, failures))
        cells.append(joined if len(joined) <= MAX_REASON else joined[: MAX_REASON - 3] + "...")
        table_rows.append(cells)
    header = ["round", "aggregated", "dropped"] + (["clipped"] if has_clipped else [])
    shown_rows, note = shown(table_rows)
    body.append(table([*header, "why dropped (failures)"], shown_rows, text_columns=(len(header),)))
    body.append(note)
    if reasons:
        summary = []
        for reason, who in sorted(reasons.items(), key=lambda item: -len(item[1])):
            named = sorted({w for w in who if w}, key=lambda w: (len(w), w))
            summary.append([reason, len(who), ", ".join(named) or "-"])
        body.append("<p>Why replies were dropped, over all rounds:</p>")
        body.append(table(["reason", "replies", "from"], summary, text_columns=(0, 2)))
    comparison = attackers_and_honest(run, attackers)
    if comparison:
        body.append(comparison)
    return Section("robustness", title, "\n".join(body))


def _int(value) -> int | None:
    value = number(value)
    return int(value) if math.isfinite(value) else None


def attackers_and_honest(run: RunFolder, attackers: list[int]) -> str:
    """The attackers' and the honest clients' mean local test accuracy at the last round."""
    if not attackers:
        return ""
    last = next((r for r in reversed(run.history) if r.get("client_accuracies")), None)
    if last is None:
        return ""
    accuracies = {int(k): number(v) for k, v in last["client_accuracies"].items()}
    bad = [v for k, v in accuracies.items() if k in attackers and math.isfinite(v)]
    good = [v for k, v in accuracies.items() if k not in attackers and math.isfinite(v)]
    if not bad or not good:
        return ""
    return (
        f"<p>Round {last['round']}: the global model's mean accuracy on the local test splits"
        f" of the honest clients {fmt(float(np.mean(good)))} ({plural(len(good), 'client')}),"
        f" of the attackers {fmt(float(np.mean(bad)))} ({len(bad)}).</p>"
    )


# --- the environment -----------------------------------------------------------------------------


def environment_section(run: RunFolder) -> Section | None:
    """The versions and the machine (``environment.json``); none for a run folder from
    before the file existed."""
    env = run.file("environment.json")
    if not isinstance(env, dict):
        return None
    rows: list[list] = []
    source = env.get("flowerbed") or {}
    commit = str(source.get("git_commit", "unknown"))
    if source.get("git_dirty"):
        commit += " (with uncommitted changes)"
    rows.append(["flowerbed", f"{source.get('version', 'unknown')}, git commit {commit}"])
    for name, version in (env.get("packages") or {}).items():
        if name != "flowerbed":
            rows.append([name, version])
    python = env.get("python") or {}
    rows.append(["Python", f"{python.get('version', '?')} ({python.get('implementation', '?')})"])
    host = env.get("machine") or {}
    rows.append(["OS", host.get("os", "unknown")])
    cpu = f"{host.get('cpu_count', '?')} CPUs ({host.get('cpus_usable', '?')} usable)"
    if host.get("processor") not in (None, "", "unknown"):
        cpu += f", {host['processor']}"
    rows.append(["machine", f"{host.get('architecture', '?')}, {cpu}"])
    rows.append(["host", host.get("hostname", "unknown")])
    gpus = host.get("gpus") or []
    if gpus:
        rows.append(["GPUs", ", ".join(map(str, gpus))])
    cuda = "available" if host.get("cuda_available") else "not available"
    rows.append(["CUDA", f"{cuda}; torch built with CUDA {host.get('torch_cuda', '?')}"])
    if host.get("mps_available"):
        rows.append(["MPS (Apple)", "available"])
    body = (
        "<p>Where and with what the run was made (environment.json, written when the run"
        " folder was made): the same numbers need the same library versions, hardware and"
        " threads.</p>" + table(["", "version or value"], rows, text_columns=(0, 1))
    )
    return Section("environment", "Versions and machine", body)
