"""Every data set's class names and, for a binary medical task, its clinical positive class.

In a medical data set the positive class is the disease: sensitivity is the recall of the
diseased, specificity the recall of the healthy. The label order of the sources does not follow
that rule, so each data set's declaration (``registry.DATASETS``) names it, once:

* scikit-learn's breast-cancer data (and the CTL paper's ``breast-cancer-shifted`` copies of it)
  label 0 *malignant* and 1 *benign* (``load_breast_cancer().target_names``): positive 0;
* BreastMNIST labels 0 *malignant* and 1 *normal, benign*: positive 0;
* PneumoniaMNIST labels 0 *normal* and 1 *pneumonia*: positive 1.

Other data sets have names but no clinical positive class; a binary one (a synthetic set, a
site's two folders) takes class 1 as positive by convention, named as such, except a site's own
data (``dataset='site'``), whose meaning flowerbed cannot know: its sensitivity and specificity
are left out until its manifest (``<site folder>/classes.json``: names and the positive class,
``site_data.read_manifest``) or ``positive-class`` names the positive class. The
``positive-class`` key overrides the declared class for any binary data set (by name or index).

The class names are the declarations' too (``DatasetSpec.class_names``; the MedMNIST ones
``medmnist_files.MEDMNIST``, checked against ``medmnist.INFO`` by ``tests/test_clinical.py``).
"""

from __future__ import annotations

from ..settings import ConfigError, RunConfig, Setting
from .registry import DATASETS, SITE_DATASET


def _declared_names(dataset: str) -> tuple[str, ...]:
    """The class names ``dataset``'s declaration gives (``()``: none, or an unknown name)."""
    return DATASETS[dataset].class_names if dataset in DATASETS else ()


def clinical_positive(dataset: str) -> int | None:
    """The clinical positive class (the disease) ``dataset``'s declaration gives, or None."""
    return DATASETS[dataset].positive_class if dataset in DATASETS else None


UNKNOWN_MEANING = (SITE_DATASET,)  # data whose classes flowerbed cannot name or order
DECLARED = ""  # positive-class: the data set's declared positive class
CLASSES_FILE = "classes.json"  # a run folder's class names and positive class (run_classes)

POSITIVE_REASONS = {  # classes.json's chosen_by, as a report says it
    "data set": "the disease",
    "site manifest": "the disease, as the sites' manifest declares",
    "positive-class": "set by positive-class",
    "convention": "class 1 by convention",
}


def class_names(
    dataset: str, num_classes: int, declared: tuple[str, ...] | None = None
) -> tuple[str, ...]:
    """The names of ``num_classes`` classes (``class k`` where the data set declares none, or
    declares fewer); ``declared``: the data's own (a site's manifest), before the tables."""
    names = declared or _declared_names(dataset)
    return tuple(names[k] if k < len(names) else f"class {k}" for k in range(num_classes))


def _parse_positive(value: str, names: tuple[str, ...]) -> int | None:
    """``value`` (a class name or an index) as a class index, or None if it is neither."""
    if value in names:
        return names.index(value)
    if value.strip().lstrip("-").isdigit() and 0 <= int(value) < len(names):
        return int(value)
    return None


def _check_positive(value: str, config: RunConfig) -> str | None:
    """A ``positive-class`` a known data set does not have (a site's classes are checked once
    its data is read, by ``positive_class``)."""
    names = _declared_names(config.dataset)
    if value == DECLARED or not names:
        return None
    if len(names) != 2:
        return (
            f"positive-class={value!r}: dataset={config.dataset!r} has {len(names)} classes;"
            " a positive class applies to binary tasks only (leave it empty)"
        )
    if _parse_positive(value, names) is None:
        return (
            f"positive-class={value!r} is not a class of dataset={config.dataset!r}; valid:"
            f" {', '.join(repr(n) for n in names)} or 0, 1"
        )
    return None


SETTINGS = (
    Setting(
        "positive-class",
        DECLARED,
        "the positive class of a binary task's sensitivity, specificity and ROC curve, by"
        " name or index; empty = the data set's declared clinical positive (breast-cancer,"
        " breastmnist: malignant; pneumoniamnist: pneumonia), class 1 for other binary sets;"
        " `site` data: its manifest's (classes.json), else none (no sensitivity, specificity)",
        check=_check_positive,
    ),
)


def positive_class(
    config: RunConfig,
    num_classes: int,
    declared_names: tuple[str, ...] | None = None,
    declared_positive: int | None = None,
) -> int | None:
    """The class index whose recall is the sensitivity, or None: more than two classes, or a
    site's data whose manifest names none, without ``positive-class``. ``declared_*``: what
    the data declares itself (``DatasetSplits.class_names``/``positive_class``, a site's
    manifest). ``ValueError`` (one line) for a ``positive-class`` the data does not have."""
    if num_classes != 2:
        return None
    value = str(getattr(config, "positive_class", DECLARED))
    names = class_names(config.dataset, num_classes, declared_names)
    if value != DECLARED:
        index = _parse_positive(value, names)
        if index is None:
            raise ValueError(
                f"positive-class={value!r} is not a class of dataset={config.dataset!r};"
                f" valid: {', '.join(repr(n) for n in names)} or 0, 1"
            )
        return index
    if declared_positive is not None:
        return declared_positive
    if config.dataset in UNKNOWN_MEANING:
        return None
    declared = clinical_positive(config.dataset)
    return 1 if declared is None else declared


def run_classes(
    config: RunConfig,
    num_classes: int,
    declared_names: tuple[str, ...] | None = None,
    declared_positive: int | None = None,
) -> dict:
    """What ``classes.json`` of a run folder holds: the class names, the positive class (index
    and name; None without one), what chose it (``chosen_by``: the data set's table, the site's
    manifest, ``positive-class`` or the class-1 convention) and whether it is the disease
    (``clinical``). ``declared_*``: as ``positive_class``. ``ConfigError``
    (one line, before any training) for a ``positive-class`` the data does not have."""
    names = class_names(config.dataset, num_classes, declared_names)
    try:
        positive = positive_class(config, num_classes, declared_names, declared_positive)
    except ValueError as error:
        raise ConfigError(str(error)) from None
    if positive is None:
        chosen_by = None
    elif str(getattr(config, "positive_class", DECLARED)) != DECLARED:
        chosen_by = "positive-class"
    elif declared_positive is not None:
        chosen_by = "site manifest"
    elif clinical_positive(config.dataset) is not None:
        chosen_by = "data set"
    else:
        chosen_by = "convention"
    return {
        "dataset": config.dataset,
        "names": list(names),
        "positive": positive,
        "positive_name": None if positive is None else names[positive],
        # the disease, as the data set or the site's manifest declares it
        "clinical": chosen_by in ("data set", "site manifest"),
        "chosen_by": chosen_by,
    }
