"""The data-related run-config keys, bundled once (``DataOptions.from_config``) and handed to a
data set's loader with its declaration (``spec.DatasetSpec``), instead of config fields
unpacked again at every call. ``for_spec`` keeps only the keys a data set reads: the loaders'
cache key, so a data set read from files is not loaded again for another seed."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from ..settings import RunConfig
from .pointclouds import NUM_POINTS
from .simulations import SimulationOptions

CACHE_SUBFOLDER = "flowerbed-cache"  # the image cache's default place: <data-dir>/flowerbed-cache


def parse_input_shape(text: str) -> tuple[int, ...]:
    """``input-shape``'s text as a shape (``"1,8,8"`` -> ``(1, 8, 8)``; ``""`` -> ``()``)."""
    shape = tuple(int(part) for part in text.split(",")) if text.strip() else ()
    if any(size < 1 for size in shape):
        raise ValueError(text)
    return shape


@dataclass(frozen=True)
class DataOptions:
    """What a loader may read besides its data set's declaration.

    ``cache_dir``: the image cache of MedMNIST, CIFAR-10 and MNIST ("" = ``<data_dir>/``
    ``flowerbed-cache``); for the generated FedProx sets, where they are written once and mapped
    ("" = generated in this process's memory). ``seed`` and ``simulation`` (the ``sim-*``
    keys): the generated sets'. ``num_points``: points per shape of the point-cloud sets.
    ``label_column``, ``input_shape``, ``num_classes``, ``test_fraction``: a site's folder's.
    """

    data_dir: str = ""
    download: bool = False
    image_size: int = 28
    cache_dir: str = ""
    seed: int = 0
    simulation: SimulationOptions = field(default_factory=SimulationOptions)
    num_points: int = NUM_POINTS
    label_column: str = "label"
    input_shape: tuple[int, ...] = ()
    num_classes: int = 0
    test_fraction: float = 0.2

    @classmethod
    def from_config(cls, config: RunConfig) -> DataOptions:
        """The options of a run config (``cache-dir`` resolved: ``<data-dir>/flowerbed-cache``
        when empty)."""
        cache_dir = Path(config.cache_dir or config.data_path / CACHE_SUBFOLDER)
        return cls(
            data_dir=str(config.data_path),
            download=config.download,
            image_size=config.image_size,
            cache_dir=str(cache_dir.expanduser().resolve()),
            seed=config.seed,
            simulation=SimulationOptions.from_config(config),
            num_points=config.num_points,
            label_column=config.label_column,
            input_shape=parse_input_shape(config.input_shape),
            num_classes=config.num_classes,
            test_fraction=config.local_test_fraction,
        )

    def reading(self, keys: tuple[str, ...], dataset: str) -> DataOptions:
        """These options with the fields not in ``keys`` at their defaults, and of the
        ``sim-*`` keys only those ``dataset`` reads (a cache key)."""
        kept = {key: getattr(self, key) for key in keys}
        if "simulation" in kept:
            kept["simulation"] = self.simulation.for_dataset(dataset)
        return replace(DataOptions(), **kept)

    @property
    def image_cache(self) -> Path:
        """The image cache's folder: ``cache_dir``, else ``<data_dir>/flowerbed-cache``."""
        return Path(self.cache_dir or Path(self.data_dir) / CACHE_SUBFOLDER).expanduser()
