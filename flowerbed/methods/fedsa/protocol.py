"""FedSA: a server's target model learns from private teachers that never leave their owners.

"Federated Selective Aggregation for Knowledge Amalgamation" (Xie et al., 2022; the figures
call it FedKA), Algorithm 1. Client n owns a pre-trained teacher M_n and its private data
D_n; the server owns a target task with a small labelled set D_T (``target``) and trains the
target model theta. For t = 0 .. T-1 (T = ``num-server-rounds``):

* every E_g rounds (``fedsa-selection-gap``): re-train the weak target model on D_T (line 4;
  ``fedsa-weak-retrain``), then select: each teacher's saliency maps a_{n,j} of the probe
  images x_j in D_T (Eq. 1, ``fedsa-saliency``), their similarity to the target model's
  (Eq. 2, ``fedsa-similarity``), probabilities p_n = softmax(Qhat_n / tau) over the min-max
  normalised similarities (Eq. 3 as the authors' code computes it: the printed Eq. 3, with
  Q = cos / M for M probe images, is uniform to two decimals; tau = ``fedsa-temperature``),
  and the multiset S of K = ``fedsa-num-selected`` draws with replacement;
* amalgamation: each distinct selected owner n distils a copy of theta towards its teacher's
  features on its own inputs, L = 1/2 ||F_n^p(x) - T_n(F^s(x; theta_n))||^2 (Eq. 4, FitNets'
  hint through the owner's translator T_n, as MSE), E = ``fedsa-local-epochs`` epochs;
  theta_{t+1} = sum_n w_n theta_n with w_n = m_n / K for multiplicity m_n (Eq. 5);
* after the rounds, task adaptation of theta on D_T (line 10).

Baselines and ablations are values of ``fedsa-selection`` and ``fedsa-weighting`` (Table 2;
``rules``): ``scratch`` trains the target model on D_T alone (the weak model, then the
adaptation with every parameter); ``all`` with ``uniform`` is FedAvg+ (every teacher every
round, uniform average, then adaptation).

Phases: ``TeacherPretrain`` (``train.fedsa_pretrain``: the owners train their teachers, which
stay in ``context.state``), ``WeakTarget`` (server only: D_T, the weak model, history row 0),
``SelectiveAmalgamation`` (``query.fedsa_saliency`` and ``train.fedsa_amalgamate``, rows
1..T) and ``TaskAdaptation`` (server only: ``model.pt`` is the adapted target model). Every
history row's ``central_accuracy`` is that of an adapted copy of the round's target model
(the raw target's head only sees D_T in the weak-model steps). ``fedsa_selection.json`` logs
the teachers and, per selection, both similarities, the probabilities, the draw and the
aggregation weights.

Choices where paper and code differ (the code does not run as published): input-gradient
saliency by default (Grad-CAM, the code's, on request); the weak model re-trained at every
selection (the paper; the code trains it once); head-only adaptation (the paper; the code
fine-tunes everything, ``fedsa-adapt=all``); Adam at 1e-3 where the code uses 0.1; the final
test accuracy is reported, not the best over adaptation epochs. Privacy: the probe inputs of
the target task are sent to every teacher's owner (the paper is silent on who computes the
teachers' maps).
"""

from __future__ import annotations

from ...protocols.local_fit import SETTINGS as LOCAL_FIT_SETTINGS
from ...protocols.phase import ProtocolSpec
from ...settings import RunConfig, Setting
from .phases import SelectiveAmalgamation, TaskAdaptation, TeacherPretrain, WeakTarget
from .rules import SALIENCY_METHODS, SELECTION_RULES, SIMILARITIES, WEIGHTINGS

PAPER = "Federated Selective Aggregation for Knowledge Amalgamation (FedSA), Xie et al., 2022"

SETTINGS = (
    Setting(
        "fedsa-selection",
        "saliency",
        "FedSA: teacher selection, `saliency` (the paper), `random`, `fixed` (the first draw,"
        " kept), `top-k`, `least-k`, `all` (FedAvg+ with uniform weights), `scratch` (no"
        " teachers: the target set alone)",
        choices=SELECTION_RULES,
    ),
    Setting(
        "fedsa-num-selected", 3, "FedSA: K, teachers drawn per selection (with replacement)", low=1
    ),
    Setting("fedsa-selection-gap", 10, "FedSA: E_g, rounds between selections", low=1),
    Setting(
        "fedsa-weighting",
        "uniform",
        "FedSA: aggregation weights, `uniform` (m_n / K), `positive` (~ m_n p_n), `negative`"
        " (~ m_n (1 - p_n))",
        choices=WEIGHTINGS,
    ),
    Setting(
        "fedsa-saliency",
        "input-grad",
        "FedSA: saliency maps, `input-grad` (the paper's Eq. 1, any model) or `gradcam` (the"
        " authors' code, convolutional models)",
        choices=SALIENCY_METHODS,
    ),
    Setting(
        "fedsa-similarity",
        "averaged",
        "FedSA: `averaged` (cosine of the mean maps, the paper) or `per-image` (mean of"
        " 0.5 + 0.5 cos per probe, the code)",
        choices=SIMILARITIES,
    ),
    Setting(
        "fedsa-temperature",
        1.0,
        "FedSA: tau of the softmax over min-max normalised similarities (1 = the authors' code;"
        " large = uniform, the printed Eq. 3)",
        low=0,
        low_open=True,
    ),
    Setting("fedsa-local-epochs", 2, "FedSA: E, hint-distillation epochs per round", low=1),
    Setting(
        "fedsa-learning-rate",
        1e-3,
        "FedSA: Adam learning rate of distillation, weak model and adaptation (the code: 0.1)",
        low=0,
        low_open=True,
    ),
    Setting(
        "fedsa-labels-per-class",
        5,
        "FedSA: k, labelled images per class of the server's target set (from its"
        " `server-fraction` split)",
        low=1,
    ),
    Setting("fedsa-weak-epochs", 10, "FedSA: epochs of the weak target model on D_T", low=1),
    Setting(
        "fedsa-weak-retrain",
        "every-selection",
        "FedSA: train the weak model before `every-selection` (the paper) or `once` (the code)",
        choices=("every-selection", "once"),
    ),
    Setting(
        "fedsa-adapt",
        "head",
        "FedSA: task adaptation trains a new `head` on frozen features (the paper) or `all`"
        " parameters (the code)",
        choices=("head", "all"),
    ),
    Setting("fedsa-adapt-epochs", 30, "FedSA: task-adaptation epochs on D_T", low=1),
    Setting(
        "fedsa-foreign-teachers",
        0,
        "FedSA: the last m clients' teachers learn from pixel-permuted inputs (another"
        " domain: something for the selection to avoid)",
        low=0,
    ),
)


# The server's labelled target set D_T needs a share of the training pool (the global default
# holds none): a fifth, per class, is 28-29 digits of each class (D_T takes
# fedsa-labels-per-class = 5 of them; room up to k = 28) and leaves the teachers 80 %.
DEFAULTS = {"server-fraction": 0.2}


def phases(config: RunConfig):
    if config.fedsa_selection == "scratch":  # the target set alone: no teacher is asked
        return (WeakTarget(), TaskAdaptation())
    return (TeacherPretrain(), WeakTarget(), SelectiveAmalgamation(), TaskAdaptation())


PROTOCOL = ProtocolSpec(
    name="fedsa",
    summary="knowledge amalgamation: the server's target model learns from private teachers that"
    " never leave their owners; teachers drawn by saliency similarity (Eqs. 1-3), hint"
    " distillation with a translator kept by each owner (Eq. 4), average with"
    " multiplicities (Eq. 5), task adaptation on the server's few labels (keys `fedsa-*`,"
    " needs `server-fraction`)",
    paper=PAPER,
    phases=phases,
    settings=(*SETTINGS, *LOCAL_FIT_SETTINGS),
    defaults=DEFAULTS,
    kind="knowledge amalgamation, a target model on the server",
    exchanged="down: the target task's probe inputs (never labels) and copies of the target"
    " model; up: each teacher's saliency maps and each selected owner's distilled student;"
    " teachers and translators never leave their owners",
    reproduction="fedsa",
)
