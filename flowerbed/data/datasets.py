"""Loading a data set by its declaration (``registry.DATASETS``) and the run's ``DataOptions``,
cached per process so every Ray actor reads its files once: ``load(spec, options)``, or by name
and keyword arguments, ``load_dataset``.

The cache key is the declaration and the options it reads (``DatasetSpec.reads``): the seed
and ``sim-*`` keys for the generated sets only, so the others are loaded once per process
whatever the seed. Which data sets there are, how each loads and the shapes they come in:
``registry.py`` and ``loaders.py``.
"""

from __future__ import annotations

import functools
from pathlib import Path

from .options import DataOptions
from .pointclouds import NUM_POINTS
from .registry import dataset_spec
from .simulations import SimulationOptions
from .spec import DatasetSpec
from .splits import DatasetSplits


def load(spec: DatasetSpec, options: DataOptions) -> DatasetSplits:
    """The data set ``spec`` declares, read with ``options``; cached per process."""
    return _load_cached(spec, options.reading(spec.reads, spec.name))


@functools.lru_cache(maxsize=8)
def _load_cached(spec: DatasetSpec, options: DataOptions) -> DatasetSplits:
    return spec.loader(spec, options)


def load_dataset(
    name: str,
    data_dir: str | Path = "",
    download: bool = False,
    image_size: int = 28,
    *,
    seed: int = 0,
    simulation: SimulationOptions | None = None,
    num_points: int = NUM_POINTS,
    cache_dir: str | Path = "",
) -> DatasetSplits:
    """Load ``name`` (``load`` with these options; ``DataOptions`` says what each reads)."""
    options = DataOptions(
        data_dir=str(data_dir),
        download=bool(download),
        image_size=int(image_size),
        cache_dir=str(cache_dir),
        seed=int(seed),
        simulation=simulation or SimulationOptions(),
        num_points=int(num_points),
    )
    return load(dataset_spec(name), options)
