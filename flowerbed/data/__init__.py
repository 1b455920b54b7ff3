"""Data sets and partitions."""

from .datasets import DataNotFoundError, DatasetSplits, available_datasets, load_dataset
from .mapped_images import MappedImages
from .partition import (
    PARTITIONERS,
    TEST_PARTITIONERS,
    Partition,
    label_counts,
    partition_data,
    partition_indices,
    split_train_test,
)
from .simulations import GENERATED_DATASETS, NODE_DATASETS

__all__ = [
    "GENERATED_DATASETS",
    "NODE_DATASETS",
    "PARTITIONERS",
    "TEST_PARTITIONERS",
    "DataNotFoundError",
    "DatasetSplits",
    "MappedImages",
    "Partition",
    "available_datasets",
    "label_counts",
    "load_dataset",
    "partition_data",
    "partition_indices",
    "split_train_test",
]
