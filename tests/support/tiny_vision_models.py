"""Tiny vision models that tests build offline in place of YuNet and Segment Anything weights."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

# The fake YuNet's input side and the raw values it writes into every cell's bbox channels; OpenCV decodes a cell at
# (row, col) of stride s as centre = ((col, row) + BBOX_OFFSET) * s, side = exp(BBOX_LOG_SIZE) * s.
YUNET_SIZE = 64
YUNET_STRIDES = (8, 16, 32)
BBOX_OFFSET = 0.5
BBOX_LOG_SIZE = 1.0


@dataclass(frozen=True)
class FakeFace:
    """One face the fake YuNet 'detects': a grid cell of one stride, with cls = obj = score."""

    stride: int
    row: int
    col: int
    score: float


# The snippet's single face: stride 16, cell (1, 1), score 1.
DEFAULT_FACES = (FakeFace(16, 1, 1, 1.0),)


def build_tiny_yunet_onnx(path: Path, faces: tuple[FakeFace, ...] = DEFAULT_FACES) -> Path:
    """Export a YuNet-2023mar-shaped ONNX model (input `input` [1,3,64,64]; outputs cls/obj/bbox/kps _8/_16/_32) whose
    output encodes `faces`, whatever the image."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    class FakeYuNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            for s in YUNET_STRIDES:
                g = YUNET_SIZE // s
                hot = torch.zeros(1, g * g, 1)
                for face in faces:
                    if face.stride == s:
                        hot[0, face.row * g + face.col, 0] = face.score
                self.register_buffer(f"hot{s}", hot)

        def forward(self, x: Any) -> tuple:
            # Constant buffers + torch.cat: Tensor.repeat / indexed assignment export an Expand node that OpenCV
            # 4.12's ONNX importer rejects. The zero term keeps a data dependency on the input.
            m = x.mean(dim=1, keepdim=True) * 0.0
            cls, obj, bbox, kps = [], [], [], []
            for s in YUNET_STRIDES:
                g = YUNET_SIZE // s
                flat = F.avg_pool2d(m, s).reshape(1, g * g, 1)
                hot = getattr(self, f"hot{s}")
                cls.append(flat + hot)
                obj.append(flat + hot)
                off, size = flat + BBOX_OFFSET, flat + BBOX_LOG_SIZE
                bbox.append(torch.cat([off, off, size, size], dim=2))
                kps.append(torch.cat([flat + 0.5] * 10, dim=2))
            return tuple(cls + obj + bbox + kps)

    names = [f"{k}_{s}" for k in ("cls", "obj", "bbox", "kps") for s in YUNET_STRIDES]
    path = Path(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice
        torch.onnx.export(
            FakeYuNet(),
            (torch.zeros(1, 3, YUNET_SIZE, YUNET_SIZE),),
            str(path),
            input_names=["input"],
            output_names=names,
            opset_version=13,
            dynamo=False,
        )
    return path


def make_tiny_sam(seed: int = 0, img_size: int = 64, patch: int = 16, enc_dim: int = 32, prompt_dim: int = 32) -> Any:
    """A random ~80k-parameter `Sam`; SamPredictor adapts to its 64-pixel input."""
    import torch
    from segment_anything.modeling import ImageEncoderViT, MaskDecoder, PromptEncoder, Sam, TwoWayTransformer

    torch.manual_seed(seed)
    emb = img_size // patch
    sam = Sam(
        image_encoder=ImageEncoderViT(
            img_size=img_size,
            patch_size=patch,
            in_chans=3,
            embed_dim=enc_dim,
            depth=2,
            num_heads=2,
            mlp_ratio=2.0,
            out_chans=prompt_dim,
            qkv_bias=True,
            norm_layer=partial(torch.nn.LayerNorm, eps=1e-6),
            use_rel_pos=True,
            window_size=2,
            global_attn_indexes=(1,),
        ),
        prompt_encoder=PromptEncoder(
            embed_dim=prompt_dim,
            image_embedding_size=(emb, emb),
            input_image_size=(img_size, img_size),
            mask_in_chans=4,
        ),
        mask_decoder=MaskDecoder(
            num_multimask_outputs=3,
            transformer=TwoWayTransformer(depth=1, embedding_dim=prompt_dim, mlp_dim=64, num_heads=2),
            transformer_dim=prompt_dim,
            iou_head_depth=2,
            iou_head_hidden_dim=32,
        ),
        pixel_mean=[123.675, 116.28, 103.53],
        pixel_std=[58.395, 57.12, 57.375],
    )
    return sam.eval()


def build_tiny_sam(path: Path, seed: int = 0, cuda_tagged: bool = False) -> Any:
    """A tiny random `Sam`, saved to `path` as a state-dict checkpoint like the official ones.

    cuda_tagged=True writes every tensor as if it had been saved from `cuda:0` (what a checkpoint saved on a GPU
    machine holds), even on a CPU-only machine: torch.load then needs map_location there.
    """
    import torch
    import torch.serialization

    sam = make_tiny_sam(seed)
    if cuda_tagged:
        original = torch.serialization.location_tag
        torch.serialization.location_tag = lambda storage: "cuda:0"  # what torch.save records per storage
        try:
            torch.save(sam.state_dict(), path)
        finally:
            torch.serialization.location_tag = original
    else:
        torch.save(sam.state_dict(), path)
    return sam
