"""A perfect concept recogniser through clip_benchmark 1.6.2's own zero-shot classification, on one exported dataset.

Run with the harness venv's Python: `python clip_benchmark_oracle.py EXPORT LANG TRUTH.json`. TRUTH maps each image's
decoded RGB pixels' sha256 (`pixels`) and each class name (`names`) to its concept, both taken from the release by
the test, not from the export's labels. The "model" embeds an image and a text as the one-hot vector of that concept:
exactly right about every image. Prints clip_benchmark's metrics as one JSON line.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import torch
from clip_benchmark.datasets.builder import build_dataset
from clip_benchmark.metrics import zeroshot_classification


def main() -> None:
    export, lang, truth_file = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    truth = json.loads(truth_file.read_text(encoding="utf-8"))
    concepts = sorted(set(truth["pixels"].values()) | set(truth["names"].values()))
    pixel_keys = sorted(truth["pixels"])

    def transform(image: object) -> torch.Tensor:  # PIL image -> the index of its pixels' digest
        digest = hashlib.sha256(image.convert("RGB").tobytes()).hexdigest()  # type: ignore[attr-defined]
        return torch.tensor(pixel_keys.index(digest))

    def one_hot(concept: str) -> torch.Tensor:
        return torch.nn.functional.one_hot(torch.tensor(concepts.index(concept)), len(concepts)).float()

    class Oracle(torch.nn.Module):
        def encode_image(self, images: torch.Tensor) -> torch.Tensor:
            return torch.stack([one_hot(truth["pixels"][pixel_keys[int(i)]]) for i in images])

        def encode_text(self, texts: torch.Tensor) -> torch.Tensor:
            return torch.stack([one_hot(truth["names"][names[int(i)]]) for i in texts])

    names = sorted(truth["names"])

    def tokenizer(texts: list[str]) -> torch.Tensor:
        return torch.tensor([names.index(text) for text in texts])

    name = f"3xcm_classification_{lang}"  # the CLI fills `--dataset_root`'s {dataset} with it; done here
    dataset = build_dataset(f"wds/{name}", root=f"{export}/{name}", transform=transform)
    loader = torch.utils.data.DataLoader(dataset.batched(8), batch_size=None, num_workers=0)
    metrics = zeroshot_classification.evaluate(
        Oracle(), loader, tokenizer, dataset.classes, dataset.templates, "cpu", amp=False
    )
    print(json.dumps({key: float(value) for key, value in metrics.items() if isinstance(value, float | int)}))


if __name__ == "__main__":
    main()
