"""The one-round baselines of the QKT paper (ICLR 2025, Sec. 4.1), in the same one-shot
protocol as QKT (``methods.one_shot``): same partitions, same local models, same queries.

* ``local``: no transfer; the student keeps its locally trained model (the paper's "Local"
  reference; nothing is uploaded, 0 communication rounds).
* ``fedavg1``: FedAvg(1), one FedAvg round: the server averages the locally trained models,
  weighted by n_i / n (Flower's ``aggregate_arrayrecords``), and every client evaluates that
  global model. The local models start from one common seeded initialisation.
* ``ensemble``: the student predicts with the mean of the softmax outputs of its own model and
  every teacher (Dietterich, 2000).
* ``kd``: naive knowledge distillation (Hinton et al., 2015), Eq. (1) of the QKT paper: the
  student minimises CE + alpha * sum over all teachers of KL(p_t, p_s) on its own data for E
  epochs (alpha = T = 1 by default).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..evaluation.metrics import eval_scores
from ..kd.teachers import teacher_probabilities
from ..protocols.exchange import Transfer
from .one_shot import one_shot_protocol
from .qkt import TRANSFER_SETTINGS, naive_kd

QKT_PAPER = "baseline of the QKT paper, ICLR 2025"


def keep_local(job: Transfer):
    return eval_scores(job.student), {}


def fedavg_one_round(job: Transfer):
    return eval_scores(job.global_model), {}


def ensemble(job: Transfer):
    models = [eval_scores(model) for model in (job.student, *job.teachers)]

    def scores(x: torch.Tensor) -> torch.Tensor:
        return torch.stack([F.softmax(m(x), dim=1) for m in models]).mean(dim=0)

    return scores, {"teachers-kept": len(job.teachers)}


def knowledge_distillation(job: Transfer):
    probs = teacher_probabilities(
        job.teachers, job.client.x_train, job.client.data.num_classes, job.config.kt_temperature
    )
    loss = naive_kd(job, probs)
    return eval_scores(job.student), {"teachers-kept": len(job.teachers), "train-loss": loss}


PROTOCOLS = (
    one_shot_protocol(
        "local",
        "one-shot baseline: each client keeps its locally trained model (no transfer)",
        QKT_PAPER,
        keep_local,
        "none",
    ),
    one_shot_protocol(
        "fedavg1",
        "one-shot baseline FedAvg(1): one round averaging the locally trained models",
        "McMahan et al., AISTATS 2017 (one round)",
        fedavg_one_round,
        "average",
    ),
    one_shot_protocol(
        "ensemble",
        "one-shot baseline: mean of the softmax outputs of the student's and all teachers' models",
        "Dietterich, 2000",
        ensemble,
        "teachers",
    ),
    one_shot_protocol(
        "kd",
        "one-shot baseline: naive KD, CE + alpha · sum over all teachers of KL(p_t, p_s) on the"
        " student's data (Eq. 1)",
        "Hinton et al., 2015",
        knowledge_distillation,
        "teachers",
        TRANSFER_SETTINGS,
    ),
)
