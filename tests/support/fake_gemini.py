"""A fake Gemini API on 127.0.0.1 for tests: the real google-genai client talks to it through
`http_options.base_url` (GeminiSettings.base_url).

It serves `POST /{api_version}/models/{model}:generateContent`, records every request (headers, body, arrival
time), and answers from a scriptable queue of replies; when the queue is empty it answers with `default_responder`,
which answers the translation and concept-generation requests of this project deterministically from the request.

    with FakeGemini() as fake:
        fake.enqueue(error_reply(429, retry_after="1"), text_reply("{not json"))
        settings = GeminiSettings(base_url=fake.base_url, ...)
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable
from typing import Any

from tests.support.fake_json_api import JsonRequest, Reply, ScriptedJsonServer

PATH = re.compile(r"^/(?P<version>[^/]+)/models/(?P<model>[^/:]+):generateContent$")


class RecordedRequest(JsonRequest):
    @property
    def model(self) -> str | None:
        match = PATH.match(self.path)
        return match.group("model") if match else None

    @property
    def api_key(self) -> str | None:
        return next((v for k, v in self.headers.items() if k.lower() == "x-goog-api-key"), None)

    @property
    def prompt(self) -> str:
        """Every text part of every turn, joined."""
        return "\n".join(
            part["text"]
            for content in self.body.get("contents", [])
            for part in content.get("parts", [])
            if "text" in part
        )

    @property
    def images(self) -> list[tuple[str, bytes]]:
        """(mime type, decoded bytes) of every inline image part of every turn."""
        found = []
        for content in self.body.get("contents", []):
            for part in content.get("parts", []):
                blob = part.get("inlineData") or part.get("inline_data")
                if blob:
                    mime = blob.get("mimeType") or blob.get("mime_type") or ""
                    data = blob["data"].replace("-", "+").replace("_", "/")  # google-genai sends URL-safe base64
                    found.append((mime, base64.b64decode(data + "=" * (-len(data) % 4))))
        return found

    @property
    def generation_config(self) -> dict[str, Any]:
        return self.body.get("generationConfig", {})

    @property
    def schema_properties(self) -> set[str]:
        schema = self.generation_config.get("responseSchema") or self.generation_config.get("responseJsonSchema") or {}
        return set(schema.get("properties", {}))


Responder = Callable[[RecordedRequest], Reply]


def text_reply(text: str) -> Reply:
    """A 200 whose single candidate holds `text` (the model's raw answer, JSON or not)."""
    return Reply(
        body={
            "candidates": [
                {"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP", "index": 0}
            ],
            "usageMetadata": {"promptTokenCount": 1, "candidatesTokenCount": 1, "totalTokenCount": 2},
            "modelVersion": "fake",
        }
    )


def json_reply(value: Any) -> Reply:
    return text_reply(json.dumps(value, ensure_ascii=False))


def error_reply(
    status: int, message: str = "fake error", retry_after: str | None = None, status_name: str | None = None
) -> Reply:
    names = {
        429: "RESOURCE_EXHAUSTED",
        500: "INTERNAL",
        503: "UNAVAILABLE",
        400: "INVALID_ARGUMENT",
        403: "PERMISSION_DENIED",
    }
    return Reply(
        status=status,
        body={"error": {"code": status, "message": message, "status": status_name or names.get(status, "UNKNOWN")}},
        headers={"Retry-After": retry_after} if retry_after is not None else {},
    )


def input_data(request: RecordedRequest) -> dict[str, Any]:
    """The JSON block of a translation prompt (collectors.translations.translation_prompt)."""
    match = re.search(r"```json\n(.*?)\n```", request.prompt, re.S)
    if not match:
        raise ValueError("no ```json block in the prompt")
    return json.loads(match.group(1))


def translation_answer(request: RecordedRequest) -> dict[str, Any]:
    """Each requested concept as "<lang>:<concept>", with the usual descriptor template the prompt names."""
    data = input_data(request)
    code = data["language_code"]
    match = re.search(r"The usual form in .*? is (\".*?\");", request.prompt)
    template = json.loads(match.group(1)) if match else "{concept} of {country}"
    return {
        "translations": [
            {"concept_id": c["concept_id"], "text": f"{code}:{c['concept']}", "descriptor_template": template}
            for c in data["concepts"]
        ]
    }


def forms_answer(request: RecordedRequest) -> dict[str, Any]:
    """A new language's RQ3 template ("{concept} <code> {country}") and each country's form in it ("<code>:<name>")
    (collectors/pack_drafts.py `forms_prompt`)."""
    data = input_data(request)
    code = data["language_code"]
    return {
        "descriptor_template": f"{{concept}} {code} {{country}}",
        "countries": [{"iso2": c["iso2"], "descriptor_country": f"{code}:{c['name']}"} for c in data["countries"]],
    }


def concepts_answer(request: RecordedRequest) -> dict[str, Any]:
    """As many distinct concepts as the App. H prompt asks for ("list N concepts ...")."""
    match = re.search(r"list (\d+) concepts", request.prompt)
    count = int(match.group(1)) if match else 3
    return {
        "concepts": [
            {"name": f"fake concept {chr(ord('a') + i % 26)}{i}", "rationale": f"varies by country ({i})"}
            for i in range(count)
        ]
    }


def default_responder(request: RecordedRequest) -> Reply:
    """Deterministic answers to this project's Gemini requests, told apart by the response schema."""
    properties = request.schema_properties
    if request.model is None:
        return error_reply(404, f"fake server: no route {request.path}", status_name="NOT_FOUND")
    if "translations" in properties:
        return json_reply(translation_answer(request))
    if {"descriptor_template", "countries"} <= properties:
        return json_reply(forms_answer(request))
    if "concepts" in properties:
        return json_reply(concepts_answer(request))
    if "images" in properties:
        return json_reply(tagging_answer(request))
    return error_reply(400, "fake server: unknown request kind")


def tagging_answer(request: RecordedRequest) -> dict:
    """App. I tagging: every labelled image ("Image N:") is answered with no extra category, so the build's tags are
    each image's own concept, from the Gemini tagger."""
    labels = [part.get("text", "") for part in request.body["contents"][0]["parts"]]
    indexes = [int(m.group(1)) for m in (re.fullmatch(r"Image (\d+):", label) for label in labels) if m]
    return {"images": [{"index": index, "categories": []} for index in indexes]}


class FakeGemini(ScriptedJsonServer[RecordedRequest]):
    """A threaded HTTP server; use as a context manager (or start()/stop()), one per test. Every path is recorded
    and answered (`default_responder` gives unknown routes a 404)."""

    thread_name = "fake-gemini"

    def __init__(self, fallback: Responder = default_responder) -> None:
        super().__init__(RecordedRequest, fallback)
