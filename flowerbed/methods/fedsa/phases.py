"""FedSA's four phases: teacher pre-training, weak target, selective amalgamation, adaptation.

The equations and the choices are in ``protocol``'s docstring; the client halves in ``owner``,
the server's learning on D_T in ``target``, the selection arithmetic in ``rules``.
"""

from __future__ import annotations

import math
from logging import INFO

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MessageType, RecordDict
from flwr.common.logger import log
from torch import nn

from ...core.results import save_model, write_json
from ...core.seeding import seed_for
from ...data.federation import server_split
from ...models import build_model
from ...protocols.local_fit import client_models, model_name_for
from ...protocols.messaging import by_partition, send_to_nodes
from ...protocols.phase import Handoff, Phase
from ...runtime.context import RunContext
from ...runtime.history import round_row, traffic_columns, unweighted_client_accuracy
from ...runtime.outcome import RunFailed
from ...settings import ConfigError, RunConfig
from ...strategies.common import as_arrayrecord, mean_of_replies
from ...training.local_client import LocalClient
from ...training.loops import evaluate
from ...trust.reply_checks import ReplyRules
from . import owner
from .replies import amalgamate_rules, pretrain_rules, saliency_rules
from .rules import (
    aggregation_weights,
    draw_teachers,
    has_feature_map,
    saliency_maps,
    selection_probabilities,
    similarities,
)
from .target import adapted_accuracy, target_set, train_weak

PRETRAIN = f"{MessageType.TRAIN}.fedsa_pretrain"
SALIENCY = f"{MessageType.QUERY}.fedsa_saliency"
AMALGAMATE = f"{MessageType.TRAIN}.fedsa_amalgamate"
SELECTION_LOG = "fedsa_selection.json"
_DRAW_TAG = 0x5E1E


def _round_config(server_round: int) -> ConfigRecord:
    return ConfigRecord({"server-round": server_round})


def adapt_scope(config: RunConfig) -> str:
    """Scratch adapts every parameter: a new head on features learnt from D_T alone."""
    return "all" if config.fedsa_selection == "scratch" else config.fedsa_adapt


def check_fedsa(run: RunContext) -> None:
    """What cannot run, before any training."""
    config, n = run.config, run.num_partitions
    if config.server_fraction == 0:
        raise ConfigError(
            "strategy='fedsa' needs the server's labelled target set: set server-fraction (the"
            " share of the training pool the server holds, e.g. 0.4); it is 0"
        )
    counts = np.bincount(server_split(config)[1].numpy(), minlength=run.data.num_classes)
    if config.fedsa_labels_per_class > counts.min():
        raise ConfigError(
            f"fedsa-labels-per-class={config.fedsa_labels_per_class} but the server split"
            f" (server-fraction={config.server_fraction}) holds {counts.min()} images of class"
            f" {int(counts.argmin())}; valid range: 1 to {counts.min()}"
        )
    if config.fedsa_selection not in ("all", "scratch") and config.fedsa_num_selected > n:
        raise ConfigError(
            f"fedsa-num-selected={config.fedsa_num_selected} but there are {n} teachers"
            f" (clients); valid range: 1 to {n}"
        )
    if config.fedsa_foreign_teachers > n:
        raise ConfigError(
            f"fedsa-foreign-teachers={config.fedsa_foreign_teachers} but there are {n} teachers"
            f" (clients); valid range: 0 to {n}"
        )
    if not isinstance(run.model.head, nn.Linear):
        raise ConfigError(f"strategy='fedsa' adapts a linear head; model={config.model!r} has none")
    if config.fedsa_saliency == "gradcam":
        shape, classes = run.data.input_shape, run.data.num_classes
        names = sorted({config.model, *(client_models(config) or (config.model,))})
        flat = [
            name
            for name in names
            if not has_feature_map(build_model(name, shape, classes, config=config), shape)
        ]
        if flat:
            raise ConfigError(
                f"fedsa-saliency='gradcam' needs a convolutional feature map; model(s)"
                f" {', '.join(map(repr, flat))} have none; use fedsa-saliency='input-grad'"
            )


class TeacherPretrain(Phase):
    """Every owner pre-trains its teacher, kept in ``context.state``."""

    SERVER_DATA = "its labelled target set (server-fraction) and test set"

    MESSAGE_TYPES = (PRETRAIN,)

    def reply_rules(self, config: RunConfig) -> dict[str, ReplyRules]:
        """Metrics only: the teacher's training and accuracy (``replies.pretrain_rules``)."""
        return {PRETRAIN: pretrain_rules(config)}

    def run(self, run: RunContext, handoff: Handoff) -> None:
        content = RecordDict({"config": _round_config(0)})
        replies = by_partition(run, send_to_nodes(run, PRETRAIN, content))
        accuracy = np.full(run.num_partitions, math.nan)
        for pid, reply in replies.items():
            accuracy[pid] = reply.content.metric_records["metrics"]["accuracy"]
        handoff.shared["teacher-accuracy"] = accuracy
        log(
            INFO,
            "flowerbed: FedSA teachers' accuracy on their own test data: %s",
            np.round(accuracy, 3),
        )

    def client_step(self, client: LocalClient, msg: Message) -> Message:
        teacher, info = owner.pretrain_teacher(client)
        private = owner.private_client(client)
        _, accuracy = evaluate(teacher, private.x_test, private.y_test)
        metrics = client.metrics(
            len(private.x_train),
            **{
                "train-loss": info["train-loss"],
                "local-epochs": info["epochs"],
                "accuracy": accuracy,
            },
        )
        return Message(content=RecordDict({"metrics": metrics}), reply_to=msg)


class WeakTarget(Phase):
    """Server only: D_T, the weak target model, and history row 0 (its adapted accuracy)."""

    def check(self, run: RunContext) -> None:
        check_fedsa(run)

    def run(self, run: RunContext, handoff: Handoff) -> None:
        config, model = run.config, run.model
        target = target_set(config)
        loss = train_weak(model, *target, config, 0)
        test = (run.data.x_test, run.data.y_test)
        scope, num_classes = adapt_scope(config), run.data.num_classes
        _, result = adapted_accuracy(model, target, test, config, scope, 0, num_classes)
        teachers = handoff.shared.get("teacher-accuracy", np.zeros(0))
        seen = teachers[~np.isnan(teachers)]
        row = round_row(
            0,
            run.grid,
            central_accuracy=result.accuracy,
            central_loss=result.loss,
            **result.columns("central"),
        )
        traffic = run.grid.end_round()  # the teachers' pre-training closes with row 0
        row.update(
            train_loss=loss,
            **unweighted_client_accuracy(seen.tolist()),
            **traffic_columns(traffic),
        )
        rounds = 0 if config.fedsa_selection == "scratch" else config.num_server_rounds
        run.history.add(row, rounds, f"weak target model, {len(target[1])} labelled images")
        handoff.arrays = ArrayRecord(model.state_dict())


class SelectiveAmalgamation(Phase):
    """Rounds 1..T: selection every E_g rounds, then hint distillation on the selected owners."""

    MESSAGE_TYPES = (SALIENCY, AMALGAMATE)

    def reply_rules(self, config: RunConfig) -> dict[str, ReplyRules]:
        """Saliency maps shaped by the probes sent, whose number ``num-examples`` counts (not
        bounded by the owner's data); the amalgamated target model as sent
        (``replies``)."""
        return {SALIENCY: saliency_rules(config), AMALGAMATE: amalgamate_rules(config)}

    def run(self, run: RunContext, handoff: Handoff) -> None:
        config, model = run.config, run.model
        target = target_set(config)
        test = (run.data.x_test, run.data.y_test)
        teacher_accuracy = handoff.shared.get(
            "teacher-accuracy", np.full(run.num_partitions, math.nan)
        )
        log_entry = {
            "selection": config.fedsa_selection,
            "weighting": config.fedsa_weighting,
            "saliency": config.fedsa_saliency,
            "teachers": [
                {
                    "partition": pid,
                    "model": model_name_for(config, pid),
                    "foreign": owner.is_foreign(config, pid, run.num_partitions),
                    "accuracy": float(teacher_accuracy[pid]),
                }
                for pid in range(run.num_partitions)
            ],
            "selections": [],
        }
        chosen: dict[int, int] = {}
        probabilities: dict[int, float] = {}
        for t in range(config.num_server_rounds):
            server_round = t + 1
            if t % config.fedsa_selection_gap == 0:
                if t > 0 and config.fedsa_weak_retrain == "every-selection":
                    train_weak(model, *target, config, server_round)
                selection = self.select(
                    run, target[0], server_round, fixed=chosen if t > 0 else None
                )
                chosen, probabilities = selection["chosen"], selection["probabilities"]
                log_entry["selections"].append(selection["log"])
                write_json(run.run_dir / SELECTION_LOG, log_entry)
            self.amalgamate(run, chosen, probabilities, server_round)
            _, result = adapted_accuracy(
                model, target, test, config, adapt_scope(config), server_round, run.data.num_classes
            )
            row = round_row(
                server_round,
                run.grid,
                central_accuracy=result.accuracy,
                central_loss=result.loss,
                **result.columns("central"),
            )
            run.history.add(row, config.num_server_rounds)
        handoff.arrays = ArrayRecord(model.state_dict())

    def select(self, run: RunContext, probes: torch.Tensor, server_round: int, fixed) -> dict:
        """Saliency from every owner and the target model; probabilities; the draw."""
        config = run.config
        content = RecordDict(
            {
                "probes": ArrayRecord({"inputs": Array(probes.numpy())}),
                "config": _round_config(server_round),
            }
        )
        replies = by_partition(run, send_to_nodes(run, SALIENCY, content))
        if not replies:
            raise RunFailed(f"FedSA: no teacher answered the selection of round {server_round}")
        candidates = sorted(replies)
        teacher_maps = np.stack(
            [replies[pid].content.array_records["saliency"]["maps"].numpy() for pid in candidates]
        )
        target_maps = saliency_maps(run.model, probes, config.fedsa_saliency).numpy()
        both = similarities(teacher_maps, target_maps)
        similarity = both[config.fedsa_similarity]
        p = selection_probabilities(similarity, config.fedsa_temperature)
        probabilities = dict(zip(candidates, p.tolist()))
        if config.fedsa_selection == "fixed" and fixed is not None:
            chosen = fixed  # the first selection, kept; similarities are still logged
        else:
            draw = draw_teachers(
                config.fedsa_selection,
                config.fedsa_num_selected,
                p,
                similarity,
                seed_for(config.seed, server_round, _DRAW_TAG),
            )
            picked = [candidates[i] for i in draw]
            chosen = {pid: picked.count(pid) for pid in sorted(set(picked))}
        log(
            INFO,
            "flowerbed: FedSA selection at round %d: similarity %s, p %s, selected %s",
            server_round,
            np.round(similarity, 3).tolist(),
            np.round(p, 3).tolist(),
            chosen,
        )
        entry = {
            "round": server_round,
            "candidates": candidates,
            "similarity-averaged": both["averaged"].tolist(),
            "similarity-per-image": both["per-image"].tolist(),
            "probabilities": p.tolist(),
            "selected": {str(pid): m for pid, m in chosen.items()},
            "weights": aggregation_weights(
                np.array(list(chosen.values())),
                np.array([probabilities[pid] for pid in chosen]),
                config.fedsa_weighting,
            ).tolist(),
        }
        return {"chosen": chosen, "probabilities": probabilities, "log": entry}

    def amalgamate(
        self, run: RunContext, chosen: dict[int, int], probabilities: dict[int, float], server_round
    ) -> None:
        """Send theta to each distinct selected owner; theta = sum_n w_n theta_n (Eq. 5)."""
        node_of = {pid: node for node, pid in run.grid.partition_of.items()}
        arrays = ArrayRecord(run.model.state_dict())
        content = RecordDict({"arrays": arrays, "config": _round_config(server_round)})
        contents = {node_of[pid]: content for pid in chosen if pid in node_of}
        replies = by_partition(run, send_to_nodes(run, AMALGAMATE, contents))
        if not replies:
            log(
                INFO,
                "flowerbed: FedSA round %d: no selected owner replied; theta kept",
                server_round,
            )
            return
        answered = sorted(replies)  # a failed owner's share goes to the others
        weights = aggregation_weights(
            np.array([chosen[pid] for pid in answered]),
            np.array([probabilities.get(pid, 0.0) for pid in answered]),
            run.config.fedsa_weighting,
        )
        like = {k: v.numpy() for k, v in arrays.items()}
        contents = [replies[pid].content for pid in answered]
        mean = mean_of_replies(contents, like.keys(), weights)
        run.model.load_state_dict(as_arrayrecord(mean, like).to_torch_state_dict())

    def client_step(self, client: LocalClient, msg: Message) -> Message:
        if msg.metadata.message_type == SALIENCY:
            return owner.saliency_step(client, msg)
        return owner.amalgamate_step(client, msg)


class TaskAdaptation(Phase):
    """Server only: the target model adapted to the target task is the run's model."""

    def run(self, run: RunContext, handoff: Handoff) -> None:
        config = run.config
        final_round = 0 if config.fedsa_selection == "scratch" else config.num_server_rounds
        adapted, result = adapted_accuracy(
            run.model,
            target_set(config),
            (run.data.x_test, run.data.y_test),
            config,
            adapt_scope(config),
            final_round,
            run.data.num_classes,
        )
        accuracy = result.accuracy
        run.model.load_state_dict(adapted.state_dict())
        save_model(run.run_dir / "model.pt", adapted.state_dict())
        handoff.arrays = ArrayRecord(adapted.state_dict())
        log(
            INFO,
            "flowerbed: FedSA (%s) adapted target model: test accuracy %.4f; results in %s",
            config.fedsa_selection,
            accuracy,
            run.run_dir,
        )
