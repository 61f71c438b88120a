"""Tiny random-weight text-image models that tests build offline, standing in for CLIP-style checkpoints.

- `build_tiny_hf_clip`: a transformers `CLIPModel` folder (32 px images, byte-level tokenizer, CLIPImageProcessor).
- `build_tiny_st_image_model`: a SentenceTransformer that encodes PIL images with such a CLIP (like clip-ViT-B-32).
- `build_tiny_st_text_model`: a SentenceTransformer text model (XLM-R + mean pooling + a dense projection) whose
  output dimension is chosen (like clip-ViT-B-32-multilingual-v1).

The open_clip builder lives in `tests/support/tiny_models.py` (`build_tiny_open_clip`).
"""

from __future__ import annotations

from pathlib import Path


def clip_tokenizer() -> object:
    """A CLIP tokenizer with no merges: every byte-level character is a token (514 ids), built from the
    `tokenizers` byte-level alphabet, so nothing is downloaded."""
    from tokenizers import pre_tokenizers
    from transformers import CLIPTokenizer

    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    for suffix in ("", "</w>"):
        for char in alphabet:
            vocab[char + suffix] = len(vocab)
    return CLIPTokenizer(vocab=vocab, merges=[], model_max_length=77)


def build_tiny_hf_clip(folder: Path, seed: int = 0, projection_dim: int = 24) -> Path:
    """A random transformers CLIPModel (2 layers per tower, 32 px, 16 px patches) with its processor, saved to
    `folder` by save_pretrained; `seed` picks the weights."""
    import torch
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPProcessor

    tokenizer = clip_tokenizer()
    config = CLIPConfig(
        text_config={
            "vocab_size": len(tokenizer),
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "max_position_embeddings": 77,
            "bos_token_id": 0,
            "eos_token_id": 1,
            "pad_token_id": 1,
        },
        vision_config={
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "image_size": 32,
            "patch_size": 16,
        },
        projection_dim=projection_dim,
    )
    torch.manual_seed(seed)
    folder.mkdir(parents=True, exist_ok=True)
    CLIPModel(config).save_pretrained(folder)
    image_processor = CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    CLIPProcessor(image_processor=image_processor, tokenizer=tokenizer).save_pretrained(folder)
    return folder


def build_tiny_st_image_model(folder: Path, clip_folder: Path) -> Path:
    """A SentenceTransformer over the CLIP in `clip_folder`: PIL images in, get_image_features out."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Transformer

    SentenceTransformer(modules=[Transformer(str(clip_folder))], device="cpu").save(str(folder))
    return folder


def build_tiny_st_text_model(folder: Path, out_dim: int = 24, seed: int = 1) -> Path:
    """A multilingual-style SentenceTransformer text model: a tiny XLM-R, mean pooling and a dense projection to
    `out_dim` (the image model's dimension, or another one to test a mismatch)."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sentence_transformer.modules import Dense, Pooling

    from tests.support.tiny_models import build_tiny_m3

    base = folder.parent / f"{folder.name}-xlmr"
    base.mkdir(parents=True, exist_ok=True)
    build_tiny_m3(base, hidden=32)
    torch.manual_seed(seed)
    transformer = Transformer(str(base), max_seq_length=64)
    pooling = Pooling(transformer.get_embedding_dimension(), "mean")
    dense = Dense(32, out_dim, bias=False, activation_function=torch.nn.Identity())
    SentenceTransformer(modules=[transformer, pooling, dense], device="cpu").save(str(folder))
    return folder
