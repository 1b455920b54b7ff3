"""flowerbed: a Flower app for simulating and deploying federated learning on heterogeneous data."""

__version__ = "0.1.0"
