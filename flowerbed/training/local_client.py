"""What every client step needs: its config, its partition, its model, and reply builders.

``LocalClient.from_context`` finds the node's partition id (``context.node_config``), loads
the data set (cached per process) and takes the node's local data from
``data.federation.node_split``: the same partition the ServerApp computed, split into local
train and local test (or, for partitioners that split the held-out test split, the node's part
of each). Algorithm and phase files receive a ``LocalClient`` and the incoming ``Message`` and
use the helpers here, so that each holds only its particular step.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict

from ..core.device import run_device
from ..core.seeding import seed_for
from ..core.stages import CLIENT_DECODE, CLIENT_ENCODE, CLIENT_EVALUATION, CLIENT_TRAINING, stage
from ..data import DatasetSplits
from ..data.classes import positive_class
from ..data.federation import load_splits, node_split
from ..data.mapped_images import MappedImages
from ..data.splits import DataNotFoundError
from ..evaluation.clinical import TEST_CLASS_CORRECT, TEST_CLASS_COUNTS, TRAIN_EXAMPLES
from ..models import Classifier, build_model
from ..settings import ConfigError, RunConfig
from ..trust.attacks import poisoned_labels
from .loops import TrainResult, build_optimizer, evaluate_clinical, train_local

NODE_DATA_DIR_KEY = "data-dir"  # node-config key: a real site's own data folder


def with_node_data_dir(config: RunConfig, context: Context) -> RunConfig:
    """The run config with ``data-dir`` replaced by the SuperNode's own data folder, if given.

    A real site starts its SuperNode with ``--node-config "... data-dir='/srv/site/data'"``;
    that folder (an absolute path on the site's machine) overrides the run-config ``data-dir``
    for this node only. A missing folder raises at once with the node, the path and the fix,
    so the error reply reaches the ServerApp's log instead of the round waiting for a reply.
    """
    value = context.node_config.get(NODE_DATA_DIR_KEY)
    if value is None or str(value) == "":
        return config
    path = Path(str(value)).expanduser()
    if not path.is_absolute():
        raise ConfigError(
            f"node-config {NODE_DATA_DIR_KEY}={str(value)!r} on node {context.node_id} must be"
            " an absolute path (the app bundle carries only code)"
        )
    if not path.is_dir():
        raise DataNotFoundError(
            f"data folder {path} (node-config {NODE_DATA_DIR_KEY}) does not exist on this"
            f" SuperNode: create it and put the files of data set {config.dataset!r} there, or"
            f" restart the SuperNode with --node-config \"... {NODE_DATA_DIR_KEY}='/abs/path'\""
        )
    return config.replace(data_dir=str(path))


@dataclass
class LocalClient:
    config: RunConfig
    context: Context
    partition_id: int
    num_partitions: int
    data: DatasetSplits
    # tensors, or views on the shared mapped images (``data.mapped_images``): index them
    # (``x[idx]``, ``x[i:j]``) or use ``materialise`` for whole-array operations
    x_train: torch.Tensor | MappedImages
    y_train: torch.Tensor
    x_test: torch.Tensor | MappedImages
    y_test: torch.Tensor

    @classmethod
    def from_context(cls, context: Context, config: RunConfig) -> LocalClient:
        """The client of this node for the parsed run ``config`` (``context.run_config``)."""
        config = with_node_data_dir(config, context)
        partition_id = int(context.node_config["partition-id"])
        num_partitions = int(context.node_config["num-partitions"])
        x_train, y_train, x_test, y_test = node_split(config, num_partitions, partition_id)
        data = load_splits(config)
        return cls(
            config=config,
            context=context,
            partition_id=partition_id,
            num_partitions=num_partitions,
            data=data,
            x_train=x_train,
            y_train=poisoned_labels(config, partition_id, y_train, data.num_classes),  # label-flip
            x_test=x_test,
            y_test=y_test,
        )

    # --- model and device ----------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        """Where this client's models train (run-config ``device``)."""
        return run_device(self.config)

    def tensors(self, record: ArrayRecord) -> dict[str, torch.Tensor]:
        """A record's arrays as torch tensors on this client's device (control variates,
        stored gradients, Fisher values: anything combined with the model's parameters)."""
        return {key: value.to(self.device) for key, value in record.to_torch_state_dict().items()}

    def new_model(self) -> Classifier:
        return build_model(
            self.config.model, self.data.input_shape, self.data.num_classes, config=self.config
        )

    def model_from(self, msg: Message, key: str = "arrays") -> Classifier:
        """A fresh model holding the arrays the server sent."""
        with stage(CLIENT_DECODE):
            model = self.new_model()
            model.load_state_dict(msg.content.array_records[key].to_torch_state_dict())
        return model

    # --- training ----------------------------------------------------------------------------
    def server_round(self, msg: Message) -> int:
        config = msg.content.config_records.get("config")
        return int(config.get("server-round", 0)) if config is not None else 0

    def local_epochs(self, server_round: int = 0) -> int:
        """Epochs of local training this round.

        With ``local-epochs-max`` > 0 (heterogeneous local work, for every strategy) each
        client draws its epochs uniformly from [local-epochs, local-epochs-max], afresh every
        round, seeded by (seed, partition id, round): clients do different amounts of work and
        the same run repeats exactly. Otherwise every client runs ``local-epochs``.
        """
        low, high = self.config.local_epochs, self.config.local_epochs_max
        if high == 0 or high == low:
            return low
        rng = np.random.default_rng(seed_for(self.config.seed, self.partition_id, server_round, 2))
        return int(rng.integers(low, high + 1))

    def train(self, model: torch.nn.Module, server_round: int, **hooks) -> TrainResult:
        """Local training with the run's optimizer, epochs and batch size; seeded per round."""
        torch.manual_seed(seed_for(self.config.seed, self.partition_id, server_round, 1))
        generator = torch.Generator().manual_seed(
            seed_for(self.config.seed, self.partition_id, server_round)
        )
        with stage(CLIENT_TRAINING, server_round):
            return train_local(
                model,
                self.x_train,
                self.y_train,
                epochs=self.local_epochs(server_round),
                batch_size=self.config.batch_size,
                optimizer=build_optimizer(model.parameters(), self.config),
                generator=generator,
                augment=self.data.augment,
                **hooks,
            )

    # --- replies -----------------------------------------------------------------------------
    def metrics(self, num_examples: int, **values: float) -> MetricRecord:
        return MetricRecord(
            {"num-examples": int(num_examples), "partition-id": self.partition_id, **values}
        )

    def train_reply(
        self, msg: Message, model: torch.nn.Module, result: TrainResult, **extra_metrics: float
    ) -> Message:
        with stage(CLIENT_ENCODE):
            arrays = ArrayRecord(model.state_dict())
        content = RecordDict(
            {
                "arrays": arrays,
                "metrics": self.metrics(
                    result.num_examples,
                    **{"train-loss": result.mean_loss, "num-steps": result.num_steps},
                    **extra_metrics,
                ),
            }
        )
        return Message(content=content, reply_to=msg)

    def evaluation_metrics(self, model: torch.nn.Module) -> dict[str, float | list[int]]:
        """``model`` on the local test split, in one pass: ``loss``, ``accuracy`` and the
        clinical metrics (``training.loops.Evaluation``) under hyphenated names
        (``balanced-accuracy``, ``auroc``; for two classes with a positive class
        ``sensitivity``, ``specificity``, ``auroc-positive``), NaN where a metric is undefined
        on this split; and the counts a per-site table needs (``CLASS_COUNT_METRICS``): the
        test samples of each class, those of each class predicted right, and the size of the
        training split."""
        with stage(CLIENT_EVALUATION):
            result = evaluate_clinical(
                model, self.x_test, self.y_test, self.data.num_classes, self.positive_class
            )
        clinical = {name.replace("_", "-"): value for name, value in result.clinical.items()}
        counts, correct = result.class_counts()
        return {
            "loss": result.loss,
            "accuracy": result.accuracy,
            **clinical,
            TEST_CLASS_COUNTS: counts,
            TEST_CLASS_CORRECT: correct,
            TRAIN_EXAMPLES: len(self.y_train),
        }

    @property
    def positive_class(self) -> int | None:
        """The positive class of a binary task (``data.classes.positive_class``)."""
        data = self.data
        return positive_class(self.config, data.num_classes, data.class_names, data.positive_class)

    def evaluate_reply(self, msg: Message, model: torch.nn.Module) -> Message:
        metrics = self.metrics(len(self.y_test), **self.evaluation_metrics(model))
        return Message(content=RecordDict({"metrics": metrics}), reply_to=msg)
