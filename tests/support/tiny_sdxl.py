"""A tiny random-weight SDXL inpainting pipeline that tests build offline, standing in for the production weights.

Components are diffusers' own test components (tests/pipelines/stable_diffusion_xl/test_stable_diffusion_xl_inpaint.py,
`get_dummy_components`); the CLIP tokenizer there comes from the Hub, so it is built here from a byte-level vocab
instead. Two inference steps take well under a second on CPU.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import CLIPTokenizer


def _bytes_to_unicode() -> list[str]:
    """GPT-2's byte-to-unicode table: the 256 symbols a byte-level BPE (CLIP's tokenizer) starts from."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for c in cs]


def build_tiny_clip_tokenizer(folder: Path) -> CLIPTokenizer:
    """A CLIP tokenizer with no merges: every byte is a token (514 ids, below the text encoders' vocab of 1000)."""
    from transformers import CLIPTokenizer

    chars = _bytes_to_unicode()
    vocab = {c: i for i, c in enumerate(chars)}
    for c in chars:
        vocab[c + "</w>"] = len(vocab)
    vocab["<|startoftext|>"] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    (folder / "merges.txt").write_text("#version: 0.2\n", encoding="utf-8")
    return CLIPTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"), model_max_length=77)


def build_tiny_sdxl_inpaint(folder: Path, variant: str | None = None) -> Path:
    """Save a tiny random `StableDiffusionXLInpaintPipeline` to `folder` with `save_pretrained` and return it.

    The UNet is the 4-channel kind (latent blending), which the production pipeline class also accepts. With
    `variant="fp16"` the weights are saved as `*.fp16.safetensors` (still float32 values), the file layout
    `from_pretrained(..., variant="fp16")` looks for.
    """
    import torch
    from diffusers import AutoencoderKL, EulerDiscreteScheduler, StableDiffusionXLInpaintPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

    torch.manual_seed(0)
    unet = UNet2DConditionModel(
        block_out_channels=(32, 64),
        layers_per_block=2,
        sample_size=32,
        in_channels=4,
        out_channels=4,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        attention_head_dim=(2, 4),
        use_linear_projection=True,
        addition_embed_type="text_time",
        addition_time_embed_dim=8,
        transformer_layers_per_block=(1, 2),
        projection_class_embeddings_input_dim=72,  # 5 time ids * 8 + text_encoder_2 projection 32
        cross_attention_dim=64,  # the two text encoders' hidden states concatenated (32 + 32)
    )
    scheduler = EulerDiscreteScheduler(
        beta_start=0.00085,
        beta_end=0.012,
        steps_offset=1,
        beta_schedule="scaled_linear",
        timestep_spacing="leading",
    )
    torch.manual_seed(0)
    vae = AutoencoderKL(
        block_out_channels=[32, 64],
        in_channels=3,
        out_channels=3,
        down_block_types=["DownEncoderBlock2D"] * 2,
        up_block_types=["UpDecoderBlock2D"] * 2,
        latent_channels=4,
        sample_size=128,
    )
    torch.manual_seed(0)
    text_config = CLIPTextConfig(
        bos_token_id=0,
        eos_token_id=2,
        hidden_size=32,
        intermediate_size=37,
        layer_norm_eps=1e-05,
        num_attention_heads=4,
        num_hidden_layers=5,
        pad_token_id=1,
        vocab_size=1000,
        hidden_act="gelu",
        projection_dim=32,
    )
    text_encoder = CLIPTextModel(text_config)
    text_encoder_2 = CLIPTextModelWithProjection(text_config)
    with tempfile.TemporaryDirectory() as scratch:  # save_pretrained writes the tokenizer into the pipeline folder
        tokenizer = build_tiny_clip_tokenizer(Path(scratch))
    pipe = StableDiffusionXLInpaintPipeline(
        vae=vae,
        text_encoder=text_encoder,
        text_encoder_2=text_encoder_2,
        tokenizer=tokenizer,
        tokenizer_2=tokenizer,
        unet=unet,
        scheduler=scheduler,
        requires_aesthetics_score=True,
    )
    pipe.save_pretrained(folder, variant=variant)
    return folder
