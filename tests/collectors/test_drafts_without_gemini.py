"""Drafts without Gemini (issue 57, part 6): `reference translate` writes what CLDR knows with no key and no
network; an OpenAI-compatible endpoint (a loopback fake server, as a local vLLM, llama.cpp or Ollama server would
be) drafts the rest through the real `openai` client; an endpoint that is down is one line naming it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest

from data.reference import load_pack
from tests.data.test_reference_packs import cli
from tests.support.fake_gemini import concepts_answer, forms_answer, translation_answer
from tests.support.fake_json_api import Reply
from tests.support.fake_openai import FakeOpenAI, RecordedRequest, text_reply
from tests.support.paths import REPO_ROOT

GLOBALRG = REPO_ROOT / "examples" / "packs" / "globalrg"


def small_pack(tmp_path: Path) -> Path:
    """Two countries of GlobalRG, two concepts; Vietnamese and Swahili are what the tests draft."""
    folder = tmp_path / "pack"
    code, output = cli(
        "reference", "init", folder, "--from", GLOBALRG, "--countries", "Vietnam,Kenya", "--concepts", "dance,festival"
    )
    assert code == 0, output
    for code_ in ("vi", "sw"):
        for file in (folder / "i18n" / code_).glob("*"):
            file.unlink()
        (folder / "i18n" / code_).rmdir()
    return folder


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def model_answers(request: RecordedRequest) -> Reply:
    """The fake endpoint's model: the RQ3 forms, the translations or the concepts each request's schema asks for."""
    properties = request.schema_properties
    if {"descriptor_template", "countries"} <= properties:
        return text_reply(json.dumps(forms_answer(request)))  # type: ignore[arg-type]  # reads .prompt only
    if "translations" in properties:
        return text_reply(json.dumps(translation_answer(request)))  # type: ignore[arg-type]
    return text_reply(json.dumps(concepts_answer(request)))  # type: ignore[arg-type]


def test_cldr_names_are_drafted_with_no_key_and_no_network(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = small_pack(tmp_path)
    for name in ("GEMINI_API_KEY", "GOOGLE_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)

    def no_network(*args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"a connection was attempted: {args}")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    code, output = cli("reference", "translate", folder, "--languages", "vi,sw")
    assert code == 0, output
    assert "reference sheet" in output  # where the rest goes
    pack = load_pack(folder)
    vietnamese = pack.language_pack("vi")
    assert (vietnamese.language.name, vietnamese.language.native_name) == ("Vietnamese", "Tiếng Việt")
    assert vietnamese.language.descriptor_template is None  # no model: no template is guessed
    assert vietnamese.language.origin == "cldr"
    assert vietnamese.countries["Kenya"].name == "Kenya" and vietnamese.countries["Vietnam"].name == "Việt Nam"
    assert {n.origin for n in vietnamese.countries.values()} == {"cldr"}
    assert {n.review_status for n in vietnamese.countries.values()} == {"awaiting_native_review"}
    assert not vietnamese.concepts  # translations are a model's or a person's
    from babel import Locale

    assert pack.language_pack("sw").countries["Vietnam"].name == Locale.parse("sw").territories["VN"]  # CLDR's
    # A second run finds nothing more that CLDR knows, and writes nothing.
    before = snapshot(folder)
    code, output = cli("reference", "translate", folder, "--languages", "vi")
    assert code == 0 and "nothing CLDR knows is missing" in output, output
    assert snapshot(folder) == before


def test_an_openai_compatible_endpoint_drafts_templates_forms_and_translations(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = small_pack(tmp_path)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with FakeOpenAI(model_answers) as fake:
        settings = tmp_path / "local.yaml"
        settings.write_text(json.dumps({"backend": "openai", "openai": {"base_url": fake.base_url, "model": "m"}}))
        code, output = cli(
            "reference", "translate", folder, "--languages", "vi", "--config", settings, "--model", "qwen2.5:7b"
        )
        requests = list(fake.requests)
    assert code == 0, output
    assert requests and {r.model for r in requests} == {"qwen2.5:7b"}  # --model over the file's
    assert {r.api_key for r in requests} == {"EMPTY"}  # a local server's placeholder key
    assert all(r.body["response_format"]["type"] == "json_schema" for r in requests)
    assert any({"descriptor_template", "countries"} <= r.schema_properties for r in requests)
    vietnamese = load_pack(folder).language_pack("vi")
    assert vietnamese.language.descriptor_template == "{concept} vi {country}"
    assert vietnamese.language.origin == "model:qwen2.5:7b"
    assert vietnamese.countries["Kenya"].descriptor_country == "vi:Kenya"  # the model's form of CLDR's name
    assert sorted(t.text for t in vietnamese.concepts.values()) == ["vi:dance", "vi:festival"]
    assert {t.origin for t in vietnamese.concepts.values()} == {"model:qwen2.5:7b"}
    assert {t.review_status for t in vietnamese.concepts.values()} == {"awaiting_native_review"}
    code, output = cli("reference", "check", folder)
    assert code == 0, output


def test_the_endpoint_options_alone_choose_it(tmp_path: Path) -> None:
    folder = small_pack(tmp_path)
    with FakeOpenAI(model_answers) as fake:
        code, output = cli(
            "reference", "translate", folder, "--languages", "sw", "--backend", "openai",
            "--base-url", fake.base_url, "--model", "llama3",
        )  # fmt: skip
        models = {r.model for r in fake.requests}
    assert code == 0, output
    assert models == {"llama3"}
    assert len(load_pack(folder).language_pack("sw").concepts) == 2


def test_an_endpoint_that_is_down_is_one_line_naming_it(tmp_path: Path) -> None:
    folder = small_pack(tmp_path)
    with socket.socket() as probe:  # a loopback port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings = tmp_path / "local.yaml"
    retry = {"max_attempts": 2, "base_delay_s": 0, "max_delay_s": 0}
    openai = {"base_url": f"http://127.0.0.1:{port}/v1", "model": "m", "retry": retry, "timeout_s": 5}
    settings.write_text(json.dumps({"backend": "openai", "openai": openai}))
    before = snapshot(folder)
    command = [str(REPO_ROOT / ".venv" / "bin" / "culturebench"), "reference", "translate", str(folder)]
    command += ["--languages", "vi", "--config", str(settings)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "1000"})
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert "Traceback" not in output and "(complete)" not in output, output
    errors = [line for line in output.splitlines() if f"127.0.0.1:{port}/v1" in line]
    assert len(errors) == 1, output
    assert "drafting failed (api_error)" in errors[0] and "after 2 attempt(s)" in errors[0], output
    assert snapshot(folder) == before  # nothing drafted, nothing written


def test_concept_generation_through_an_openai_compatible_endpoint(tmp_path: Path) -> None:
    from collectors.concept_generation import GeminiConceptGenerationConfig, generate_concept_candidates

    with FakeOpenAI(model_answers) as fake:
        config = GeminiConceptGenerationConfig.model_validate(
            {"backend": "openai", "openai": {"base_url": fake.base_url, "model": "local-llm"}, "count": 4}
        )
        candidates, failures = generate_concept_candidates(config, cache_dir=str(tmp_path / "cache"))
        asked = len(fake.requests)
    assert failures.num_rows == 0 and candidates.num_rows == 4 and asked == 1
    assert set(candidates["model"].to_pylist()) == {"local-llm"}
    with pytest.raises(ValueError, match="needs an openai section"):
        GeminiConceptGenerationConfig.model_validate({"backend": "openai"})
