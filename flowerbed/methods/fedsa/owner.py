"""FedSA's client half: a teacher's owner, who keeps the teacher, its data and the translator.

Each client n owns a teacher M_n, pre-trained on its private data D_n (the local-fit early
stopping of the one-shot protocols, ``local_fit.train_local_model``, on ``kt-client-models``'
architecture for the client) and kept in ``context.state``. It answers two server requests:

* ``saliency_step``: the server's probe *inputs* (never labels) in, the teacher's saliency map
  of each probe out (``rules.saliency_maps``);
* ``amalgamate_step`` (Algorithm 1's SelectiveKA): the current target model in, E epochs of the
  hint loss (Eq. 4) on the owner's private inputs, labels unused, through the owner's
  translator, which stays in ``context.state`` across rounds; the student alone goes back.

Foreign teachers (``fedsa-foreign-teachers`` = m: the last m partition ids) live in another
domain: their private inputs are pixel-permuted by a fixed, seeded permutation per client, for
pre-training and distillation alike. Their saliency is measured on the server's probes as sent.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, Message, RecordDict

from ...core.seeding import seed_for
from ...data.mapped_images import MappedImages, materialise
from ...kd.loop import distill
from ...kd.objectives import KDParams
from ...kd.translator import Translated, Translator
from ...models import Classifier
from ...models.classifier import feature_width
from ...protocols.local_fit import local_model, train_local_model
from ...settings import RunConfig
from ...training.local_client import LocalClient
from ...training.loops import features_of
from .rules import saliency_maps

TEACHER_KEY, TRANSLATOR_KEY = "fedsa-teacher", "fedsa-translator"
_PERMUTATION_TAG, _TRANSLATOR_TAG, _DISTILL_TAG = 0xF0E1, 0x7A45, 0xD157


def is_foreign(config: RunConfig, partition_id: int, num_partitions: int) -> bool:
    return partition_id >= num_partitions - config.fedsa_foreign_teachers


def private_client(client: LocalClient) -> LocalClient:
    """The client as its teacher sees it: a foreign teacher's inputs pixel-permuted."""
    if not is_foreign(client.config, client.partition_id, client.num_partitions):
        return client
    size = math.prod(client.data.input_shape)
    rng = np.random.default_rng(seed_for(client.config.seed, client.partition_id, _PERMUTATION_TAG))
    order = torch.from_numpy(rng.permutation(size))

    def permute(x: torch.Tensor | MappedImages) -> torch.Tensor:
        x = materialise(x)  # the client's share as one tensor (mapped images: a copy)
        return x.reshape(len(x), size)[:, order].reshape(x.shape)

    return dataclasses.replace(
        client, x_train=permute(client.x_train), x_test=permute(client.x_test)
    )


def _variant(client: LocalClient) -> str:
    foreign = is_foreign(client.config, client.partition_id, client.num_partitions)
    return "fedsa-foreign" if foreign else ""


def pretrain_teacher(client: LocalClient) -> tuple[Classifier, dict]:
    """Train (or take from the process cache) the teacher; keep it in ``context.state``."""
    teacher, info = train_local_model(private_client(client), _variant(client))
    client.context.state[TEACHER_KEY] = ArrayRecord(teacher.state_dict())
    return teacher, info


def teacher_model(client: LocalClient) -> Classifier:
    """The teacher kept in ``context.state`` (a restarted node pre-trains it again:
    deterministic, the same model, and keeps it)."""
    if TEACHER_KEY not in client.context.state:
        pretrain_teacher(client)
    return local_model(private_client(client), TEACHER_KEY, _variant(client))


def saliency_step(client: LocalClient, msg: Message) -> Message:
    probes = torch.from_numpy(msg.content.array_records["probes"]["inputs"].numpy())
    method = client.config.fedsa_saliency
    maps = saliency_maps(teacher_model(client), probes, method)
    content = RecordDict(
        {
            "saliency": ArrayRecord({"maps": Array(maps.numpy())}),
            "metrics": client.metrics(len(probes)),
        }
    )
    return Message(content=content, reply_to=msg)


def _translator(client: LocalClient, student_dim: int, teacher_dim: int) -> Translator:
    """The owner's translator: restored from ``context.state``, else new (seeded)."""
    torch.manual_seed(seed_for(client.config.seed, client.partition_id, _TRANSLATOR_TAG))
    translator = Translator(student_dim, teacher_dim).to(client.device)
    if TRANSLATOR_KEY in client.context.state:
        translator.load_state_dict(client.context.state[TRANSLATOR_KEY].to_torch_state_dict())
    return translator


def amalgamate_step(client: LocalClient, msg: Message) -> Message:
    """SelectiveKA: hint distillation of the target model towards the teacher's features."""
    config, server_round = client.config, client.server_round(msg)
    private = private_client(client)
    teacher = teacher_model(client)
    student = client.model_from(msg)
    shape = client.data.input_shape
    translator = _translator(client, feature_width(student, shape), feature_width(teacher, shape))
    pair = Translated(student, translator)
    seed = seed_for(config.seed, client.partition_id, server_round, _DISTILL_TAG)
    torch.manual_seed(seed)
    loss = distill(
        pair,
        private.x_train,
        None,  # labels unused: the hint loss reads inputs only
        None,
        "hint",
        KDParams(),
        epochs=config.fedsa_local_epochs,
        batch_size=config.batch_size,
        optimizer=torch.optim.Adam(pair.parameters(), lr=config.fedsa_learning_rate),
        generator=torch.Generator().manual_seed(seed),
        teacher_taps={"features": features_of(teacher, private.x_train)},
    ).mean_loss
    client.context.state[TRANSLATOR_KEY] = ArrayRecord(translator.state_dict())
    content = RecordDict(
        {
            "arrays": ArrayRecord(student.state_dict()),
            "metrics": client.metrics(len(private.x_train), **{"train-loss": loss}),
        }
    )
    return Message(content=content, reply_to=msg)
