"""Tiny random-weight models that tests build offline, standing in for the production weights."""

from __future__ import annotations

from pathlib import Path


def build_tiny_m3(folder: Path, hidden: int = 32) -> Path:
    """A BGE-M3-shaped model (XLM-R encoder + colbert/sparse heads) with a 120-piece tokenizer; ~6 s on CPU."""
    import torch
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import XLMRobertaConfig, XLMRobertaModel, XLMRobertaTokenizerFast

    corpus = ["hello world", "a photo of a cat", "a red apple on a table", "Bonjour le monde", "xin chào thế giới"]
    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]  # XLM-R ids: <s>=0 <pad>=1 </s>=2 <unk>=3
    trained = Tokenizer(models.Unigram())
    trained.normalizer = normalizers.NFKC()
    trained.pre_tokenizer = pre_tokenizers.Metaspace()
    trained.train_from_iterator(
        corpus * 20, trainers.UnigramTrainer(vocab_size=120, special_tokens=specials, unk_token="<unk>")
    )
    # The Unigram trainer is not deterministic (its pieces and scores differ from run to run, one thread or many),
    # so the model's vectors, and the similarities tests place thresholds between, would too: its pieces are kept,
    # in a fixed order with fixed scores (longer pieces preferred).
    pieces = sorted(set(trained.get_vocab()) - set(specials), key=lambda piece: (-len(piece), piece))
    vocab = [(piece, 0.0) for piece in specials] + [(piece, -1.0 - i / len(pieces)) for i, piece in enumerate(pieces)]
    tok = Tokenizer(models.Unigram(vocab, unk_id=specials.index("<unk>")))
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>",
        pair="<s> $A </s> </s> $B </s>",
        special_tokens=[("<s>", tok.token_to_id("<s>")), ("</s>", tok.token_to_id("</s>"))],
    )
    hf_tok = XLMRobertaTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        sep_token="</s>",
        cls_token="<s>",
        unk_token="<unk>",
        pad_token="<pad>",
        mask_token="<mask>",
        model_max_length=512,
    )
    hf_tok.save_pretrained(folder)
    cfg = XLMRobertaConfig(
        vocab_size=len(hf_tok),
        hidden_size=hidden,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=514,  # >= max_length + 2 (XLM-R position offset)
        type_vocab_size=1,
        pad_token_id=hf_tok.pad_token_id,
        bos_token_id=0,
        eos_token_id=2,
        initializer_range=0.5,  # the usual 0.02 makes every name's vector alike (cos 0.99999); spread them out
    )
    torch.manual_seed(0)
    XLMRobertaModel(cfg).save_pretrained(folder)
    # BGE-M3 repos ship these heads; without them FlagEmbedding random-inits them and logs a warning.
    torch.save(torch.nn.Linear(hidden, hidden).state_dict(), folder / "colbert_linear.pt")
    torch.save(torch.nn.Linear(hidden, 1).state_dict(), folder / "sparse_linear.pt")
    return folder


def build_tiny_open_clip(folder: Path, name: str = "tiny-clip-test", seed: int = 0) -> tuple[Path, Path]:
    """A 3.4 M-parameter random open_clip CLIP (the demo evaluation's model); returns (config folder, weights)."""
    from demo.models import random_open_clip

    return random_open_clip(folder, name, seed)
