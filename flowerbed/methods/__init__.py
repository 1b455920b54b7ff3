"""Protocols of their own phases, not N rounds of one Flower strategy.

The one-shot knowledge-transfer methods (``one_shot``: a local fit, then what a student does in
the exchange phase: ``qkt``, ``one_shot_baselines``), CTL (``ctl/``) and FedSA (``fedsa/``);
``flowerbed.catalog`` registers them.
"""
