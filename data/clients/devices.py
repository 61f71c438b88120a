"""One answer to "which torch device, at which precision?" for every model the project runs (image embeddings,
masks, inpainting, evaluation encoders and VLMs)."""

from __future__ import annotations

import logging

from data.stage import require

log = logging.getLogger(__name__)


class DeviceError(ValueError):
    """A config asks for a device this machine does not have: the message names the config field."""


def resolve_device(device: str, precision: str = "fp32", *, owner: str, extra: str) -> tuple[str, str]:
    """The torch device for a config's `device` (auto | cpu | cuda) and the precision it runs at: `auto` is fp16
    on CUDA and fp32 elsewhere, and fp16 falls back to fp32 on the CPU (with a warning). `owner` names the config
    in messages (`"masks: SamMaskConfig"`); `extra` is the optional dependency that brings torch."""
    torch = require("torch", extra)
    has_cuda = torch.cuda.is_available()
    if device == "cuda" and not has_cuda:
        raise DeviceError(f"{owner}.device is 'cuda' but torch sees no usable CUDA device; use device 'auto' or 'cpu'.")
    resolved = "cuda" if device == "cuda" or (device == "auto" and has_cuda) else "cpu"
    if precision == "auto":
        precision = "fp16" if resolved == "cuda" else "fp32"
    if precision == "fp16" and resolved == "cpu":
        log.warning("%s: precision fp16 needs CUDA; running in fp32 on the CPU", owner.split(":")[0])
        precision = "fp32"
    return resolved, precision
