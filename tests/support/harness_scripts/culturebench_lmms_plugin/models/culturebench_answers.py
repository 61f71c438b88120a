"""A stand-in VLM for lmms-eval that answers each image from a JSON map {sample_id: answer} (`answers=PATH`, or
`pretrained=PATH` as the export README's command passes a checkpoint), and records what it was asked (`seen=PATH`, or
the environment's CULTUREBENCH_LMMS_SEEN; JSON lines: sample_id, the prompt, the image's size and mode), so that a
test can feed our own scorer the very same answers and check the prompts and images the task gave the model. Other
model args (`device`, `device_map`) are taken and ignored, as a model on any device answers the same."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from lmms_eval.api.model import lmms


class AnswerMap(lmms):
    is_simple = True

    def __init__(
        self, answers: str = "", pretrained: str = "", seen: str = "", default: str = "", **kwargs: Any
    ) -> None:
        super().__init__()
        path = answers or pretrained
        if not path:
            raise ValueError("culturebench_answers needs answers=PATH or pretrained=PATH (a JSON map)")
        # `pretrained=org/name` (a model name for the results folder) beside `answers=PATH` is only a name
        self._answers: dict[str, str] = json.loads(Path(path).read_text(encoding="utf-8"))
        seen = seen or os.environ.get("CULTUREBENCH_LMMS_SEEN", "")
        self._seen = Path(seen) if seen else None
        self._default = default

    def generate_until(self, requests: list[Any]) -> list[str]:
        out: list[str] = []
        records: list[dict[str, Any]] = []
        for context, _gen_kwargs, doc_to_visual, doc_id, task, split in [request.args for request in requests]:
            doc = self.task_dict[task][split][doc_id]
            visuals = doc_to_visual(doc)
            records.append(
                {
                    "sample_id": doc["sample_id"],
                    "prompt": context,
                    "images": [[list(v.size), v.mode] for v in visuals],
                }
            )
            out.append(self._answers.get(doc["sample_id"], self._default))
        if self._seen is not None:
            with self._seen.open("a", encoding="utf-8") as handle:
                handle.writelines(json.dumps(r) + "\n" for r in records)
        return out

    def generate_until_multi_round(self, requests: list[Any]) -> list[str]:
        return self.generate_until(requests)

    def loglikelihood(self, requests: list[Any]) -> list[tuple[float, bool]]:
        raise NotImplementedError("culturebench_answers only generates")
