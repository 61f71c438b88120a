"""The tiny random LLaVA-style model the tests ask: the demo evaluation's (`demo/models.py`)."""

from __future__ import annotations

from pathlib import Path


def build_tiny_vlm(folder: str | Path, seed: int = 0) -> Path:
    from demo.models import random_vlm

    return random_vlm(folder, seed)
