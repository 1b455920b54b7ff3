"""The run configuration: Flower's run-config dict, typed and validated.

Every key of ``[tool.flwr.app.config]`` in pyproject.toml is a field of ``RunConfig`` (with
dashes instead of underscores); ``--run-config "key=value"`` overrides them. Keys that only a
particular strategy uses are read by that strategy's builder from ``RunConfig.raw``.

``RunConfig.from_run_config`` raises ``ConfigError`` naming the bad value and the valid
choices, before any data is loaded or any client trains.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

OPTIMIZERS = ("sgd", "adam")


class ConfigError(ValueError):
    """A run-config value is invalid."""


@dataclass(frozen=True)
class RunConfig:
    strategy: str = "fedavg"
    dataset: str = "digits"
    data_dir: str = "~/.flowerbed/data"
    download: bool = False
    image_size: int = 28
    model: str = "cnn"
    partitioner: str = "dirichlet"
    dirichlet_alpha: float = 0.5
    min_partition_size: int = 10
    classes_per_client: int = 3
    num_server_rounds: int = 5
    fraction_train: float = 1.0
    fraction_evaluate: float = 1.0
    local_epochs: int = 2
    batch_size: int = 32
    learning_rate: float = 0.05
    optimizer: str = "sgd"
    momentum: float = 0.9
    weight_decay: float = 0.0
    local_test_fraction: float = 0.2
    seed: int = 42
    output_dir: str = "~/.flowerbed/runs"
    run_name: str = ""
    failing_partitions: str = ""
    min_available_clients: int = 2
    round_timeout: float = 3600.0
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_run_config(cls, run_config: Mapping[str, Any]) -> "RunConfig":
        """Typed view of Flower's ``context.run_config`` (kebab-case keys)."""
        known = {f.name for f in dataclasses.fields(cls)} - {"raw"}
        values: dict[str, Any] = {}
        for key, value in run_config.items():
            name = key.replace("-", "_")
            if name in known:
                expected = type(getattr(cls, name))
                try:
                    values[name] = _coerce(value, expected)
                except (TypeError, ValueError):
                    raise ConfigError(
                        f"run-config {key}={value!r} is not a valid {expected.__name__}"
                    ) from None
        config = cls(**values, raw=dict(run_config))
        config.validate()
        return config

    def validate(self) -> None:
        """Check the values that need no data; the rest is checked where the data is known."""
        from .data import PARTITIONERS, available_datasets
        from .models import MODELS
        from .strategies import STRATEGIES

        _choice("strategy", self.strategy, STRATEGIES)
        _choice("dataset", self.dataset, available_datasets())
        _choice("model", self.model, MODELS)
        _choice("partitioner", self.partitioner, PARTITIONERS)
        _choice("optimizer", self.optimizer, OPTIMIZERS)
        if not 0.0 < self.fraction_train <= 1.0:
            raise ConfigError(f"fraction-train must be in (0, 1], got {self.fraction_train}")
        if not 0.0 <= self.fraction_evaluate <= 1.0:
            raise ConfigError(f"fraction-evaluate must be in [0, 1], got {self.fraction_evaluate}")
        if self.partitioner == "dirichlet" and not self.dirichlet_alpha > 0:
            raise ConfigError(f"dirichlet-alpha must be > 0, got {self.dirichlet_alpha}")
        for name in ("num_server_rounds", "local_epochs", "batch_size", "classes_per_client"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{_key(name)} must be at least 1, got {getattr(self, name)}")
        if not self.learning_rate > 0:
            raise ConfigError(f"learning-rate must be > 0, got {self.learning_rate}")
        if not 0.0 <= self.momentum < 1.0:
            raise ConfigError(f"momentum must be in [0, 1), got {self.momentum}")
        if not 0.0 <= self.local_test_fraction < 1.0:
            raise ConfigError(
                f"local-test-fraction must be in [0, 1), got {self.local_test_fraction}"
            )
        self.failing_partition_ids  # parses, raising ConfigError if malformed

    @property
    def data_path(self) -> Path:
        return Path(self.data_dir).expanduser().resolve()

    @property
    def output_path(self) -> Path:
        return Path(self.output_dir).expanduser().resolve()

    @property
    def failing_partition_ids(self) -> frozenset[int]:
        """Partitions whose training raises on purpose (to test fault tolerance)."""
        text = self.failing_partitions.replace(",", " ").split()
        try:
            return frozenset(int(token) for token in text)
        except ValueError:
            raise ConfigError(
                f"failing-partitions must be partition ids separated by commas, got"
                f" {self.failing_partitions!r}"
            ) from None

    def get(self, key: str, default: Any) -> Any:
        """A strategy-specific key (kebab-case), coerced to the type of ``default``."""
        if key not in self.raw:
            return default
        try:
            return _coerce(self.raw[key], type(default))
        except (TypeError, ValueError):
            raise ConfigError(f"run-config {key}={self.raw[key]!r} is not a valid {type(default).__name__}") from None

    def to_dict(self) -> dict[str, Any]:
        """Resolved configuration, every key of the run config included."""
        resolved = {_key(f.name): getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "raw"}
        return {**dict(self.raw), **resolved}


def _key(name: str) -> str:
    return name.replace("_", "-")


def _choice(key: str, value: str, valid) -> None:
    if value not in valid:
        raise ConfigError(f"unknown {key} {value!r}; valid choices: {', '.join(valid)}")


def _coerce(value: Any, expected: type) -> Any:
    if expected is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0"):
            return value.lower() in ("true", "1")
        raise ValueError(value)
    if expected is int and isinstance(value, float) and not value.is_integer():
        raise ValueError(value)
    if expected in (int, float) and isinstance(value, bool):
        raise ValueError(value)
    return expected(value)
