"""Shared code for the notebooks: models, decoding, metrics, timing, plots and exercise checks (one module each)."""

REPO_URL = "https://github.com/big-small-decoding/big-small-decoding"
"""Where the repository lives. The notebooks' Colab badges and setup cells name it too; tests/test_notebooks.py
checks that they all agree with this line."""
