"""Data sets (each one declaration in ``registry.DATASETS``) and partitions."""

from .datasets import load, load_dataset
from .mapped_images import MappedImages
from .options import DataOptions
from .partition import (
    PARTITIONERS,
    TEST_PARTITIONERS,
    Partition,
    label_counts,
    partition_data,
    partition_indices,
    split_train_test,
)
from .registry import DATASETS, available_datasets
from .simulations import GENERATED_DATASETS, NODE_DATASETS
from .spec import DatasetSpec
from .splits import DataNotFoundError, DatasetSplits

__all__ = [
    "DATASETS",
    "GENERATED_DATASETS",
    "NODE_DATASETS",
    "PARTITIONERS",
    "TEST_PARTITIONERS",
    "DataNotFoundError",
    "DataOptions",
    "DatasetSpec",
    "DatasetSplits",
    "MappedImages",
    "Partition",
    "available_datasets",
    "label_counts",
    "load",
    "load_dataset",
    "partition_data",
    "partition_indices",
    "split_train_test",
]
