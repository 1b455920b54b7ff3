"""Differential privacy for FL rounds: Flower's wrappers and mods chosen by run-config keys, and
the privacy spent (epsilon) in every history row. docs/privacy.md states the guarantees.

Modes (run-config ``dp``), through Flower's own code (``flwr.serverapp.strategy``,
``flwr.clientapp.mod``) except adaptive clipping, whose Flower classes flowerbed subclasses and
corrects (``adaptive_clipping``):

* ``central-server-fixed`` / ``central-server-adaptive``: the server clips every client's
  update (reply minus the global model sent) to the norm C and adds Gaussian noise of standard
  deviation z C / n to the mean of the n sampled clients' clipped updates
  (``DifferentialPrivacyServerSideFixedClipping``, ``adaptive_clipping.AdaptiveClippingServerSide``);
* ``central-client-fixed`` / ``central-client-adaptive``: the same, with the clients clipping
  (``DifferentialPrivacyClientSideFixedClipping`` and ``adaptive_clipping.AdaptiveClippingClientSide``
  on the server; the client mods ``fixedclipping_mod`` / ``adaptive_clipping.adaptive_clipping_mod``,
  which read C from the training message);
* ``local``: every client clips its own update to C and adds noise of standard deviation z C
  to it before it leaves the node (``LocalDpMod``); the server sees only noisy updates.

Adaptive clipping (Andrew et al., "Differentially Private Learning with Adaptive Clipping",
NeurIPS 2021, Algorithm 1) starts from C = ``dp-clipping-norm``; after every round it sets
C <- C exp(-eta (b~ - gamma)) from b~, the noised fraction of the round's updates whose norm was
at most C (noise of standard deviation ``dp-clipped-count-stddev`` on the count, Flower's
default n/20 when 0; eta = 0.2, Flower's default), so that C moves toward the gamma-quantile of
the update norms, gamma = 1 - ``dp-clipped-quantile`` (the share of updates C aims to clip).
The round's noise is scaled by the C its updates were clipped with. Flower 1.42's adaptive
classes count the clipped updates instead (C moves away from the quantile) and scale the noise
by the updated C (below calibration when C shrinks): ``adaptive_clipping``'s docstring says
how, and which of their steps flowerbed replaces. The noise multiplier z the user asks for is
split between the update (z_update, with z^-2 = z_update^-2 + (2 sigma_count)^-2, Flower's
``compute_adaptive_noise_params``) and the count, so that the pair is as private as one
Gaussian release with multiplier z (the paper's Theorem 1): z is what is accounted.

The modules, one concern each (importers import them, not this package):

* ``modes``: the ``dp`` keys and modes, and what the run config alone can refuse (which
  strategies compose with which mode);
* ``accounting``: epsilon (Renyi DP with Google's ``dp-accounting``, client-level replace-one
  adjacency), the run's ``Plan`` and ``BudgetSpent``;
* ``server``: the server half, ``wrap`` (Flower's DP wrapper around the algorithm's strategy,
  ``EqualWeights``) and ``PrivacyHook``, the hook through which FL rounds run it
  (``protocols.rounds_hook``);
* ``rounds``: ``PrivateRounds``, the accounting around the wrapped strategy: releases counted,
  the budget, complete rounds only, the checkpoint's state, ``privacy.json``;
* ``guards``: a zero update nudged, the noise drawn from the operating system's entropy;
* ``client``: the client half, the mod ``privacy_mod``;
* ``adaptive_clipping``: Andrew et al.'s adaptive clipping, Flower's classes corrected.
"""
