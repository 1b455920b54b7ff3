"""The additive options behind the CTL benchmark's Simulation 2 variants ("Distributed
Collaborative Learning with Representative Knowledge Sharing"): the authors' label model with an
intercept, and nodes built from explicit simulation options."""

from dataclasses import replace

import numpy as np

from flowerbed.catalog import parse_run_config
from flowerbed.data.simulations import SimulationOptions, ctl_gaussian, gaussian_nodes
from flowerbed.inprocess import resolve_run_config
from flowerbed.methods.ctl.reference import generated_nodes, nodes_for, params_for, simulate


def gaussian_config(seed: int):
    return parse_run_config(
        resolve_run_config(
            {
                "strategy": "ctl",
                "dataset": "ctl-gaussian",
                "sim-spread": 0.5,
                "sim-dispersion": 3.0,
                "partitioner": "dataset-nodes",
                "seed": seed,
            }
        )
    )


def test_generated_nodes_with_the_configs_options_are_the_protocols_nodes():
    config = gaussian_config(3)
    ours = generated_nodes(config, 10, SimulationOptions.from_config(config))
    for mine, theirs in zip(ours, nodes_for(config, 10), strict=True):
        for field in ("x_train", "y_train", "x_test", "y_test"):
            assert np.array_equal(getattr(mine, field), getattr(theirs, field))


def test_the_label_intercept_is_an_extra_coefficient_of_a_constant_one():
    plain = gaussian_nodes(np.random.default_rng(5), 4, 1.0, 1.0, 50)
    authors = gaussian_nodes(np.random.default_rng(5), 4, 1.0, 1.0, 50, label_intercept=True)
    assert plain.theta.shape == (30,) and authors.theta.shape == (31,)
    assert np.isclose(np.linalg.norm(authors.theta), 3.0)
    assert authors.node_theta.shape == (4, 31)
    # the default draws are untouched by the option
    assert np.array_equal(plain.x, gaussian_nodes(np.random.default_rng(5), 4, 1.0, 1.0, 50).x)


def test_the_label_intercept_changes_the_labels_through_the_options():
    options = SimulationOptions(spread=0.5, dispersion=3.0)
    config = gaussian_config(3)
    with_intercept = generated_nodes(config, 10, replace(options, label_intercept=True))
    assert not all(
        np.array_equal(a.y_train, b.y_train)
        for a, b in zip(with_intercept, nodes_for(config, 10), strict=True)
    )
    assert not np.array_equal(
        ctl_gaussian(3).y_train, ctl_gaussian(3, label_intercept=True).y_train
    )


def test_the_coefficient_perturbation_moves_h_by_one_or_two_units_in_the_last_place():
    config = gaussian_config(3)
    nodes = nodes_for(config, 10)
    params = replace(params_for(config), rounds=2, guests="best")
    as_is = simulate(nodes, params)["coefficients"][0]
    moved = simulate(nodes, replace(params, coefficient_perturbation=2.0**-52))["coefficients"][0]
    # round 0 (the models not trained yet): H times (1 + 2^-52), exact before rounding, moves a
    # nonzero entry up by one to two units in its last place; the diagonal stays 0
    step = moved - as_is
    ulp = np.spacing(as_is)
    off_diagonal = ~np.eye(len(as_is), dtype=bool)
    assert np.all(step[off_diagonal] >= ulp[off_diagonal])
    assert np.all(step[off_diagonal] <= 2 * ulp[off_diagonal])
    assert np.all(np.diagonal(moved) == 0)
    # with no perturbation the run is the default one
    unperturbed = simulate(nodes, replace(params, coefficient_perturbation=0.0))["coefficients"]
    assert np.array_equal(unperturbed, simulate(nodes, params)["coefficients"])
