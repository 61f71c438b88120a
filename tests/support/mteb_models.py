"""Tiny local checkpoints for the mteb export's runner (`run_mteb.py --model ...`), each also loadable by our own
backends, so that a test can compare the two on the same weights."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class LocalOpenClip:
    """The demo's tiny random open_clip twice: open_clip's `local-dir:` layout (`folder`: open_clip_config.json
    and open_clip_pytorch_model.bin), and the same weights as our open_clip backend loads them (`configs`, the
    architecture `name`, `weights`)."""

    folder: Path
    configs: Path
    name: str
    weights: Path


def local_open_clip(root: Path, seed: int = 0) -> LocalOpenClip:
    from demo.models import TINY_OPEN_CLIP, random_open_clip

    name = "tiny-clip-test"
    configs, weights = random_open_clip(root / "build", name=name, seed=seed)
    folder = root / "tiny-clip"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "open_clip_config.json").write_text(json.dumps({"model_cfg": TINY_OPEN_CLIP, "preprocess_cfg": {}}))
    (folder / "open_clip_pytorch_model.bin").write_bytes(weights.read_bytes())
    return LocalOpenClip(folder, configs, name, weights)
