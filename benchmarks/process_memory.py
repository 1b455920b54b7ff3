"""Peak memory of a process tree (a SuperLink and everything it started), for the benchmarks.

Two sums over the tree, both from /proc/<pid>/smaps_rollup, sampled in a thread:

* PSS (proportional set size): a page mapped by n processes counts 1/n in each, so shared
  pages (libraries, a memory-mapped data set) are counted once in the sum: the headline;
* RSS (resident set size): every process counts every page it maps, so shared pages are
  counted once per process: an upper bound that overstates shared maps.
 The tree is found by walking /proc (each
process's parent is field 4 of /proc/<pid>/stat); psutil is not a dependency. Hand-written:
the standard library has no process-tree or PSS reader.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path


def parent_of() -> dict[int, int]:
    """``{pid: parent pid}`` of every process visible in /proc."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # the process ended meanwhile
            continue
        # "pid (command) state ppid ...": the command may hold spaces and parentheses
        fields = stat[stat.rindex(")") + 2 :].split()
        parents[int(entry.name)] = int(fields[1])
    return parents


def process_tree(roots: list[int]) -> set[int]:
    """``roots`` and all their descendants."""
    children: dict[int, list[int]] = {}
    for pid, parent in parent_of().items():
        children.setdefault(parent, []).append(pid)
    tree, todo = set(), list(roots)
    while todo:
        pid = todo.pop()
        if pid not in tree:
            tree.add(pid)
            todo.extend(children.get(pid, []))
    return tree


def pss_and_rss_bytes(pid: int) -> tuple[int, int]:
    """The PSS and RSS of one process (0 if it ended or cannot be read)."""
    pss = rss = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    pss = int(line.split()[1]) * 1024
                elif line.startswith("Rss:"):
                    rss = int(line.split()[1]) * 1024
    except OSError:
        pass
    return pss, rss


class TreeSampler:
    """Calls ``sample()`` every ``interval`` seconds in a thread while the ``with`` block runs."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            time.sleep(self.interval)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


class PeakMemory(TreeSampler):
    """The peak of the summed PSS (``peak_bytes``) and RSS (``peak_rss_bytes``; its peak may be
    at another sample) of the trees under ``find_roots()`` (called every sample, so roots that
    start later, such as a detached SuperLink, are found), sampled every ``interval`` seconds
    while the ``with`` block runs. With ``kind_of(pid) -> str``, the PSS peak's bytes by kind
    of process are kept in ``peak_by_kind``."""

    def __init__(
        self,
        find_roots: Callable[[], list[int]],
        interval: float = 0.25,
        kind_of: Callable[[int], str] | None = None,
    ) -> None:
        super().__init__(interval)
        self.find_roots, self.kind_of = find_roots, kind_of
        self.peak_bytes = self.peak_rss_bytes = 0
        self.peak_processes = 0
        self.peak_by_kind: dict[str, int] = {}

    @property
    def peak_pss_bytes(self) -> int:
        return self.peak_bytes

    def sample(self) -> int:
        both = {pid: pss_and_rss_bytes(pid) for pid in process_tree(self.find_roots())}
        sizes = {pid: pss for pid, (pss, _) in both.items()}
        self.peak_rss_bytes = max(self.peak_rss_bytes, sum(rss for _, rss in both.values()))
        total = sum(sizes.values())
        if total > self.peak_bytes:
            self.peak_bytes, self.peak_processes = total, len(sizes)
            if self.kind_of is not None:
                by_kind: dict[str, int] = {}
                for pid, size in sizes.items():
                    kind = self.kind_of(pid)
                    by_kind[kind] = by_kind.get(kind, 0) + size
                self.peak_by_kind = by_kind
        return total


def own_children() -> list[int]:
    """The direct children of this process (a ``flwr run`` started with ``subprocess``)."""
    me = os.getpid()
    return [pid for pid, parent in parent_of().items() if parent == me]
