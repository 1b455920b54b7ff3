"""The report's configuration section: what shaped the run, then every key.

The headline table holds the protocol, the data set and the model (always), the number of
clients, and every run-config key whose value differs from its declared default, with that
default beside it. The defaults are the declarations themselves (``flowerbed.catalog.SETTINGS``,
which pyproject's ``[tool.flwr.app.config]`` is generated from), so a key declared tomorrow is
covered; a key the protocol set to its own default (``protocol-defaults`` in ``config.json``)
says so. All keys stay in a collapsed table below.
"""

from __future__ import annotations

import math
from typing import Any

from ..catalog import PROTOCOLS, SETTING_GROUPS, SETTINGS
from .markup import Section, absent, setting_text, table
from .run_folder import RunFolder

ALWAYS = ("strategy", "dataset", "model")  # the headline's first rows, changed or not

# config.json's keys that are not run-config keys: (key, what it is)
RECORDED = {
    "num-partitions": "the federation's size (clients)",
    "run-id": "the run's identity (a checkpoint belongs to it)",
    "protocol-defaults": "the keys that took the protocol's own defaults",
}


def declared() -> tuple[dict[str, Any], dict[str, str], dict[str, dict[str, Any]]]:
    """Every declared key's default, its topic (``catalog.SETTING_GROUPS``) and each
    protocol's own defaults."""
    topics = {
        s.key: topic.replace("`", "") for topic, group in SETTING_GROUPS.items() for s in group
    }
    own = {name: dict(spec.defaults) for name, spec in PROTOCOLS.items()}
    return {k: s.default for k, s in SETTINGS.items()}, topics, own


def same(value: Any, default: Any) -> bool:
    """``value`` (as config.json holds it) equals the declared ``default``: 1 and 1.0 are the
    same float, "0.5" from an old TOML string is not 0.5."""
    if isinstance(default, bool) or isinstance(value, bool):
        return type(value) is type(default) and value == default
    if isinstance(default, (int, float)) and isinstance(value, (int, float)):
        return math.isclose(float(value), float(default), rel_tol=0.0, abs_tol=0.0)
    return value == default


def changed_keys(config: dict[str, Any], defaults: dict[str, Any]) -> list[str]:
    """The declared keys of ``config`` whose value is not their default, in declaration order
    (the order of the documentation's reference)."""
    return [k for k in defaults if k in config and not same(config[k], defaults[k])]


def config_section(run: RunFolder) -> Section:
    title = "Configuration"
    if not run.config:
        return Section("configuration", title, absent("config.json"))
    config = run.config
    defaults, topics, own = declared()
    from_protocol = {
        k.strip() for k in str(config.get("protocol-defaults", "")).split(",") if k.strip()
    }
    protocol_own = own.get(str(config.get("strategy")), {})

    def default_text(key: str) -> str:
        if key not in defaults:
            return "-"
        text = setting_text(defaults[key])
        if key in from_protocol and key in protocol_own:
            text += f" (the protocol's own: {setting_text(protocol_own[key])})"
        return text

    def note(key: str) -> str:
        if key in from_protocol:  # the protocol's, or the data set's model (catalog)
            return "the protocol's own default" if key in protocol_own else "the data set's model"
        if key in defaults and same(config[key], defaults[key]):
            return "default"
        if key in RECORDED:
            return RECORDED[key]
        if key not in defaults and defaults:
            return "not a declared key (an older or newer flowerbed)"
        return topics.get(key, "")

    head = [k for k in ALWAYS if k in config]
    if "num-partitions" in config:
        head.append("num-partitions")
    changed = [k for k in changed_keys(config, defaults) if k not in head]
    rows = [[k, setting_text(config[k]), default_text(k), note(k)] for k in head + changed]
    header = ["key", "value", "default", "note"]
    if defaults:
        intro = (
            f"<p>The protocol, data set and model, the number of clients, and the {len(changed)}"
            f" run-config key{'s' if len(changed) != 1 else ''} set to something other than"
            " the declared default (the default beside each; the note names its topic in the"
            " run-config reference).</p>"
        )
    else:  # no registry: the defaults are unknown
        intro = "<p>The declared defaults could not be read: every key is listed below.</p>"
        rows = [[k, setting_text(config[k]), "-", ""] for k in head]
    body = intro + table(header, rows, text_columns=(0, 1, 2, 3))
    every = [[k, setting_text(v), default_text(k)] for k, v in config.items()]
    body += (
        f"<details><summary>All {len(config)} keys (config.json)</summary>\n"
        + table(["key", "value", "default"], every, text_columns=(0, 1, 2))
        + "</details>"
    )
    return Section("configuration", title, body)
