"""Point-cloud data sets and the FL + KD benchmark's training augmentation (paper 002, SEEDS.md
2.1). Every shape is ``(num_points, 3)`` float32 coordinates (1024 by default, the paper's),
centred and scaled into the unit sphere (the ModelNet preprocessing of PointNet++'s loader),
labels int64.

* ``shapes``: generated offline, a fixed set (the same in every run and process, whatever the
  run's seed, like ``digits``): 6 classes (sphere, cube surface, cylinder with caps, cone with
  base, torus, flat square plate), points drawn uniformly on the surface, random anisotropic
  size (each axis x U[0.7, 1.3]), random 3-D rotation (uniform on SO(3)), jitter N(0, 0.01^2)
  clipped to +-0.05, then normalised. 100 training and 25 test shapes per class (600 / 150),
  drawn from two fixed seeds, so train and test are disjoint draws and neither depends on the
  run's seed.
* ``modelnet40``, ``modelnet10`` (Wu et al., "3D ShapeNets", CVPR 2015) from ``data-dir``: the
  resampled text format (``modelnet40_normal_resampled/``: ``<set>_shape_names.txt``,
  ``<set>_train.txt``, ``<set>_test.txt``, ``<class>/<shape id>.txt`` with lines
  ``x,y,z,nx,ny,nz``; the first 1024 points, xyz only), or for ModelNet40 the HDF5 format
  (``modelnet40_ply_hdf5_2048/ply_data_{train,test}*.h5`` with ``data`` (n, 2048, 3) and
  ``label``; the first 1024 points; needs ``h5py``).

``augment_point_batch`` is the paper's training augmentation (random point dropout, isotropic
scaling, translation); it is not applied by the loaders.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from ..settings import Setting

POINT_CLOUD_DATASETS = ("shapes", "modelnet40", "modelnet10")
NUM_POINTS = 1024  # points per shape: the paper's (and PointNet++'s) ModelNet input
SHAPE_CLASSES = ("sphere", "cube", "cylinder", "cone", "torus", "plate")
SHAPES_TRAIN_PER_CLASS, SHAPES_TEST_PER_CLASS = 100, 25
_SHAPES_TRAIN_SEED, _SHAPES_TEST_SEED = 1, 2  # fixed: the set must not change with the run seed
TEXT_FOLDER = "modelnet40_normal_resampled"
HDF5_FOLDER = "modelnet40_ply_hdf5_2048"
TEXT_URL = "https://shapenet.cs.stanford.edu/media/modelnet40_normal_resampled.zip"
HDF5_URL = "https://shapenet.cs.stanford.edu/media/modelnet40_ply_hdf5_2048.zip"

SETTINGS = (
    Setting(
        "num-points",
        NUM_POINTS,
        "point-cloud data sets (`shapes`, `modelnet40`, `modelnet10`): points per shape (the"
        " first ones of a ModelNet file: 10000 in the text format, 2048 in HDF5; `shapes` draws"
        " this many)",
        low=16,
        high=10000,
    ),
)


# --- the generated shape set -----------------------------------------------------------------
def _disc(rng: np.random.Generator, n: int) -> np.ndarray:
    """n points uniform on the unit disc, (n, 2)."""
    radius, angle = np.sqrt(rng.random(n)), rng.uniform(0, 2 * np.pi, n)
    return np.stack([radius * np.cos(angle), radius * np.sin(angle)], axis=1)


def _sphere(rng, n):
    points = rng.standard_normal((n, 3))
    return points / np.linalg.norm(points, axis=1, keepdims=True)


def _cube(rng, n):
    """Surface of [-1, 1]^3: a face per point (6 of equal area), uniform on the face."""
    points = rng.uniform(-1, 1, (n, 3))
    face = rng.integers(0, 6, n)
    points[np.arange(n), face % 3] = np.where(face < 3, -1.0, 1.0)
    return points


def _cylinder(rng, n):
    """Radius 1, height 2, with caps; side and caps by area (4 pi : 2 pi)."""
    angle = rng.uniform(0, 2 * np.pi, n)
    points = np.stack([np.cos(angle), np.sin(angle), rng.uniform(-1, 1, n)], axis=1)
    cap = rng.random(n) < 1 / 3
    points[cap, :2] = _disc(rng, int(cap.sum()))
    points[cap, 2] = np.where(rng.random(int(cap.sum())) < 0.5, -1.0, 1.0)
    return points


def _cone(rng, n):
    """Apex (0, 0, 1), base radius 1 at z = -1, with the base; by area (pi sqrt 5 : pi)."""
    fraction = np.sqrt(rng.random(n))  # distance from the apex: density grows with the radius
    angle = rng.uniform(0, 2 * np.pi, n)
    points = np.stack(
        [fraction * np.cos(angle), fraction * np.sin(angle), 1 - 2 * fraction], axis=1
    )
    base = rng.random(n) < 1 / (1 + np.sqrt(5))
    points[base, :2] = _disc(rng, int(base.sum()))
    points[base, 2] = -1.0
    return points


def _torus(rng, n, major=1.0, minor=0.35):
    """Uniform on the torus surface: tube angles accepted with probability ~ local radius."""
    angles = np.empty((0, 2))
    while len(angles) < n:
        candidate = rng.uniform(0, 2 * np.pi, (2 * n, 2))
        keep = rng.random(2 * n) < (major + minor * np.cos(candidate[:, 1])) / (major + minor)
        angles = np.concatenate([angles, candidate[keep]])
    around, tube = angles[:n, 0], angles[:n, 1]
    ring = major + minor * np.cos(tube)
    return np.stack([ring * np.cos(around), ring * np.sin(around), minor * np.sin(tube)], axis=1)


def _plate(rng, n):
    """The flat square [-1, 1]^2 at z = 0."""
    return np.concatenate([rng.uniform(-1, 1, (n, 2)), np.zeros((n, 1))], axis=1)


_SURFACES = (_sphere, _cube, _cylinder, _cone, _torus, _plate)  # in SHAPE_CLASSES order


def random_rotation(rng: np.random.Generator) -> np.ndarray:
    """A rotation matrix uniform on SO(3) (QR of a Gaussian matrix, signs fixed)."""
    q, r = np.linalg.qr(rng.standard_normal((3, 3)))
    q *= np.sign(np.diag(r))
    if np.linalg.det(q) < 0:
        q[:, 0] = -q[:, 0]
    return q


def normalise_to_unit_sphere(points: np.ndarray) -> np.ndarray:
    """Centre ``(..., N, 3)`` clouds on their mean, scale the farthest point to radius 1."""
    centred = points - points.mean(axis=-2, keepdims=True)
    radius = np.linalg.norm(centred, axis=-1).max(axis=-1)[..., None, None]
    return centred / np.where(radius > 0, radius, 1.0)


def generate_shapes(
    per_class: int, seed: int, num_points: int = NUM_POINTS
) -> tuple[np.ndarray, np.ndarray]:
    """``per_class`` shapes of every class, class by class: float32 ``(6 per_class,
    num_points, 3)`` and int64 labels; a pure function of its arguments."""
    rng = np.random.default_rng(seed)
    clouds = np.empty((len(_SURFACES) * per_class, num_points, 3))
    for label, surface in enumerate(_SURFACES):
        for i in range(per_class):
            points = surface(rng, num_points) * rng.uniform(0.7, 1.3, 3)
            points = points @ random_rotation(rng).T
            points += np.clip(rng.normal(0.0, 0.01, points.shape), -0.05, 0.05)
            clouds[label * per_class + i] = points
    labels = np.repeat(np.arange(len(_SURFACES)), per_class)
    return normalise_to_unit_sphere(clouds).astype(np.float32), labels.astype(np.int64)


def shapes_dataset(num_points: int = NUM_POINTS):
    """``shapes``: (x_train, y_train, x_test, y_test), 600 / 150 shapes from fixed seeds."""
    x_train, y_train = generate_shapes(SHAPES_TRAIN_PER_CLASS, _SHAPES_TRAIN_SEED, num_points)
    x_test, y_test = generate_shapes(SHAPES_TEST_PER_CLASS, _SHAPES_TEST_SEED, num_points)
    return x_train, y_train, x_test, y_test


# --- ModelNet --------------------------------------------------------------------------------
def _missing(message: str) -> Exception:
    """A missing file (``datasets`` turns it into its ``DataNotFoundError``)."""
    return FileNotFoundError(message)


def _read_text_split(folder: Path, name: str, split: str, classes: dict[str, int], num_points: int):
    ids = (folder / f"{name}_{split}.txt").read_text().split()
    clouds = np.empty((len(ids), num_points, 3), dtype=np.float32)
    labels = np.empty(len(ids), dtype=np.int64)
    for i, shape_id in enumerate(ids):
        category = shape_id.rsplit("_", 1)[0]
        path = folder / category / f"{shape_id}.txt"
        if not path.is_file():
            raise _missing(f"{path} not found (listed in {name}_{split}.txt)")
        points = np.loadtxt(path, delimiter=",", usecols=(0, 1, 2), max_rows=num_points, ndmin=2)
        if len(points) < num_points:
            raise ValueError(f"{path} has {len(points)} points, {num_points} needed")
        clouds[i], labels[i] = points, classes[category]
    return normalise_to_unit_sphere(clouds).astype(np.float32), labels


def load_modelnet_text(folder: Path, name: str, num_points: int = NUM_POINTS):
    """ModelNet ``name`` (``modelnet40`` or ``modelnet10``) from the resampled text folder:
    the first ``num_points`` points of every shape."""
    names = (folder / f"{name}_shape_names.txt").read_text().split()
    classes = {category: label for label, category in enumerate(names)}
    return (
        *_read_text_split(folder, name, "train", classes, num_points),
        *_read_text_split(folder, name, "test", classes, num_points),
    )


def load_modelnet40_hdf5(folder: Path, num_points: int = NUM_POINTS):
    """ModelNet40 from ``ply_data_{train,test}*.h5``: the first ``num_points`` of 2048."""
    try:
        import h5py
    except ImportError as error:
        raise ImportError(
            f"reading {folder} needs h5py: pip install h5py (or use the text folder"
            f" {TEXT_FOLDER}/ from {TEXT_URL})"
        ) from error
    splits = []
    for split in ("train", "test"):
        files = sorted(folder.glob(f"ply_data_{split}*.h5"))
        if not files:
            raise _missing(f"no ply_data_{split}*.h5 in {folder} (from {HDF5_URL})")
        data, labels = [], []
        for path in files:
            with h5py.File(path, "r") as f:
                if f["data"].shape[1] < num_points:
                    raise ValueError(f"{path} has {f['data'].shape[1]} points, {num_points} needed")
                data.append(np.asarray(f["data"][:, :num_points, :3], dtype=np.float32))
                labels.append(np.asarray(f["label"]).reshape(-1).astype(np.int64))
        clouds = normalise_to_unit_sphere(np.concatenate(data)).astype(np.float32)
        splits += [clouds, np.concatenate(labels)]
    return tuple(splits)


def load_modelnet(name: str, data_dir: Path, num_points: int = NUM_POINTS):
    """``modelnet40`` / ``modelnet10`` from ``data_dir``: the text folder if there, else (40
    only) the HDF5 folder; a missing folder is a ``DataNotFoundError`` naming what to get."""
    if (missing := missing_point_clouds(name, data_dir)) is not None:
        raise _missing(missing)
    text = data_dir / TEXT_FOLDER
    if (text / f"{name}_shape_names.txt").is_file():
        return load_modelnet_text(text, name, num_points)
    return load_modelnet40_hdf5(data_dir / HDF5_FOLDER, num_points)


def missing_point_clouds(name: str, data_dir: Path) -> str | None:
    """What ``name`` lacks under ``data_dir`` (``load_modelnet``'s folders), None when there
    (``shapes`` is generated: never)."""
    if name not in ("modelnet40", "modelnet10"):
        return None
    text = data_dir / TEXT_FOLDER
    if (text / f"{name}_shape_names.txt").is_file():
        return None
    if name == "modelnet40" and (data_dir / HDF5_FOLDER).is_dir():
        return None
    also = f" or {data_dir / HDF5_FOLDER}/ (from {HDF5_URL})" if name == "modelnet40" else ""
    return (
        f"{name} not found: expected {text}/ with {name}_shape_names.txt (unzip {TEXT_URL}"
        f" into {data_dir}){also}"
    )


def load_point_clouds(name: str, data_dir: Path, num_points: int = NUM_POINTS):
    """(x_train, y_train, x_test, y_test) of the point-cloud data set ``name``."""
    if name == "shapes":
        return shapes_dataset(num_points)
    if name in ("modelnet40", "modelnet10"):
        return load_modelnet(name, data_dir, num_points)
    raise ValueError(
        f"unknown point-cloud dataset {name!r}; valid choices: {', '.join(POINT_CLOUD_DATASETS)}"
    )


# --- augmentation ----------------------------------------------------------------------------
MAX_DROPOUT = 0.875
SCALE_RANGE = (0.8, 1.25)
MAX_SHIFT = 0.1


def augment_point_batch(x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """The paper's training augmentation of a batch ``(B, N, 3)`` (a new tensor), per cloud:
    random point dropout (each point dropped with probability ~ U[0, 0.875], a dropped point
    replaced by the cloud's first point), isotropic scaling by U[0.8, 1.25], then translation
    by U[-0.1, 0.1] per axis (PointNet++'s ``random_point_dropout``, ``random_scale_point_cloud``
    and ``shift_point_cloud``, in that order)."""
    batch, num_points, _ = x.shape

    def uniform(shape, low, high):
        values = torch.rand(shape, generator=generator, dtype=x.dtype).to(x.device)
        return low + (high - low) * values

    fraction = uniform((batch, 1), 0.0, MAX_DROPOUT)
    dropped = uniform((batch, num_points), 0.0, 1.0) <= fraction
    out = torch.where(dropped.unsqueeze(-1), x[:, :1, :], x)
    out = out * uniform((batch, 1, 1), *SCALE_RANGE)
    return out + uniform((batch, 1, 3), -MAX_SHIFT, MAX_SHIFT)
