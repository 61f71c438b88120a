"""Running the VLMEvalKit export's README as written (tests/evaluation/harnesses/exports/test_vlmevalkit.py): its
```bash
blocks, the environment they run in (VLMEvalKit's venv or ours first on PATH, offline), and `ReleaseReplay`, a
`FakeOpenAI` responder that plays a model behind `--base-url`: it knows each release image in the form VLMEvalKit
sends it, and answers the row the image belongs to."""

from __future__ import annotations

import hashlib
import io
import os
import re
import subprocess
import threading
from collections import Counter
from pathlib import Path

from PIL import Image

from tests.support.fake_json_api import Reply
from tests.support.fake_openai import RecordedRequest, error_reply, text_reply
from tests.support.paths import REPO_ROOT

HARNESS_BIN = REPO_ROOT / ".venv-harness-vlmevalkit" / "bin"
OUR_BIN = REPO_ROOT / ".venv" / "bin"
#: vlmeval.smp.encode_image_to_base64: an image whose shorter side is below this is enlarged to it first.
MIN_EDGE = 100


def as_vlmevalkit_sends(data: bytes) -> bytes:
    """The image bytes VLMEvalKit (ms-vlmeval 0.0.20) sends to a `--base-url` model for a TSV image of `data`, redone
    with PIL from its source: `ImageBaseDataset.dump_image` decodes the base64 and saves `<index>.png` (RGBA, P and
    LA converted to RGB), then `LMDeployWrapper.prepare_itlist` opens that PNG and `encode_image_to_base64` saves it
    as JPEG at PIL's default quality (75), the shorter side enlarged to `MIN_EDGE` when under it."""

    def rgb(image: Image.Image) -> Image.Image:
        return image.convert("RGB") if image.mode in ("RGBA", "P", "LA") else image

    png = io.BytesIO()
    with Image.open(io.BytesIO(data)) as image:
        rgb(image).save(png, format="PNG")
    with Image.open(png) as opened:
        sent = rgb(opened)
        if min(sent.size) < MIN_EDGE:
            factor = MIN_EDGE / min(sent.size)
            sent = sent.resize((int(sent.width * factor), int(sent.height * factor)))
        out = io.BytesIO()
        sent.save(out, format="JPEG")
        return out.getvalue()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class ReleaseReplay:
    """A model behind the fake server: for the one image of a request, the answer given for the release row whose
    image that is (`answers`, by sample_id), found by the sha256 of the image as VLMEvalKit sends it
    (`as_vlmevalkit_sends`); an HTTP 500 for a row in `failing`. An image that is no release image, or a request
    without exactly one, gets a 400 and is kept in `unmatched`."""

    def __init__(self, images: dict[str, bytes], answers: dict[str, str], failing: set[str] | None = None) -> None:
        self.by_sent: dict[str, str] = {}
        for sample_id, data in images.items():
            sent = sha256(as_vlmevalkit_sends(data))
            assert sent not in self.by_sent, f"{sample_id} and {self.by_sent.get(sent)} are sent as the same bytes"
            self.by_sent[sent] = sample_id
        self.released = {sha256(data) for data in images.values()}
        self.answers = answers
        self.failing = set(failing or ())
        self.asked: Counter[str] = Counter()  # sample_id -> requests for its image
        self.unmatched: list[str] = []
        self.byte_identical = 0  # requests whose image is the released bytes
        self._lock = threading.Lock()

    def __call__(self, request: RecordedRequest) -> Reply:
        images = request.images
        sample_id = self.by_sent.get(sha256(images[0][1])) if len(images) == 1 else None
        with self._lock:
            self.byte_identical += sum(sha256(data) in self.released for _, data in images)
            if sample_id is None:
                self.unmatched.append(f"{len(images)} images, {[mime for mime, _ in images]}")
                return error_reply(400, "fake model: not one release image as VLMEvalKit sends it")
            self.asked[sample_id] += 1
        if sample_id in self.failing:
            return error_reply(500, "fake model: this image always fails")
        return text_reply(self.answers[sample_id])


def readme_blocks(export: Path) -> list[str]:
    """The export README's ```bash blocks, in order."""
    return re.findall(r"```bash\n(.*?)```", (export / "README.md").read_text(encoding="utf-8"), flags=re.S)


def block_env(tmp_path: Path, variables: dict[str, str], harness: bool) -> dict[str, str]:
    """The environment a README block runs in: its variables, offline, no proxy, a HOME of its own, and VLMEvalKit's
    venv (`harness`) or ours first on PATH (`python` and `culturebench` as each installs them)."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy") and not k.startswith("HF_")}
    env.update(
        HOME=str(home), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1",
        HF_HOME=str(home / "hf"), NO_PROXY="127.0.0.1", PYTHONNOUSERSITE="1", MPLCONFIGDIR=str(home / "mpl"),
    )  # fmt: skip
    env.pop("LMDEPLOY_API_KEY", None)
    env.pop("LMUData", None)
    env.update(variables)
    env["PATH"] = f"{HARNESS_BIN if harness else OUR_BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


def run_block(block: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """A README block, run as written by bash."""
    return subprocess.run(["bash", "-c", block], env=env, cwd=cwd, capture_output=True, text=True, timeout=900)
