"""How well a model predicts: per-class accuracy, the clinical metrics and their clinical reading
(counts, intervals, calibration, each site's numbers), and the knowledge-transfer metrics."""
