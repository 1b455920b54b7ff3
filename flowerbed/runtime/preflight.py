"""The pre-flight: the checks a run passes before any data set is loaded or model built, each
failing with one ``ConfigError`` line instead of a crash later.

* ``check_model_fits``: the model can take the data set's samples (built on torch's meta
  device);
* ``check_data_files``: the data set's files are in ``data-dir``, or are to be downloaded;
* ``check_resources``: the run's estimate (``runtime.needs``: memory of one process, disk of the
  data cache) fits this machine's available memory (``/proc/meminfo``'s MemAvailable, else
  ``os.sysconf``'s available pages) and the free space of ``cache-dir``'s file system; a VQC too
  deep is refused with the most ``vqc-layers`` that would fit.

``check_resources`` runs in ``start_run`` before any data set is loaded or model built, and
again with the number of clients right after the handshake, before the partition is computed;
``flowerbed run`` runs all three before anything starts, ``flowerbed sweep`` the data files'.
The message says what the run needs, what is available, and the run-config keys that size the
largest parts, instead of the run dying later by the kernel's out-of-memory killer, a full
disk, or a SIGBUS.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import torch

from ..data.federation import SITE
from ..data.registry import downloadable_datasets, fitting_model, missing_data
from ..models import MODELS
from ..settings import ConfigError, RunConfig
from .needs import GIB, Estimate, Need, data_size, estimate, input_of


# --- the machine ----------------------------------------------------------------------------
def available_memory() -> int:
    """Bytes this machine can give a new process now: MemAvailable of ``/proc/meminfo`` (free
    memory plus what the kernel can reclaim), else the available pages of ``os.sysconf``."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def free_disk(folder: Path) -> int:
    """Free bytes of the file system ``folder`` is (or will be made) on."""
    for candidate in (folder, *folder.parents):
        if candidate.exists():
            return shutil.disk_usage(candidate).free
    return shutil.disk_usage("/").free


def check_model_fits(config: RunConfig) -> None:
    """``ConfigError`` when ``model`` cannot take the data set's samples (its builder refuses
    the input shape: a CNN given tabular rows, PointNet given images), found by building it on
    torch's meta device before anything is loaded; the message names the model that fits."""
    model_input = input_of(config, data_size(config))
    if model_input is None or config.model == "vqc" or config.model not in MODELS:
        return
    shape, classes = model_input
    try:
        with torch.device("meta"):
            MODELS[config.model](shape, classes)
    except ValueError as error:
        fits = fitting_model(config.dataset)
        hint = f"; dataset={config.dataset!r} takes model={fits!r}" if fits else ""
        raise ConfigError(
            f"model={config.model!r} cannot take dataset={config.dataset!r}: {error}{hint}"
        ) from None


def check_data_files(config: RunConfig) -> None:
    """``ConfigError`` when the data set's files are not in ``data-dir`` and not to be
    downloaded (a site's own data is on its nodes: not checked), in the syntax of the
    ``flowerbed`` commands (``--set download=true``): ``flowerbed run`` and ``flowerbed
    sweep`` ask before anything starts (the loaders say the same, for ``flwr run``)."""
    if config.partitioner == SITE:
        return
    missing = missing_data(config.dataset, config.data_path, config.image_size)
    if missing is None or (config.download and config.dataset in downloadable_datasets()):
        return
    if config.dataset in downloadable_datasets():
        missing += ", or add --set download=true on a machine with internet"
    raise ConfigError(f"dataset={config.dataset!r}: {missing}")


def _gib(size: int) -> str:
    return f"{size / GIB:.3g} GiB"


def _largest(needs: tuple[Need, ...]) -> tuple[list[Need], list[str]]:
    """The two largest parts and the keys that size them (in that order, each once)."""
    top = sorted((need for need in needs if need.keys), key=lambda need: -need.bytes)[:2]
    keys = list(dict.fromkeys(key for need in top for key in need.keys))
    return top, keys


def _most_layers(config: RunConfig, num_clients: int | None, room: int) -> int | None:
    """The most ``vqc-layers`` with which this run's estimate fits in ``room`` bytes (the
    estimate grows with the layers: a bisection), or ``None`` when even one layer does not."""

    def fits(layers: int) -> bool:
        return estimate(config.replace(vqc_layers=layers), num_clients).memory_bytes <= room

    low, high = 1, config.vqc_layers  # fits(low), not fits(high)
    if not fits(low) or fits(high):
        return None
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return low


def check_resources(config: RunConfig, num_clients: int | None = None) -> Estimate:
    """The estimate, or a ``ConfigError`` (one line: needed, available, the keys to change)
    when one process would not fit this machine's available memory or the cache would not fit
    its disk."""
    found = estimate(config, num_clients)
    clients = f" with {num_clients} clients" if num_clients is not None else ""
    memory, room = found.memory_bytes, available_memory()
    if memory > room:
        top, keys = _largest(found.memory)
        parts = "; ".join(f"{need.what}: {_gib(need.bytes)}" for need in top)
        most = _most_layers(config, num_clients, room) if "vqc-layers" in keys else None
        if most is not None:
            keys[keys.index("vqc-layers")] = (
                f"vqc-layers={config.vqc_layers} (at most {most:,} fit)"
            )
        raise ConfigError(
            f"this run{clients} needs about {_gib(memory)} of memory per process ({parts}), more"
            f" than the {_gib(room)} available on this machine; change"
            f" {', '.join(keys) or 'the number of clients'}"
        )
    if found.disk:
        free = free_disk(found.cache_dir)
        if found.disk_bytes > free:
            top, keys = _largest(found.disk)
            parts = "; ".join(f"{need.what}: {_gib(need.bytes)}" for need in top)
            raise ConfigError(
                f"this run needs about {_gib(found.disk_bytes)} of disk in"
                f" cache-dir={str(found.cache_dir)!r} ({parts}), more than the {_gib(free)}"
                f" free there; free space, set cache-dir to another disk, or change"
                f" {', '.join(keys)}"
            )
    return found
