"""Policies: the client seam every engine's policy meets, models, the local policy."""
