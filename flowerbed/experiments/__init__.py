"""Experiments as a package: the statistics that judge a comparison, the papers' published
numbers and the orderings they claim, and (to come) the studies that reproduce them with one
driver (``flowerbed reproduce <paper>``)."""
