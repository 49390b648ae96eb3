"""Shared code for the notebooks: models, decoding, metrics, timing and plots (one module each)."""
