"""Peak memory of a process tree (a SuperLink and everything it starts), sampled in a thread.

Two sums over the tree, both from /proc/<pid>/smaps_rollup, sampled every ``interval`` s:

* PSS (proportional set size): a page mapped by k processes counts 1/k in each, so shared
  pages (libraries, a memory-mapped data set) are counted once in the sum;
* RSS (resident set size): every process counts every page it maps, so shared pages are
  counted once per process: an upper bound that overstates shared maps.

Used by ``overhead.py`` and ``memory.py``.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable


class PeakMemory:
    """``with PeakMemory(find_roots) as peak: ...`` then ``peak.peak_pss_bytes`` and
    ``peak.peak_rss_bytes`` (each the highest sum seen; their peaks may be at different
    samples). ``find_roots()`` returns the PIDs of the tree's roots, asked at every sample."""

    def __init__(self, find_roots: Callable[[], list[int]], interval: float = 0.25) -> None:
        self.find_roots, self.interval = find_roots, interval
        self.peak_pss_bytes = self.peak_rss_bytes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @property
    def peak_bytes(self) -> int:
        """The peak PSS sum (the headline number)."""
        return self.peak_pss_bytes

    @staticmethod
    def _tree(roots: list[int]) -> set[int]:
        children: dict[int, list[int]] = {}
        out = subprocess.run(
            ["ps", "-eo", "pid=,ppid="], capture_output=True, text=True, check=False
        ).stdout
        for line in out.split("\n"):
            if line.strip():
                pid, ppid = map(int, line.split())
                children.setdefault(ppid, []).append(pid)
        tree, todo = set(), list(roots)
        while todo:
            pid = todo.pop()
            if pid not in tree:
                tree.add(pid)
                todo.extend(children.get(pid, []))
        return tree

    @staticmethod
    def _pss_and_rss_bytes(pid: int) -> tuple[int, int]:
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

    def _run(self) -> None:
        while not self._stop.is_set():
            sizes = [self._pss_and_rss_bytes(pid) for pid in self._tree(self.find_roots())]
            self.peak_pss_bytes = max(self.peak_pss_bytes, sum(pss for pss, _ in sizes))
            self.peak_rss_bytes = max(self.peak_rss_bytes, sum(rss for _, rss in sizes))
            time.sleep(self.interval)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
