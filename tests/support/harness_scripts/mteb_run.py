"""Runs an `culturebench export --harness mteb` folder's tasks in the mteb venv (.venv-harness-embedding) with an
open_clip model given by config folder, architecture and weights file (the demo's random model in the tests), the
way `evaluation/encoders/open_clip.py` loads and calls it (eval mode, fp32, CPU, upright RGB images).

Writes OUT/scores.json ({task: mteb's scores of the test split}) and the vectors the run computed, in the layout
`culturebench evaluate --model-backend embeddings` reads: OUT/images.parquet (image_id, embedding) and
OUT/texts.parquet (text, embedding); mteb writes its per-query scores under OUT/predictions.

    python mteb_run.py EXPORT_DIR --model-config-dir DIR --model-name NAME --pretrained FILE --out OUT
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import open_clip
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from mteb.models.abs_encoder import AbsEncoder
from mteb.models.model_meta import ModelMeta, ScoringFunction
from PIL import ImageOps


class OpenClipModel(AbsEncoder):
    """open_clip's encode_text / encode_image; keeps what it encoded (text -> vector, and image vectors in call
    order) so that the run's vectors can be scored by culturebench."""

    def __init__(self, config_dir: str, name: str, weights: str) -> None:
        open_clip.add_model_config(config_dir)
        self.clip, _, self.preprocess = open_clip.create_model_and_transforms(
            name, pretrained=weights, pretrained_text=False, require_pretrained=True
        )
        self.clip.eval()
        self.tokenizer = open_clip.get_tokenizer(name)
        self.mteb_model_meta = ModelMeta(
            loader=None,
            name=f"culturebench/{name}",
            revision=Path(weights).stem,
            release_date=None,
            languages=None,
            n_parameters=sum(p.numel() for p in self.clip.parameters()),
            memory_usage_mb=None,
            max_tokens=77,
            embed_dim=None,
            license=None,
            open_weights=True,
            public_training_code=None,
            public_training_data=None,
            framework=["PyTorch"],
            similarity_fn_name=ScoringFunction.COSINE,
            use_instructions=False,
            training_datasets=None,
            modalities=["image", "text"],
        )
        self.texts: dict[str, np.ndarray] = {}
        self.image_calls: list[np.ndarray] = []

    def encode(self, inputs: Any, *, task_metadata: Any, hf_split: str, hf_subset: str, **kwargs: Any) -> np.ndarray:
        features = inputs.dataset.features
        chunks: list[np.ndarray] = []
        with torch.inference_mode():
            for batch in inputs:
                if "image" in features:
                    pixels = torch.stack(
                        [self.preprocess(ImageOps.exif_transpose(i).convert("RGB")) for i in batch["image"]]
                    )
                    chunks.append(self.clip.encode_image(pixels).float().numpy())
                else:
                    vectors = self.clip.encode_text(self.tokenizer(list(batch["text"]))).float().numpy()
                    self.texts.update(zip(batch["text"], vectors, strict=True))
                    chunks.append(vectors)
        out = np.concatenate(chunks)
        if "image" in features:
            self.image_calls.append(out)
        return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("export")
    parser.add_argument("--model-config-dir", required=True)
    parser.add_argument("--model-name", required=True)
    parser.add_argument("--pretrained", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    sys.path.insert(0, args.export)
    import culturebench_3xcm_mteb as tasks_module
    import mteb

    model = OpenClipModel(args.model_config_dir, args.model_name, args.pretrained)
    tasks = [task() for task in tasks_module.TASKS]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = mteb.evaluate(
        model,
        tasks,
        cache=None,
        show_progress_bar=False,
        encode_kwargs={"batch_size": 64},
        prediction_folder=out / "predictions",
    )
    scores = {r.task_name: r.scores["test"][0] for r in result.task_results}
    (out / "scores.json").write_text(json.dumps(scores, indent=1, sort_keys=True, default=str))
    # The corpus is encoded once per task, in corpus order: the calls must agree.
    corpus_ids = pq.read_table(Path(args.export) / "data" / "corpus.parquet", columns=["id"])["id"].to_pylist()
    first = model.image_calls[0]
    assert len(first) == len(corpus_ids), (len(first), len(corpus_ids))
    assert all(np.array_equal(first, other) for other in model.image_calls[1:]), "corpus encoded differently"
    pq.write_table(pa.table({"image_id": corpus_ids, "embedding": [v.tolist() for v in first]}), out / "images.parquet")
    texts = sorted(model.texts)
    pq.write_table(
        pa.table({"text": texts, "embedding": [model.texts[t].tolist() for t in texts]}), out / "texts.parquet"
    )


if __name__ == "__main__":
    main()
