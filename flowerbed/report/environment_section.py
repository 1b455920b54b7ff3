"""The report's environment section: the versions and the machine a run was made with
(``environment.json``, written by ``runtime.environment``)."""

from __future__ import annotations

from .markup import Section, table
from .run_folder import RunFolder


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
