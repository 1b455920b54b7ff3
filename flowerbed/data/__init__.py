"""Data sets and partitions."""

from .datasets import DataNotFoundError, DatasetSplits, available_datasets, load_dataset
from .partition import PARTITIONERS, label_counts, partition_indices, split_train_test

__all__ = [
    "PARTITIONERS",
    "DataNotFoundError",
    "DatasetSplits",
    "available_datasets",
    "label_counts",
    "load_dataset",
    "partition_indices",
    "split_train_test",
]
