"""Tiny random-weight models for the demo evaluation (`make demo`) and the tests: they exercise the real loading
and calling code of each backend offline. Their numbers mean nothing, and every card made with them says so."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: A 3.4 M-parameter CLIP: 32 px images, 32-dimensional embeddings, open_clip's bundled BPE tokenizer (offline).
TINY_OPEN_CLIP = {
    "embed_dim": 32,
    "vision_cfg": {"image_size": 32, "layers": 2, "width": 64, "patch_size": 16, "head_width": 32},
    "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 64, "heads": 2, "layers": 2},
}


def random_open_clip(folder: Path, name: str = "tiny-clip-test", seed: int = 0) -> tuple[Path, Path]:
    """A random open_clip CLIP; returns (config folder, weights file).

    The config JSON is `<folder>/configs/<name>.json` (open_clip names an architecture by the file stem); the
    state_dict is `<folder>/<name>-seed<seed>.pt`. Built from `seed`, so two seeds give two different models, and
    an existing weights file is kept (the demo's model hash stays the same from run to run).
    """
    import open_clip
    import torch

    configs = folder / "configs"
    configs.mkdir(parents=True, exist_ok=True)
    (configs / f"{name}.json").write_text(json.dumps(TINY_OPEN_CLIP))
    open_clip.add_model_config(configs)
    weights = folder / f"{name}-seed{seed}.pt"
    if not weights.is_file():
        torch.manual_seed(seed)
        model = open_clip.create_model(name, pretrained=None)
        partial = weights.with_suffix(".partial")
        torch.save(model.state_dict(), partial)
        partial.replace(weights)
    return configs, weights


# --- a random vision-language model (MixCuBe) ---------------------------------------------------------------

IMAGE_SIZE = 32
PATCH_SIZE = 8
IMAGE_TOKENS = (IMAGE_SIZE // PATCH_SIZE) ** 2  # "default" feature strategy drops the CLS token

DONE = "README.md"
# The demo model's answer cap, below the paper's 120 (App. C.2): its answers are random bytes, and greedy decoding
# makes a shorter answer the first tokens of the longer one. Long enough for any country name the scorer looks for
# (one token per byte: the tokenizer has no merges); the demo's cost is the per-token step, not the model.
DEMO_MAX_NEW_TOKENS = 32
# Questions the demo model generates together: batching divides the per-token step, and its answers are as random.
DEMO_BATCH_SIZE = 16
SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<pad>", "<image>"]

# Each message: "USER: <image>\n<text>" (images first), then "ASSISTANT:" for generation.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['role'] == 'user' %}USER: {% else %}ASSISTANT: {% endif %}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}"
    "{% for item in message['content'] if item['type'] == 'image' %}<image>\n{% endfor %}"
    "{% for item in message['content'] if item['type'] == 'text' %}{{ item['text'] }}{% endfor %}"
    "{% endif %}"
    "{% if message['role'] != 'user' %}{{ eos_token }}{% endif %}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}ASSISTANT:{% endif %}"
)


def _tokenizer(folder: Path) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from tokenizers.pre_tokenizers import ByteLevel
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(ByteLevel.alphabet())
    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS)}
    for symbol in alphabet:
        vocab.setdefault(symbol, len(vocab))
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens(SPECIAL_TOKENS)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        extra_special_tokens={"image_token": "<image>"},
        model_max_length=4096,  # the App. B.3 judge prompt is ~1,500 byte tokens
    )
    tokenizer.save_pretrained(folder)
    return tokenizer


def random_vlm(folder: str | Path, seed: int = 0) -> Path:
    """A tiny random LLaVA-style model that `pipeline("image-text-to-text", model=folder)` runs on a CPU in well
    under a second per answer: a 2-layer CLIP vision tower on 32x32 images, a linear-GELU projector, a 2-layer
    Llama, a byte-level BPE tokenizer with no merges (any text tokenizes), built with `tokenizers` offline. Written
    into `folder` once (a finished folder is kept, so its hash stays the same); answers are gibberish."""
    import torch
    from transformers import (
        CLIPImageProcessor,
        CLIPVisionConfig,
        LlamaConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
    )

    folder = Path(folder)
    if (folder / DONE).is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = _tokenizer(folder)
    image_token_id = tokenizer.convert_tokens_to_ids("<image>")
    vision = CLIPVisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        image_size=IMAGE_SIZE,
        patch_size=PATCH_SIZE,
        projection_dim=32,
    )
    text = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    config = LlavaConfig(
        vision_config=vision,
        text_config=text,
        image_token_index=image_token_id,
        image_seq_length=IMAGE_TOKENS,
        vision_feature_select_strategy="default",
        vision_feature_layer=-1,
    )
    torch.manual_seed(seed)
    model = LlavaForConditionalGeneration(config).eval()
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(folder)
    image_processor = CLIPImageProcessor(
        size={"shortest_edge": IMAGE_SIZE},
        crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE},
        do_center_crop=True,
    )
    processor = LlavaProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=PATCH_SIZE,
        vision_feature_select_strategy="default",
        chat_template=CHAT_TEMPLATE,
        image_token="<image>",
        num_additional_image_tokens=1,  # the CLS token the vision tower adds and "default" drops
    )
    processor.save_pretrained(folder)
    (folder / DONE).write_text(json.dumps({"random_demo_vlm": True, "seed": seed}) + "\n")  # last: the folder is whole
    return folder
