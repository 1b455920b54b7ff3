"""FedSA's server-side learning on the target set D_T: the weak target model and task adaptation.

D_T is k labelled images per class (``fedsa-labels-per-class``) from the server's split
(``server-fraction``, never in any client's partition): the first k of each class in the
split's seeded order. It doubles as the probe set of the saliency maps.

* Weak target model (Algorithm 1, line 4): ``fedsa-weak-epochs`` epochs of cross-entropy on
  D_T, every parameter, Adam at ``fedsa-learning-rate``.
* Task adaptation (line 10): a copy of the target model gets a new, seeded linear head and is
  trained ``fedsa-adapt-epochs`` epochs on D_T, Adam with weight decay 1e-4 and a cosine
  schedule (the authors' code); ``fedsa-adapt=head`` trains the head alone on the frozen
  features (the paper: "the decoder part"), ``all`` every parameter (the code). The adapted
  copy is never fed back into the rounds.
"""

from __future__ import annotations

import copy

import numpy as np
import torch
from torch import Tensor, nn

from ...core.seeding import seed_for
from ...data.classes import positive_class
from ...data.federation import server_split
from ...models import Classifier
from ...settings import RunConfig
from ...training.loops import Evaluation, evaluate_clinical, features_of, train_local

ADAPT_WEIGHT_DECAY = 1e-4
_WEAK_TAG, _ADAPT_TAG = 0x3EA1, 0xADA9


def target_set(config: RunConfig) -> tuple[Tensor, Tensor]:
    """D_T: the first ``fedsa-labels-per-class`` images of every class of the server split."""
    x, y = server_split(config)
    labels = y.numpy()
    chosen = np.concatenate(
        [np.flatnonzero(labels == c)[: config.fedsa_labels_per_class] for c in np.unique(labels)]
    )
    return x[chosen], y[chosen]


def train_weak(model: Classifier, x: Tensor, y: Tensor, config: RunConfig, round_: int) -> float:
    """Cross-entropy on D_T for ``fedsa-weak-epochs`` epochs (in place); the mean loss."""
    seed = seed_for(config.seed, round_, _WEAK_TAG)
    torch.manual_seed(seed)
    return train_local(
        model,
        x,
        y,
        epochs=config.fedsa_weak_epochs,
        batch_size=config.batch_size,
        optimizer=torch.optim.Adam(model.parameters(), lr=config.fedsa_learning_rate),
        generator=torch.Generator().manual_seed(seed),
    ).mean_loss


def adapt(
    model: Classifier, x: Tensor, y: Tensor, config: RunConfig, scope: str, round_: int
) -> Classifier:
    """A copy of ``model`` adapted to the target task (module docstring); ``model`` is left
    as it is. ``scope``: ``head`` or ``all``."""
    adapted = copy.deepcopy(model)
    seed = seed_for(config.seed, round_, _ADAPT_TAG)
    torch.manual_seed(seed)
    old = adapted.head
    adapted.head = nn.Linear(old.in_features, old.out_features).to(old.weight.device)
    trained = adapted.head if scope == "head" else adapted
    # head: the frozen features are computed once, and the head alone learns from them
    inputs = features_of(adapted, x) if scope == "head" else x
    epochs = config.fedsa_adapt_epochs
    optimizer = torch.optim.Adam(
        trained.parameters(), lr=config.fedsa_learning_rate, weight_decay=ADAPT_WEIGHT_DECAY
    )
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs)
    generator = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        train_local(
            trained,
            inputs,
            y,
            epochs=1,
            batch_size=config.batch_size,
            optimizer=optimizer,
            generator=generator,
        )
        schedule.step()
    return adapted


def adapted_accuracy(
    model: Classifier,
    target: tuple[Tensor, Tensor],
    test: tuple[Tensor, Tensor],
    config,
    scope,
    round_,
    num_classes: int,
) -> tuple[Classifier, Evaluation]:
    """The adapted copy and its loss, accuracy and clinical metrics on the held-out test set."""
    adapted = adapt(model, *target, config, scope, round_)
    return adapted, evaluate_clinical(
        adapted, *test, num_classes, positive_class(config, num_classes)
    )
