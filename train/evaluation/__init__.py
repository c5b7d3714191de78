"""Evaluation: one pass over a test set (`report.py`: `evaluate`, `EvalReport`, pass@k) and
`aworld-train eval` over checkpoints and seeds (`suite.py`)."""
