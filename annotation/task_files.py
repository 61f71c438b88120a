"""Embedded review backend: Label-Studio-importable files, and a completed Label Studio JSON export as input.

The folder gets `tasks.json` (tasks with predictions, importable as is), `label_config.xml`, the images the tasks
reference, and a README that says how to load it into any Label Studio and what to hand back. Re-exporting merges
by item key: tasks already in the file stay as they are and only new ones are appended.
"""

from __future__ import annotations

import json
from pathlib import Path

import fsspec
from pydantic import JsonValue

from annotation.aggregate import MalformedExport
from annotation.label_configs import ReviewSpec
from annotation.tasks import LabelStudioTask

FILES_REVIEWER = "label_studio_files"

README = """# {title}: review files of build `{build_id}`

1. Start Label Studio with `LABEL_STUDIO_LOCAL_FILES_SERVING_ENABLED=true` and
   `LABEL_STUDIO_LOCAL_FILES_DOCUMENT_ROOT={document_root}`.
2. Create a project with the labeling interface in `label_config.xml`; set "Annotations per task" to {annotators}.
3. Add a Local Files source storage with the absolute path `{images}` (do not sync it: the tasks reference
   the images already) and import `tasks.json`.
4. When every task has {annotators} annotations, export the project as JSON and set the build config's
   `review.completed_export` to that file. Rerun the build: it aggregates the votes by majority.
"""


class TaskFiles:
    reviewer = FILES_REVIEWER

    def __init__(
        self,
        folder: str | Path,
        spec: ReviewSpec,
        build_id: str,
        annotators: int,
        document_root: str | Path,
        completed_export: str | None,
    ) -> None:
        self.folder = Path(folder)
        self.spec = spec
        self.build_id = build_id
        self.annotators = annotators
        self.document_root = Path(document_root)
        self.completed_export = completed_export

    @property
    def location(self) -> str:
        return str(self.folder / "tasks.json")

    def export(self, tasks: list[LabelStudioTask]) -> tuple[int, int]:
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / "tasks.json"
        existing: list[LabelStudioTask] = json.loads(path.read_text()) if path.exists() else []
        keys = {t["data"]["item_key"] for t in existing}
        new = [t for t in tasks if t["data"]["item_key"] not in keys]
        if new or not path.exists():
            _write_atomic(path, json.dumps(existing + new, indent=1, ensure_ascii=False))
        _write_atomic(self.folder / "label_config.xml", self.spec.label_config)
        readme = README.format(
            title=self.spec.title,
            build_id=self.build_id,
            document_root=self.document_root.resolve(),
            images=(self.folder / "images").resolve(),
            annotators=self.annotators,
        )
        _write_atomic(self.folder / "README.md", readme)
        return len(new), len(existing) + len(new)

    def snapshot(self) -> list[dict[str, JsonValue]]:
        """The completed export; no export yet means no annotations."""
        if not self.completed_export:
            return []
        try:
            with fsspec.open(self.completed_export, "rb") as handle:
                raw = handle.read()
        except FileNotFoundError:
            raise MalformedExport(f"review.completed_export {self.completed_export} does not exist") from None
        try:
            tasks: list[dict[str, JsonValue]] = json.loads(raw)  # parse_export checks what it is
        except json.JSONDecodeError as exc:
            raise MalformedExport(
                f"review.completed_export {self.completed_export} is not JSON: {exc.msg} at line {exc.lineno}"
            ) from None
        return tasks


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)
