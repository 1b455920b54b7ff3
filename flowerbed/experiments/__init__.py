"""Experiments as a package: the statistics that judge a comparison, the papers' published
numbers and the orderings they claim, one driver for every study (``driver``), and the studies
that reproduce the papers with it (``flowerbed reproduce <paper>``: ``reproduce``, the report in
``reproduction_report``, CTL's study in ``ctl``)."""
