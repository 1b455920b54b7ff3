"""``environment.json`` of a run folder: the versions and the machine a run ran with.

Written once, when ``start_run`` makes the run folder (a resumed run keeps the file of the run
it continues; ``versions.json`` records a resume under other versions). It holds:

* ``flowerbed``: its version and the git commit of the checkout it was imported from
  (``git_commit``, ``git_dirty``: tracked files changed since that commit), or of the commit
  pip recorded when it installed from git (``direct_url.json``); ``"unknown"`` otherwise;
* ``packages``: the installed versions of the libraries whose change could change a run's
  numbers (``checkpoint.versions``: flwr, torch, numpy, flowerbed) and of those a model or a
  data set may use (PennyLane, scikit-learn, ...), ``"not installed"`` when absent. Versions
  come from ``importlib.metadata``: nothing is imported to learn them;
* ``python``: version and implementation; ``machine``: OS, architecture, host name, CPU
  count, and the GPUs: CUDA's build of torch, the driver's GPU names (read from
  ``/proc/driver/nvidia`` on Linux, or from torch when this process has initialised CUDA:
  collecting the facts never initialises CUDA), Apple's MPS.

``environment()`` never raises: a fact that cannot be learnt reads ``"unknown"``.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import socket
import subprocess
import sys
from logging import WARNING
from pathlib import Path
from typing import Any

from flwr.common.logger import log

from ..core.results import write_json
from .checkpoint import versions as checkpoint_versions

ENVIRONMENT_FILE = "environment.json"

UNKNOWN = "unknown"

NOT_INSTALLED = "not installed"

# the distributions whose versions a run folder records (checkpoint.versions' four first)
PACKAGES = (
    "flowerbed",
    "flwr",
    "torch",
    "numpy",
    "torchvision",
    "pennylane",
    "scikit-learn",
    "scipy",
    "matplotlib",
    "dp-accounting",
    "medmnist",
    "datasets",
    "flwr-datasets",
    "ray",
)

GIT_TIMEOUT_S = 5.0


def package_version(name: str) -> str:
    """The installed version of the distribution ``name``; ``"not installed"`` if absent."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return NOT_INSTALLED
    except Exception:  # noqa: BLE001 - a broken install's metadata is a fact, not an error
        return UNKNOWN


def package_versions() -> dict[str, str]:
    """``PACKAGES`` with their versions; ``checkpoint.versions`` (the versions a resume
    compares) supplies its own, so the two never disagree."""
    versions = {name: package_version(name) for name in PACKAGES}
    try:
        versions.update(checkpoint_versions())
    except Exception:  # noqa: BLE001, S110 - one of its packages missing: the lookups above stand
        pass
    return versions


def _git(checkout: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["git", "-C", str(checkout), *args],
        capture_output=True,
        text=True,
        timeout=GIT_TIMEOUT_S,
        check=False,
    )


def flowerbed_source() -> dict[str, Any]:
    """flowerbed's version, and the git commit it was imported from when known."""
    out: dict[str, Any] = {"version": package_version("flowerbed"), "git_commit": UNKNOWN}
    checkout = Path(__file__).resolve().parent.parent.parent  # the folder above the package
    out["path"] = str(checkout / "flowerbed")
    try:
        if (checkout / ".git").exists():
            head = _git(checkout, "rev-parse", "HEAD")
            if head.returncode == 0 and head.stdout.strip():
                out["git_commit"] = head.stdout.strip()
                changed = _git(checkout, "status", "--porcelain", "--untracked-files=no")
                if changed.returncode == 0:
                    out["git_dirty"] = bool(changed.stdout.strip())
                return out
        # pip's record of an install from a git URL
        direct = importlib.metadata.distribution("flowerbed").read_text("direct_url.json")
        commit = (json.loads(direct or "{}").get("vcs_info") or {}).get("commit_id")
        if commit:
            out["git_commit"] = str(commit)
    except Exception:  # noqa: BLE001, S110 - no git, a timeout, no metadata: the commit is unknown
        pass
    return out


def gpu_names_from_driver() -> list[str]:
    """The GPU models the NVIDIA driver lists (Linux), without touching CUDA."""
    names = []
    try:
        for info in sorted(Path("/proc/driver/nvidia/gpus").glob("*/information")):
            for line in info.read_text(errors="replace").splitlines():
                if line.startswith("Model:"):
                    names.append(line.split(":", 1)[1].strip())
    except OSError:
        pass
    return names


def gpus() -> dict[str, Any]:
    """CUDA and MPS as torch sees them, and the GPUs' names (without initialising CUDA)."""
    out: dict[str, Any] = {"cuda_available": False, "gpus": gpu_names_from_driver()}
    try:
        import torch

        out["torch_cuda"] = torch.version.cuda or "none (a CPU build)"
        out["cuda_available"] = bool(torch.cuda.is_available())
        if out["cuda_available"]:
            out["cuda_devices"] = torch.cuda.device_count()
            if not out["gpus"] and torch.cuda.is_initialized():
                out["gpus"] = [torch.cuda.get_device_name(i) for i in range(out["cuda_devices"])]
        mps = getattr(torch.backends, "mps", None)
        out["mps_available"] = bool(mps is not None and mps.is_available())
    except Exception:  # noqa: BLE001, S110 - torch absent or its CUDA query failing: no GPU facts
        pass
    return out


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, where ``platform.processor`` is
    empty), else what ``platform`` says."""
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def machine() -> dict[str, Any]:
    def fact(get) -> Any:
        try:
            return get() or UNKNOWN
        except Exception:  # noqa: BLE001
            return UNKNOWN

    usable = getattr(os, "sched_getaffinity", None)
    return {
        "os": fact(platform.platform),
        "system": fact(platform.system),
        "architecture": fact(platform.machine),
        "processor": fact(cpu_model),
        "hostname": fact(socket.gethostname),
        "cpu_count": fact(os.cpu_count),
        "cpus_usable": fact(lambda: len(usable(0))) if usable else fact(os.cpu_count),
        **gpus(),
    }


def environment() -> dict[str, Any]:
    """What ``environment.json`` holds (module docstring); never raises."""
    return {
        "flowerbed": flowerbed_source(),
        "packages": package_versions(),
        "python": {
            "version": platform.python_version(),
            "implementation": platform.python_implementation(),
            "executable": sys.executable,
        },
        "machine": machine(),
    }


def write_environment(run_dir: Path) -> None:
    """``environment.json`` in ``run_dir``; a failure to write it is no reason to stop a run
    (the facts are a record, not an input)."""
    try:
        write_json(Path(run_dir) / ENVIRONMENT_FILE, environment())
    except OSError as error:
        log(WARNING, "flowerbed: no %s (%s)", ENVIRONMENT_FILE, error)
