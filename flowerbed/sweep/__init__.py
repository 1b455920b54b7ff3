"""Sweeps: grids of runs, run in parallel as Ray tasks, summarised as mean ± std over seeds.

``flowerbed sweep`` (``command.py``) and benchmark scripts build a ``SweepSpec`` (``grid``),
``run_sweep`` runs its unfinished points (``execute``) in a sweep folder (``folder``) and
writes its summary (``summary``) and ``report.html`` (``report``), after each point and at the
end::

    spec = SweepSpec((Axis.of_key("strategy", ["fedavg", "fedprox"]), Axis.of_key("seed", [0, 1])),
                     fixed={"num-server-rounds": 5}, num_clients=10)
    for result in run_sweep(spec, Path("sweeps/demo"), workers=2):
        result.point.labels, result.state.status, result.run_dir
"""

from .execute import VIA, PointResult, run_sweep
from .folder import PointState, load_spec, point_state
from .grid import Axis, Point, SweepSpec, check_grid, grid_from_cli, grid_from_toml
from .summary import load_history, mean_std, write_summary

__all__ = [
    "VIA",
    "Axis",
    "Point",
    "PointResult",
    "PointState",
    "SweepSpec",
    "check_grid",
    "grid_from_cli",
    "grid_from_toml",
    "load_history",
    "load_spec",
    "mean_std",
    "point_state",
    "run_sweep",
    "write_summary",
]
