"""`culturebench evaluate` on hostile inputs (issue 27): a release whose tables are not its manifest's, degenerate
vectors, malformed, slow, rate-limited and huge model answers, broken `compare` inputs and outputs, configs that
fail validation, refusals that must come before any model work, and a huge file that is not Parquet.

Each case gives one line naming the file or field (exit 2 for bad input, 1 for an existing result folder with other
content), never a traceback, and never a number published as if it were measured."""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import flows.cli.output
from data.clients.retry import RetryPolicy
from data.publish.reader import Release
from data.reference import default_pack
from evaluation.mixcube import task as mx
from evaluation.models.encoders import EmbeddingsEncoder, ImageRef, ModelIdentity
from evaluation.models.vlm import OpenAIChatConfig, OpenAIChatVlm
from evaluation.xcm import metrics as m
from evaluation.xcm.task import evaluate_3xcm
from flows.cli import app
from tests.support.fake_openai import FakeOpenAI, Reply, completion, error_reply, text_reply
from tests.support.paths import REPO_ROOT

ROOT = REPO_ROOT
DEMO_3XCM = ROOT / "releases" / "3xcm" / "0.1.0-demo"
DEMO_MIXCUBE = ROOT / "releases" / "mixcube" / "0.1.0-demo"
XCM_TABLES = ("benchmark", "benchmark_cd", "image_metadata")
NO_RETRY = RetryPolicy(max_attempts=1, base_delay_s=0.0, max_delay_s=0.0)


@pytest.fixture(autouse=True)
def wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI's messages are one line; a terminal of 80 columns would wrap them."""
    monkeypatch.setattr(flows.cli.output.console, "width", 1000)


def cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert "Traceback" not in result.output, result.output
    return result.exit_code, result.output


def error_line(output: str, needle: str) -> str:
    """The one line that says what went wrong; nothing else may mention it."""
    lines = [line for line in output.splitlines() if needle in line]
    assert len(lines) == 1, output
    return lines[0]


# -- releases and vectors -------------------------------------------------------------------------------------------
def copy_3xcm(tmp_path: Path) -> Path:
    """The 3XCM demo release's manifest and the tables an evaluation reads (the rest is not read, nor checked)."""
    folder = tmp_path / "3xcm-copy"
    folder.mkdir()
    shutil.copy2(DEMO_3XCM / "manifest.json", folder / "manifest.json")
    for name in XCM_TABLES:
        shutil.copytree(DEMO_3XCM / name, folder / name)
    return folder


def reseal(folder: Path) -> None:
    """Rewrite the manifest's `files` to what the folder holds now (a legitimate release of other content)."""
    manifest = json.loads((folder / "manifest.json").read_text())
    files = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.name != "manifest.json"):
        data = path.read_bytes()
        files[path.relative_to(folder).as_posix()] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    manifest["files"] = files
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2))


def small_mixcube(tmp_path: Path, rows: int = 6) -> Path:
    """The MixCuBe demo release cut to its first `rows` rows, resealed."""
    folder = tmp_path / "mixcube-small"
    (folder / "default").mkdir(parents=True)
    shutil.copy2(DEMO_MIXCUBE / "manifest.json", folder / "manifest.json")
    (source,) = sorted((DEMO_MIXCUBE / "default").glob("*.parquet"))
    pq.write_table(pq.read_table(source).slice(0, rows), folder / "default" / source.name)
    reseal(folder)
    return folder


def xcm_texts(release: Path) -> list[str]:
    texts: set[str] = set()
    for name, column in (("benchmark", "query_text"), ("benchmark_cd", "query_text")):
        texts |= set(pq.read_table(release / name, columns=[column])[column].to_pylist())
    texts |= set(pq.read_table(release / "image_metadata", columns=["concept_in_native"])[0].to_pylist())
    return sorted(texts)


def write_vectors(
    release: Path, folder: Path, *, identical: bool = False, zero: int = 0, nan: int = 0, seed: int = 0
) -> tuple[Path, Path]:
    """Precomputed vectors for every image and query text of a 3XCM release: random, or one vector for every image
    (`identical`), with the first `zero` image vectors all zeros and the next `nan` holding a NaN."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    ids = pq.read_table(release / "image_metadata", columns=["image_id"])[0].to_pylist()
    images = np.tile(rng.normal(size=8), (len(ids), 1)) if identical else rng.normal(size=(len(ids), 8))
    images[:zero] = 0.0
    images[zero : zero + nan, 0] = np.nan
    texts = xcm_texts(release)
    pq.write_table(pa.table({"image_id": ids, "embedding": images.tolist()}), folder / "IMG.parquet")
    pq.write_table(
        pa.table({"text": texts, "embedding": rng.normal(size=(len(texts), 8)).tolist()}), folder / "TXT.parquet"
    )
    return folder / "IMG.parquet", folder / "TXT.parquet"


def evaluate_3xcm_cli(release: Path, vectors: tuple[Path, Path], out: Path, *extra: str) -> tuple[int, str]:
    image, text = vectors
    args = ["evaluate", "3xcm", release, "--model-backend", "embeddings", "--image-embeddings", image]
    return cli(*args, "--text-embeddings", text, "--out", out, "--bootstrap-resamples", "0", *extra)


def evaluate_mixcube_cli(release: Path, fake: FakeOpenAI, out: Path, *extra: str) -> tuple[int, str]:
    args = ["evaluate", "mixcube", release, "--model-backend", "openai", "--base-url", fake.base_url]
    return cli(*args, "--model", "fake-vlm", "--out", out, *extra)


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(lambda request: text_reply("This is South Korea.")) as server:
        yield server


@pytest.fixture
def counted_encoder(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every call of the precomputed-vectors encoder, by method: a refusal that comes first leaves it empty."""
    calls: list[str] = []
    for method in ("image_vectors", "text_vectors"):
        original = getattr(EmbeddingsEncoder, method)

        def spy(self: Any, *args: Any, _original: Callable = original, _name: str = method, **kwargs: Any) -> Any:
            calls.append(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(EmbeddingsEncoder, method, spy)
    return calls


# -- 12: the tables an evaluation reads are checked against the manifest --------------------------------------------
def test_swapped_candidate_columns_are_refused_naming_the_table(tmp_path: Path, counted_encoder: list[str]) -> None:
    release = copy_3xcm(tmp_path)
    (table_file,) = sorted((release / "benchmark").glob("*.parquet"))
    table = pq.read_table(table_file)
    swapped = {}
    for name in table.column_names:
        if name.startswith("semantically_relevant_"):
            swapped[name] = table[name.replace("semantically_relevant_", "culturally_relevant_")]
        elif name.startswith("culturally_relevant_"):
            swapped[name] = table[name.replace("culturally_relevant_", "semantically_relevant_")]
        else:
            swapped[name] = table[name]
    pq.write_table(pa.table(swapped), table_file)
    vectors = write_vectors(release, tmp_path / "vectors")

    code, output = evaluate_3xcm_cli(release, vectors, tmp_path / "out")
    assert code == 2, output
    line = error_line(output, "benchmark/train-00000-of-00001.parquet")
    assert "manifest" in line
    assert not (tmp_path / "out").exists() and counted_encoder == []


def test_a_changed_mixcube_table_is_refused_before_any_question(tmp_path: Path, fake: FakeOpenAI) -> None:
    release = small_mixcube(tmp_path)
    (table_file,) = sorted((release / "default").glob("*.parquet"))
    table = pq.read_table(table_file)
    pq.write_table(table.set_column(0, "country", pa.array(["British"] * table.num_rows)), table_file)
    code, output = evaluate_mixcube_cli(release, fake, tmp_path / "out")
    assert code == 2, output
    error_line(output, "default/train-00000-of-00001.parquet")
    assert fake.requests == [] and not (tmp_path / "out").exists()


def test_the_release_manifest_is_read_strictly(tmp_path: Path) -> None:
    release = small_mixcube(tmp_path)
    manifest = json.loads((release / "manifest.json").read_text())
    (release / "manifest.json").write_text(json.dumps({**manifest, "name": "../../etc"}))
    with pytest.raises(ValueError, match="field 'name'"):
        Release.open(release)
    (release / "manifest.json").write_text(json.dumps(manifest))
    opened = Release.open(release)
    assert opened.manifest_sha256 == hashlib.sha256((release / "manifest.json").read_bytes()).hexdigest()
    assert (opened.name, opened.version) == ("mixcube", manifest["version"])


# -- 13: degenerate vectors -----------------------------------------------------------------------------------------
def test_zero_and_non_finite_precomputed_vectors_are_refused(tmp_path: Path) -> None:
    release = copy_3xcm(tmp_path)
    vectors = write_vectors(release, tmp_path / "zeros", zero=3)
    code, output = evaluate_3xcm_cli(release, vectors, tmp_path / "out")
    assert code == 2, output
    line = error_line(output, "zero norm")
    assert str(vectors[0]) in line and " 3 " in line
    vectors = write_vectors(release, tmp_path / "nan", nan=2)
    code, output = evaluate_3xcm_cli(release, vectors, tmp_path / "out")
    assert code == 2, output
    assert str(vectors[0]) in error_line(output, "2 embedding(s)")
    assert not (tmp_path / "out").exists()


class StubEncoder:
    """A model backend that returns what it is told to: random vectors, with some rows zero or NaN."""

    runs_locally = needs_image_bytes = True

    def __init__(self, zero_images: int = 0, nan_texts: int = 0) -> None:
        self.identity = ModelIdentity(
            backend="open_clip", model_id="open_clip--stub", name="stub", weights_sha256=None, device="cpu",
            precision="fp32",
        )  # fmt: skip
        self.zero_images, self.nan_texts = zero_images, nan_texts
        self.rng = np.random.default_rng(0)

    def image_vectors(self, images: list[ImageRef], progress: Any = None) -> np.ndarray:
        vectors = self.rng.normal(size=(len(images), 8)).astype(np.float32)
        vectors[: self.zero_images] = 0.0
        return vectors

    def text_vectors(self, texts: list[str]) -> np.ndarray:
        vectors = self.rng.normal(size=(len(texts), 8)).astype(np.float32)
        vectors[: self.nan_texts, 1] = np.inf
        return vectors


def test_zero_and_non_finite_vectors_from_a_model_are_refused(tmp_path: Path) -> None:
    release = Release.open(copy_3xcm(tmp_path))
    with pytest.raises(ValueError, match=r"open_clip--stub .* 4 image vector\(s\) of zero norm") as info:
        evaluate_3xcm(release, StubEncoder(zero_images=4), n_resamples=0)
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match=r"open_clip--stub .* 2 text vector\(s\) .* NaN or infinite"):
        evaluate_3xcm(release, StubEncoder(nan_texts=2), n_resamples=0)


def test_ties_are_detected_within_float32_resolution() -> None:
    scores = np.array(
        [
            [0.5, 0.5, 0.1],  # exact tie
            [0.30000001, 0.3, 0.2],  # closer than float32 can tell apart
            [0.3, 0.3 + 1e-4, 0.2],  # a real difference
            [0.1, 0.2, 0.9],
        ]
    )
    assert m.tied_winners(scores).tolist() == [True, True, False, False]
    assert m.first_argmax(scores).tolist() == [0, 0, 1, 2]  # the winner rule itself is unchanged


@pytest.mark.slow
def test_identical_vectors_say_that_ties_decided_the_winners(tmp_path: Path) -> None:
    release = copy_3xcm(tmp_path)
    code, output = evaluate_3xcm_cli(release, write_vectors(release, tmp_path / "same", identical=True), tmp_path / "o")
    assert code == 0, output
    metrics = json.loads((tmp_path / "o" / "metrics.json").read_text())
    rows = pq.read_metadata(next((release / "benchmark").glob("*.parquet"))).num_rows
    assert metrics["M_cr"] == 1.0 and metrics["SP"] == 0.0  # what the first-maximum rule gives ...
    assert metrics["ties"]["rq2"] == rows and metrics["ties"]["rq3"] == rows  # ... and what it rests on
    card = (tmp_path / "o" / "README.md").read_text()
    assert f"Ties decided {rows} of {rows} RQ2 winners" in card and "not measured" in card
    assert "ties decided" in output.lower()

    # Vectors that tell the candidates apart: no ties, no key, no warning (the result reads as before).
    code, output = evaluate_3xcm_cli(release, write_vectors(release, tmp_path / "random"), tmp_path / "r")
    assert code == 0, output
    assert "ties" not in json.loads((tmp_path / "r" / "metrics.json").read_text())
    assert "Ties decided" not in (tmp_path / "r" / "README.md").read_text()


# -- 14: malformed answers are failures, never cached, never scored ------------------------------------------------
def tiny_rows(n: int = 3) -> pa.Table:
    table = pq.read_table(next((DEMO_MIXCUBE / "default").glob("*.parquet")))
    return table.slice(0, n)


def openai_config(base_url: str, **overrides: Any) -> OpenAIChatConfig:
    return OpenAIChatConfig(
        **{"base_url": base_url, "model": "fake-vlm", "timeout_s": 5.0, "retry": NO_RETRY, **overrides}
    )


@pytest.mark.parametrize(
    "body",
    [
        {"choices": "oops"},
        completion([1, 2]),  # type: ignore[arg-type]
        {"choices": [{"message": "hello", "finish_reason": "stop"}]},
        {"choices": [{"message": {"content": {"text": "Korea"}}, "finish_reason": "stop"}]},
        [1],
    ],
    ids=["choices-string", "content-list", "message-string", "content-object", "json-list"],
)
def test_a_malformed_answer_is_a_failure_row_never_cached(fake: FakeOpenAI, tmp_path: Path, body: Any) -> None:
    rows = tiny_rows(3)
    fake.enqueue(Reply(body=body))
    vlm = openai_config(fake.base_url, cache_dir=str(tmp_path / "cache")).build()
    per_image = mx.evaluate_images(rows, vlm, judge=None, mix=default_pack().mixcube())
    first = per_image.to_pylist()[0]
    assert (first["error"], first["correct"], first["answer"]) == ("malformed_response", None, None)
    assert not first["cached"]
    summary = mx.summary(per_image, default_pack().mixcube())
    assert summary["failed"] == 1 and summary["answered"] == 2 and summary["failures"] == {"malformed_response": 1}
    asked = len(fake.requests)
    again = mx.evaluate_images(
        rows,
        openai_config(fake.base_url, cache_dir=str(tmp_path / "cache")).build(),
        None,
        mix=default_pack().mixcube(),
    )
    assert len(fake.requests) == asked + 1  # the malformed one is asked again, the others come from the cache
    assert again["cached"].to_pylist() == [False, True, True] and again["error"].to_pylist() == [None] * 3


def test_failures_stay_out_of_the_accuracy_and_the_card_counts_them(tmp_path: Path, fake: FakeOpenAI) -> None:
    release = small_mixcube(tmp_path, rows=6)
    fake.enqueue(Reply(body={"choices": "oops"}), Reply(body=completion([1, 2])))  # type: ignore[arg-type]
    code, output = evaluate_mixcube_cli(release, fake, tmp_path / "out", "--workers", "1")
    assert code == 0, output
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert (metrics["images"], metrics["answered"], metrics["failed"]) == (6, 4, 2)
    assert metrics["failures"] == {"malformed_response": 2}
    assert metrics["accuracy"] == metrics["correct"] / 4  # the denominator is the answered questions
    per_image = pq.read_table(tmp_path / "out" / "per_query.parquet")
    assert per_image["error"].to_pylist()[:2] == ["malformed_response"] * 2
    card = (tmp_path / "out" / "README.md").read_text()
    assert "2 of 6 images have no scored answer" in card and "`malformed_response`: 2" in card
    assert "2 of 6 images have no scored answer" in output  # the CLI says so too


# -- 15: deadlines, Retry-After and answer size ---------------------------------------------------------------------
class HostileServer:
    """An OpenAI-compatible endpoint that misbehaves as `mode` says: `trickle_body` sends a valid completion one
    byte every 0.5 s, `trickle_headers` its headers so, `huge_declared` declares and sends a 50 MB completion,
    `huge_streamed` sends one without a length (read to the close), `gzip_bomb` a small gzip body that inflates to
    50 MB; `gzip_small` is a well-behaved compressed answer."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.stop = threading.Event()
        self.requests = 0

    def __enter__(self) -> HostileServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length", 0)))
                server.requests += 1
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the client gave up
                    server.answer(self)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def answer(self, handler: BaseHTTPRequestHandler) -> None:
        out = handler.wfile
        if self.mode.startswith("gzip"):  # a small gzip body: a valid answer, or one that inflates to 50 MB
            text = "This is South Korea." if self.mode == "gzip_small" else "a" * (50 << 20)
            body = gzip.compress(json.dumps(completion(text)).encode(), compresslevel=1)
            head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-encoding: gzip\r\n"
            out.write(f"{head}content-length: {len(body)}\r\n\r\n".encode() + body)
            out.flush()
            return
        if self.mode.startswith("trickle"):
            body = json.dumps(completion("This is South Korea.")).encode()
            head = f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
            head += "x-slow: " + "a" * 60 + "\r\n\r\n"
            slow, fast = (body, head.encode()) if self.mode == "trickle_body" else (head.encode(), b"")
            out.write(fast)
            out.flush()
            for byte in slow:
                if self.stop.wait(0.5):
                    return
                out.write(bytes([byte]))
                out.flush()
            if self.mode == "trickle_headers":
                out.write(body)
            return
        filler = "a" * (1 << 20)
        prefix = json.dumps(completion("")).encode().split(b'"content": ""')
        size = 50 << 20
        head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
        if self.mode == "huge_declared":
            total = len(prefix[0]) + len(prefix[1]) + len(b'"content": ""') + size
            head += f"content-length: {total}\r\n"
        else:
            head += "connection: close\r\n"
            handler.close_connection = True
        out.write((head + "\r\n").encode() + prefix[0] + b'"content": "')
        for _ in range(size >> 20):
            if self.stop.is_set():
                return
            out.write(filler.encode())
        out.write(b'"' + prefix[1])
        out.flush()


@pytest.mark.parametrize("mode", ["trickle_body", "trickle_headers"])
def test_a_trickled_answer_ends_at_the_deadline(mode: str) -> None:
    with HostileServer(mode) as server:
        vlm = OpenAIChatVlm(openai_config(server.base_url, timeout_s=2.0))
        started = time.monotonic()
        answer = vlm.ask("Which country?", jpeg_bytes())
        elapsed = time.monotonic() - started
    assert answer.error == "timeout" and answer.attempts == 1, answer
    assert "deadline" in (answer.detail or "")
    assert elapsed < 15, elapsed  # 2 s deadline; the body alone would take ~45 s


def test_a_huge_retry_after_fails_now_as_rate_limited(fake: FakeOpenAI) -> None:
    fake.enqueue(error_reply(429, "slow down", retry_after="999999"))
    slept: list[float] = []
    config = openai_config(fake.base_url, retry=RetryPolicy(max_attempts=6, base_delay_s=0.0, max_delay_s=0.0))
    started = time.monotonic()
    answer = OpenAIChatVlm(config, sleep=slept.append).ask("Which country?", jpeg_bytes())
    assert time.monotonic() - started < 15
    assert (answer.error, answer.attempts, slept) == ("rate_limited", 1, [])  # no wait, no retry
    assert "Retry-After 999999" in (answer.detail or "") and "max_retry_after_s" in (answer.detail or "")
    # Within the cap the server's wait is honoured, as before.
    fake.enqueue(error_reply(429, "slow down", retry_after="7"))
    answer = OpenAIChatVlm(config, sleep=slept.append).ask("Which country?", jpeg_bytes())
    assert answer.ok and slept == [7.0]


@pytest.mark.parametrize("mode", ["huge_declared", "huge_streamed", "gzip_bomb"])
def test_a_huge_answer_is_cut_at_the_cap_and_never_cached(mode: str, tmp_path: Path) -> None:
    with HostileServer(mode) as server:
        vlm = OpenAIChatVlm(openai_config(server.base_url, cache_dir=str(tmp_path / "cache")))
        started = time.monotonic()
        answer = vlm.ask("Which country?", jpeg_bytes())
        elapsed = time.monotonic() - started
    assert (answer.error, answer.text, answer.attempts) == ("response_too_large", None, 1), answer
    assert "max_response_bytes" in (answer.detail or "")
    assert elapsed < 15 and not list((tmp_path / "cache").rglob("*.json"))


def test_a_small_compressed_answer_is_read() -> None:
    with HostileServer("gzip_small") as server:
        answer = OpenAIChatVlm(openai_config(server.base_url)).ask("Which country?", jpeg_bytes())
    assert answer.ok and answer.text == "This is South Korea.", answer


def jpeg_bytes() -> bytes:
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (16, 16), (200, 30, 30)).save(buffer, format="JPEG")
    return buffer.getvalue()


# -- 20: compare's inputs and output --------------------------------------------------------------------------------
def fake_result(folder: Path, model_id: str, manifest: bool = True) -> Path:
    """A result folder as `compare` reads it: metrics.json (and the manifest ReleaseWriter writes)."""
    folder.mkdir(parents=True)
    metrics = {
        "M_cr": 0.5, "M_lb": 0.3, "M_ti": 0.2, "SP": 0.6,
        "ci95": {"M_cr": [0.4, 0.6], "M_lb": [0.2, 0.4], "M_ti": [0.1, 0.3], "SP": [0.4, 0.8]},
        "benchmark": "3xcm",
        "release": {"name": "3xcm", "version": "0.1.0", "manifest_sha256": "ab" * 32},
        "model": {"model_id": model_id},
    }  # fmt: skip
    (folder / "metrics.json").write_text(json.dumps(metrics))
    if manifest:
        (folder / "manifest.json").write_text(json.dumps({"name": "evaluation-3xcm", "version": "0.1.0", "files": {}}))
    return folder


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("[1]", "a JSON list, not an object"),
        ('{"M_cr": ', "not valid JSON"),
        ('{"benchmark": "3xcm"}', "'release'"),
        ('{"benchmark": "nope", "release": {}, "model": {}}', "'benchmark'"),
        ('{"benchmark": ["3xcm"]}', "'benchmark'"),
        (
            '{"benchmark": "3xcm", "release": {"version": "1.0.0", "manifest_sha256": "x"}, '
            '"model": {"model_id": "m"}, "M_cr": "high"}',
            "'M_cr'",
        ),
        (b"\xff\xfe", "not UTF-8"),
    ],
    ids=["list", "invalid-json", "no-release", "unknown-benchmark", "list-benchmark", "text-metric", "not-utf8"],
)
def test_compare_names_a_metrics_file_it_cannot_read(tmp_path: Path, content: str | bytes, needle: str) -> None:
    good = fake_result(tmp_path / "a", "model-a")
    bad = tmp_path / "b"
    bad.mkdir()
    path = bad / "metrics.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    code, output = cli("evaluate", "compare", good, bad)
    assert code == 2, output
    assert str(path) in error_line(output, needle)


def test_compare_refuses_an_out_that_is_a_file_or_inside_a_result(tmp_path: Path) -> None:
    a = fake_result(tmp_path / "a", "model-a")
    b = fake_result(tmp_path / "b", "model-b")
    before = {p: p.read_bytes() for p in (*a.iterdir(), *b.iterdir())}
    (tmp_path / "file").write_text("keep me")
    code, output = cli("evaluate", "compare", a, b, "--out", tmp_path / "file")
    assert code == 2, output
    assert "is a file" in error_line(output, str(tmp_path / "file"))
    assert (tmp_path / "file").read_text() == "keep me"
    for out in (a, a / "cmp", tmp_path / "elsewhere-result"):
        if out.name == "elsewhere-result":
            out = fake_result(out, "model-c") / "cmp"  # inside a result folder that is not an input
        code, output = cli("evaluate", "compare", a, b, "--out", out)
        assert code == 2, output
        error_line(output, "--out")
    assert {p: p.read_bytes() for p in (*a.iterdir(), *b.iterdir())} == before  # nothing was written into them
    code, output = cli("evaluate", "compare", a, b, "--out", tmp_path / "cmp")
    assert code == 0 and (tmp_path / "cmp" / "comparison.parquet").is_file(), output


# -- 23: one-line config errors, and every cheap refusal before the model ------------------------------------------
def test_a_config_that_fails_validation_is_one_line(tmp_path: Path) -> None:
    release = small_mixcube(tmp_path)
    config = tmp_path / "eval.yaml"
    config.write_text("model:\n  backend: openai\nworkers: 0\n")
    code, output = cli("evaluate", "mixcube", release, "--config", config)
    assert code == 2, output
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, output
    assert lines[0].startswith(f"{config}: model.openai.base_url: ") and "(and 2 more)" in lines[0], output
    config.write_text("model: [unclosed\n  backend: x\n")
    code, output = cli("evaluate", "mixcube", release, "--config", config)
    assert code == 2 and len([line for line in output.splitlines() if line.strip()]) == 1, output
    assert str(config) in output
    config.write_bytes("model: {backend: openai, model: Espa\u00f1a}\n".encode("latin-1"))
    code, output = cli("evaluate", "mixcube", release, "--config", config)
    assert code == 2 and "not UTF-8" in error_line(output, str(config))


def test_a_release_version_that_is_not_semver_is_refused_before_any_question(tmp_path: Path, fake: FakeOpenAI) -> None:
    release = small_mixcube(tmp_path)
    manifest = json.loads((release / "manifest.json").read_text())
    (release / "manifest.json").write_text(json.dumps({**manifest, "version": "1.0"}))
    code, output = evaluate_mixcube_cli(release, fake, tmp_path / "out")
    assert code == 2, output
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1 and "'version'" in lines[0], output
    assert fake.requests == []


def test_an_existing_different_result_is_refused_before_any_question(tmp_path: Path, fake: FakeOpenAI) -> None:
    release = small_mixcube(tmp_path, rows=3)
    out = tmp_path / "out"
    code, output = evaluate_mixcube_cli(release, fake, out)
    assert code == 0, output
    asked = len(fake.requests)
    args = ["evaluate", "mixcube", release, "--model-backend", "openai", "--base-url", fake.base_url]
    code, output = cli(*args, "--model", "another-vlm", "--out", out)
    assert code == 1, output
    assert "immutable" in error_line(output, str(out))
    assert len(fake.requests) == asked  # refused before the first question
    # A path inside the release, or a file, is refused before any question too.
    for bad in (release / "results", tmp_path / "a-file"):
        if bad.name == "a-file":
            bad.write_text("x")
        code, output = evaluate_mixcube_cli(release, fake, bad)
        assert code == 2, output
        error_line(output, "--out")
    assert len(fake.requests) == asked
    # The same evaluation again is still `unchanged`.
    code, output = evaluate_mixcube_cli(release, fake, out)
    assert code == 0 and '"status": "unchanged"' in output, output


def test_an_existing_different_3xcm_result_is_refused_before_the_encoder(
    tmp_path: Path, counted_encoder: list[str]
) -> None:
    release = copy_3xcm(tmp_path)
    vectors = write_vectors(release, tmp_path / "vectors")
    out = tmp_path / "out"
    code, output = evaluate_3xcm_cli(release, vectors, out)
    assert code == 0 and counted_encoder, output
    counted_encoder.clear()
    code, output = evaluate_3xcm_cli(release, vectors, out, "--seed", "7")  # other settings, same folder
    assert code == 1 and "immutable" in output, output
    assert counted_encoder == []
    code, output = evaluate_3xcm_cli(release, vectors, release / "results")
    assert code == 2 and counted_encoder == [], output
    error_line(output, "--out")


# -- 24: a huge file that is not Parquet is refused from its first and last bytes --------------------------------
@pytest.mark.parametrize("kind", ["text", "fake-magic"])
def test_a_huge_non_parquet_embeddings_file_is_refused_at_once(tmp_path: Path, kind: str) -> None:
    huge = tmp_path / "huge.parquet"
    with huge.open("wb") as handle:
        handle.write(b"PAR1" if kind == "fake-magic" else b"image_id,embedding\n")
        handle.truncate(2 << 30)  # sparse: 2 GiB that cost no disk
        if kind == "fake-magic":
            handle.seek((2 << 30) - 8)
            handle.write(b"\xff\xff\xff\x7fPAR1")  # a footer "length" of 2 GiB
    text = tmp_path / "TXT.parquet"
    pq.write_table(pa.table({"text": ["t"], "embedding": [[1.0, 2.0]]}), text)
    script = (
        "import resource, sys, time\n"
        "from evaluation.models.encoders import EmbeddingsEncoderConfig\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "started = time.monotonic()\n"
        "try:\n"
        f"    EmbeddingsEncoderConfig(image_embeddings={str(huge)!r}, text_embeddings={str(text)!r}).build()\n"
        "except ValueError as exc:\n"
        "    print(str(exc))\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before, time.monotonic() - started)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    message, numbers = done.stdout.strip().splitlines()
    grown_kb, seconds = numbers.split()
    assert str(huge) in message and "not a readable Parquet file" in message, message
    assert int(grown_kb) < 200_000 and float(seconds) < 5, numbers  # neither 2 GB read nor minutes spent
