"""Experiments as a package: the statistics that judge a comparison, the papers' published
numbers and the orderings they claim, one driver for every study (``driver``) with one command
line for the benchmarks that are studies (``study_cli``), and the studies that reproduce the
papers with it (``flowerbed reproduce <paper>``: ``reproduce``, the report in
``reproduction_report``, CTL's study in ``ctl``)."""
