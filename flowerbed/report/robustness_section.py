"""The report's robustness section: how a run fared against declared attacks and faulty
clients.

``robustness_section`` (an attack, a robust aggregation rule, ``max-update-norm``,
``failing-partitions``, or any reply dropped or clipped): the attack and its attackers (the
partition ids of ``attackers`` in ``config.json``, ``attacker_ids``), the defences, and per
round the replies dropped and why (``clients_failed``, ``failures``) and the updates clipped
(``clients_clipped``).
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from typing import Any

import numpy as np

from ..catalog import PROTOCOLS
from .markup import Section, absent, fmt, img, plural, setting_text, shown, table
from .plots import integer_ticks, png_bytes, pyplot, style
from .run_folder import RunFolder, column, number

NO_ATTACK = "none"

# what an attacker replies instead of its honest model w, g the global model it received
# (flowerbed.trust.attacks' module docstring)
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
        # the spec's summary is the docs' Markdown: its code spans read as plain text here
        plain = getattr(spec, "summary", "").replace("`", "")
        summary = f"{spec.name}: {plain}" if plain else spec.name
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
