"""flowerbed: a Flower app for simulating and deploying federated learning on heterogeneous data."""

from importlib.metadata import PackageNotFoundError, version

try:  # the installed distribution's version (pyproject's [project] version)
    __version__ = version("flowerbed")
except PackageNotFoundError:  # a source tree imported without installing it
    __version__ = "0.0.0+unknown"
