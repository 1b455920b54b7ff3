"""What a data set takes of one process's memory and of the data cache under the run's options
(``spec.DataSize``), one function for each way a data set is held: a declaration names its own
in ``sizing`` (``registry.DATASETS``), and the pre-flight's estimate (``runtime.needs``) calls
it, so a new data set needs no edit there. Nothing is loaded and no file read but the cache's
folder names: the sample counts, shapes and classes are the declaration's (``train_size``,
``test_size``, ``input_shape(options)``, ``num_classes``), or for a generated set the formula
of its generator's sizes.

* ``held``: rows held by the process as float32 (scikit-learn's sets, ``mnist-5k``);
* ``torchvision_cached``, ``medmnist_cached``: uint8 rows memory-mapped from the image cache
  (``image_cache``), written once into ``cache-dir``; torchvision's arrays and a contiguous copy
  while the cache is built;
* ``point_clouds``: held as float32, with the loader's copies while loading;
* ``shifted_copies``, ``gaussian_nodes``: generated in float64 and standardised (the peak
  measured: ``GENERATION_BYTES_PER_VALUE``);
* ``fedprox_synthetic``: the FedProx sets, generated once into ``cache-dir`` and mapped: their
  expected size, from the sample counts' log-normal law.
"""

from __future__ import annotations

import math
import re
from dataclasses import replace
from pathlib import Path

from .fedprox_synthetic import MIN_SAMPLES, NUM_FEATURES, SIZE_LOG_MEAN, SIZE_LOG_STD, train_size
from .medmnist_files import medmnist_file
from .options import DataOptions
from .simulations import TEST_FRACTION, node_test_size, synthetic_cache_folder
from .spec import DatasetSpec, DataSize

FLOAT = 4  # bytes of a float32 value
INDEX = 8  # bytes of an int64 label or index
BREAST_CANCER_ROWS = 569  # scikit-learn's breast cancer data, copied sim-shifts times
GENERATION_BYTES_PER_VALUE = 26  # breast-cancer-shifted, ctl-gaussian: float64 draws, measured 25
POINT_LOAD_COPIES = 4  # a point-cloud split, its centred and scaled copies, the float32 copy
SYNTHETIC_ROW_BYTES = NUM_FEATURES * FLOAT + 2 * INDEX  # features, label, node (the cache)
# the builder of a synthetic set: per client its random stream and its labelling model
SYNTHETIC_BUILD_BYTES_PER_CLIENT = 6_500
# E[n_k] = E[floor(lognormal(4, 2))] + 50 ~ exp(4 + 2^2 / 2) - 1/2 + 50
SYNTHETIC_MEAN_SAMPLES = math.exp(SIZE_LOG_MEAN + SIZE_LOG_STD**2 / 2) - 0.5 + MIN_SAMPLES


def held(spec: DatasetSpec, options: DataOptions) -> DataSize:
    """A data set of fixed sizes, held by the process (counted as float32)."""
    return DataSize(
        spec.train_size,
        spec.test_size,
        spec.input_shape(options),
        spec.num_classes,
        (spec.sized_by,) if spec.sized_by else (),
    )


def image_cache_built(cache_dir: Path, key: str) -> bool:
    """Whether the image cache holds a finished folder of ``key`` (``image_cache``): a changed
    source is rebuilt beside it, but the space of one version is then already in use."""
    pattern = re.compile(re.escape(key) + r"-[0-9a-f]{16}")
    return cache_dir.is_dir() and any(
        pattern.fullmatch(folder.name) and (folder / "meta.json").is_file()
        for folder in cache_dir.iterdir()
    )


def _image_cached(size: DataSize, options: DataOptions, key: str, load_copies: int) -> DataSize:
    """``size`` as uint8 images mapped from the image cache's folder ``key``."""
    images = size.values
    return replace(
        size,
        mapped=True,
        load_bytes=load_copies * images,
        cache_bytes=images + (size.train + size.test) * INDEX,
        cached=image_cache_built(options.image_cache, key),
    )


def torchvision_cached(spec: DatasetSpec, options: DataOptions) -> DataSize:
    """CIFAR-10, MNIST: cached under their name; torchvision's uint8 arrays and a contiguous
    copy while the cache is built."""
    return _image_cached(held(spec, options), options, spec.name, load_copies=2)


def medmnist_cached(spec: DatasetSpec, options: DataOptions) -> DataSize:
    """A MedMNIST flag: cached under its file's name at the run's ``image-size``."""
    key = medmnist_file(spec.name, Path(options.data_dir), options.image_size).stem
    return _image_cached(held(spec, options), options, key, load_copies=0)


def point_clouds(spec: DatasetSpec, options: DataOptions) -> DataSize:
    """A point-cloud set: the training split's copies while it loads."""
    size = held(spec, options)
    load = (POINT_LOAD_COPIES - 1) * size.train * math.prod(size.shape) * FLOAT
    return replace(size, load_bytes=load)


def _generated(size: DataSize) -> DataSize:
    """A set generated in float64 and standardised: its peak (measured) beyond what is kept."""
    return replace(size, load_bytes=(GENERATION_BYTES_PER_VALUE - FLOAT) * size.values)


def shifted_copies(spec: DatasetSpec, options: DataOptions) -> DataSize:
    """``breast-cancer-shifted``: ``sim-shifts`` copies, a random 20 % of the rows held out."""
    rows = options.simulation.shifts * BREAST_CANCER_ROWS
    test = int(TEST_FRACTION * rows)
    shape = spec.input_shape(options)
    return _generated(DataSize(rows - test, test, shape, spec.num_classes, ("sim-shifts",)))


def gaussian_nodes(spec: DatasetSpec, options: DataOptions) -> DataSize:
    """``ctl-gaussian``: ``sim-nodes`` x ``sim-samples-per-node`` rows and their nodes."""
    nodes, per_node = options.simulation.nodes, options.simulation.samples_per_node
    test = nodes * node_test_size(per_node)
    keys = ("sim-nodes", "sim-samples-per-node")
    size = DataSize(
        nodes * per_node - test, test, spec.input_shape(options), spec.num_classes, keys, nodes=True
    )
    return _generated(size)


def fedprox_synthetic(spec: DatasetSpec, options: DataOptions) -> DataSize:
    """``synthetic``, ``synthetic-iid``: ``sim-nodes`` clients of the expected sample count,
    mapped from ``cache-dir``; the builder's per-client state while it is written."""
    nodes = options.simulation.nodes
    rows = round(nodes * SYNTHETIC_MEAN_SAMPLES)
    train = round(nodes * train_size(round(SYNTHETIC_MEAN_SAMPLES)))
    simulation = options.simulation.for_dataset(spec.name)
    folder = synthetic_cache_folder(spec.name, options.seed, simulation, options.image_cache)
    cached = folder.is_dir()
    return DataSize(
        train,
        rows - train,
        spec.input_shape(options),
        spec.num_classes,
        ("sim-nodes",),
        mapped=True,
        nodes=True,
        load_bytes=0 if cached else nodes * SYNTHETIC_BUILD_BYTES_PER_CLIENT,
        cache_bytes=rows * SYNTHETIC_ROW_BYTES,
        cached=cached,
    )
