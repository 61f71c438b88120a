"""`manifest.json` as typed models: what a release, a patch or an evaluation result states about itself.

One home for each rule a manifest must keep: a `name` that is a plain token and a semver `version` (both build
paths), file names that stay inside the folder, a sha256 of 64 hex digits and a size for each file, a patch's
parent and takedown records. Readers (`data.publish.integrity.read_manifest`) and writers (`ImmutableFolder.commit`)
both validate through these models, so a malformed manifest is neither read nor published.

The models keep what they are given: extra keys stay (`extra="allow"`), nothing is coerced (strict scalars), and
`model_dump(mode="json", exclude_unset=True)` gives back the object read (the tests check it on every manifest the
builds write).
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    ModelWrapValidatorHandler,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError
from typing_extensions import TypedDict  # pydantic reads a TypedDict from typing_extensions before Python 3.12

from data.publish.format import MANIFEST, SEMVER

#: A benchmark or model name as it appears in a path: no separator, no dot-dot, nothing hidden.
NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
SHA256 = re.compile(r"[0-9a-f]{64}")
_STRICT = ConfigDict(extra="allow", strict=True)


def shown(value: Any) -> str:
    return repr(value)[:80]


def plain_name(value: Any) -> str:
    # fullmatch: `$` would let a trailing newline into a path.
    if not isinstance(value, str) or not NAME.fullmatch(value):
        raise PydanticCustomError("plain_name", "must be a plain name like 3xcm, not {shown}", {"shown": shown(value)})
    return value


def semantic_version(value: Any) -> str:
    if not isinstance(value, str) or not re.fullmatch(SEMVER, value):
        raise PydanticCustomError("semver", "must be a semantic version (X.Y.Z), not {shown}", {"shown": shown(value)})
    return value


def inside(rel: Any) -> bool:
    """Whether `rel` names a file inside the folder: relative, POSIX, no `.` or `..`, not the manifest itself."""
    if not isinstance(rel, str) or not rel or "\\" in rel or "\x00" in rel or rel == MANIFEST:
        return False
    parts = PurePosixPath(rel).parts
    return not PurePosixPath(rel).is_absolute() and ".." not in parts and "." not in parts


def _sha256(value: Any) -> str:
    if not isinstance(value, str) or not SHA256.fullmatch(value):
        raise PydanticCustomError("sha256", "no sha256 of 64 hex digits")
    return value


def _size(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise PydanticCustomError("size", "'bytes' must be a size in bytes")
    return value


PlainName = Annotated[str, BeforeValidator(plain_name)]
SemVer = Annotated[str, BeforeValidator(semantic_version)]
Sha256 = Annotated[str, BeforeValidator(_sha256)]
Size = Annotated[int, BeforeValidator(_size)]


class FileEntry(BaseModel):
    model_config = _STRICT

    sha256: Sha256
    bytes: Size

    @model_validator(mode="before")
    @classmethod
    def _entry(cls, value: Any) -> Any:
        # The messages readers have always given: an entry without a sha256 has "no sha256", one without a size
        # has no size in bytes.
        if not isinstance(value, dict) or "sha256" not in value:
            raise PydanticCustomError("sha256", "no sha256 of 64 hex digits")
        if "bytes" not in value:
            raise PydanticCustomError("size", "'bytes' must be a size in bytes")
        return value


class CodeVersion(BaseModel):
    model_config = _STRICT

    package: StrictStr
    version: StrictStr
    git_commit: StrictStr | None = None
    git_dirty: StrictBool | None = None


class ParentRef(BaseModel):
    """The release a patch was made from, and the sha256 of its manifest as the patch read it."""

    model_config = _STRICT

    version: SemVer
    manifest_sha256: Sha256


class RemovedImage(BaseModel):
    model_config = _STRICT

    image_id: StrictStr
    sha256: StrictStr | None
    url: StrictStr | None
    why: StrictStr
    pixel_sha256: StrictStr | None = None
    final_url: StrictStr | None = None


class TakedownRows(BaseModel):
    """How a takedown changed the rows; `summary` is the changelog's line, the rest is the benchmark's."""

    model_config = _STRICT

    summary: StrictStr


class TakedownRecord(BaseModel):
    """One takedown as a patch's manifest keeps it (`data.takedown.patch.takedown_record`)."""

    model_config = _STRICT

    version: StrictStr
    parent: StrictStr
    date: StrictStr
    reason: StrictStr
    rows: TakedownRows
    removed: list[RemovedImage]
    requested: dict[str, list[StrictStr]] | None = None
    code_version: CodeVersion | None = None

    @model_validator(mode="wrap")
    @classmethod
    def _one_error(cls, value: Any, handler: ModelWrapValidatorHandler[TakedownRecord]) -> TakedownRecord:
        # One line naming the record (`takedowns[i]`), what is wrong inside it in brackets.
        try:
            return handler(value)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = dotted(first["loc"]) or "record"
            raise PydanticCustomError(
                "takedown_record", "not a takedown record ({detail})", {"detail": f"{where}: {first['msg']}"}
            ) from None


class Validation(BaseModel):
    """The release's own check of its rows (3XCM: and whether a patch replayed the balance)."""

    model_config = _STRICT

    summary: StrictStr | None = None
    balance_replayed: StrictBool | None = None


class PackRecord(BaseModel):
    """The reference pack a release was built from (its files are the release's `reference/`)."""

    model_config = _STRICT

    name: StrictStr
    version: StrictStr
    licence: StrictStr
    sha256: Sha256  # over every file's name and content (`ReferencePack.digest`)
    default: StrictBool  # the shipped default pack, byte for byte
    countries: list[StrictStr]
    languages: list[StrictStr]
    regions: list[StrictStr]


class IncompleteOriginal(TypedDict):
    """MixCuBe: an original left out for lack of an accepted swap."""

    original_id: StrictStr
    missing: list[StrictStr]  # the ethnicities without one


class CellBelowTarget(TypedDict):
    """MixCuBe: a culture x category cell with fewer released originals than the build's target."""

    country: StrictStr
    category: StrictStr
    originals: StrictInt
    target: StrictInt


class Provenance(BaseModel):
    """What a build (or a patch) states about how its release was made. Every field is optional: a manifest of an
    older build, or of another benchmark, lacks some; keys not named here stay as given (`model_extra`)."""

    model_config = _STRICT

    build_id: StrictStr | None = None
    code_version: CodeVersion | None = None
    config: dict[str, Any] = {}
    backends: dict[str, Any] = {}
    deviations: list[StrictStr] = []
    reference_data_sha256: StrictStr | None = None
    reference: PackRecord | None = None
    seeds: dict[str, StrictInt | None] = {}
    stage_fingerprints: dict[str, StrictStr | None] = {}
    stage_stats: list[dict[str, Any]] = []
    validation: Validation | None = None
    # A takedown patch: its parent and every takedown so far.
    parent: ParentRef | None = None
    takedowns: list[TakedownRecord] | None = None
    # 3XCM
    review: dict[str, Any] = {}
    reuse: dict[str, dict[str, StrictInt | StrictFloat]] = {}  # per task: candidates_used, max_reuse, mean_reuse
    # MixCuBe
    demo: StrictBool = False
    models: dict[str, Any] = {}
    incomplete: list[IncompleteOriginal] = []
    left_over_by_outcome: dict[str, StrictInt] = {}
    cells_below_target: list[CellBelowTarget] = []
    dropped_before_synthesis: dict[str, dict[str, StrictInt]] = {}  # stage -> reason -> count

    @field_validator("config")
    @classmethod
    def _release_settings(cls, value: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(value.get("release", {}), dict):
            raise PydanticCustomError("release_settings", "'config.release' must be an object")
        return value

    @model_validator(mode="after")
    def _patch(self) -> Provenance:
        if self.takedowns is not None and self.parent is None:
            raise PydanticCustomError(
                "patch", "field 'parent': a patch (it lists takedowns) names its parent {{version, manifest_sha256}}"
            )
        return self

    @property
    def is_patch(self) -> bool:
        return bool(self.takedowns)


def _files(value: Any) -> Any:
    if not isinstance(value, dict):
        raise PydanticCustomError("files", "must map each file to its sha256 and size")
    for rel in value:
        if not inside(rel):
            raise PydanticCustomError(
                "outside", "files[{rel}]: not a relative path inside the release", {"rel": shown(rel)}
            )
    return value


#: Each file of the folder (a relative path inside it) with its sha256 and size.
Files = Annotated[dict[str, FileEntry], BeforeValidator(_files)]


def validation_summary(provenance: Provenance, default: str = "not run") -> str:
    """The release's own check, as its card and RAI texts state it."""
    summary = provenance.validation.summary if provenance.validation is not None else None
    return default if summary is None else summary


class FolderManifest(BaseModel):
    """What every versioned immutable folder's manifest states: its name, version and files."""

    model_config = _STRICT

    name: PlainName
    version: SemVer
    files: Files


class ReleaseManifest(Provenance, FolderManifest):  # this order: name, version and files are checked first
    """A release's (or a patch's) manifest: its files and its build's provenance."""

    mode: Literal["images", "urls"] = "images"


class ResultManifest(FolderManifest):
    """An evaluation result's manifest (`evaluation/results/folder.py`): the release and model it evaluated."""

    code_version: CodeVersion
    model: dict[str, Any]
    release_manifest_sha256: Sha256


class ReassembledManifest(BaseModel):
    """A reassembled 3XCM benchmark's manifest (`flows/xcm/reassembled.py`): no version, the input file names it."""

    model_config = _STRICT

    name: PlainName
    files: Files
    code_version: CodeVersion
    input: dict[str, StrictStr]
    validation: Validation
    reference_data_sha256: StrictStr | None = None
    reference: PackRecord | None = None


def dotted(loc: tuple[int | str, ...]) -> str:
    """A pydantic location as the field's path: `takedowns[0].rows`, `seeds.assembly`."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def first_problem(exc: ValidationError) -> str:
    """The first error of `exc` on one line, naming the field: `field 'seeds.assembly': Input should be ...`."""
    error = exc.errors()[0]
    loc = error["loc"]
    if loc[:1] == ("files",) and len(loc) >= 2:
        return f"files[{shown(loc[1])}]: {error['msg']}"
    if error["type"] == "outside":
        return str(error["msg"])
    where = dotted(loc)
    msg = " ".join(str(error["msg"]).split())[:300]
    if error["type"] in ("plain_name", "semver", "files"):
        return f"field {where!r} {msg}"
    return f"field {where!r}: {msg}" if where else msg


Checked = TypeVar("Checked", bound=BaseModel)


class ManifestError(ValueError):
    """A manifest a writer was about to publish that breaks a rule; the message names the field."""


def validated(model: type[Checked], manifest: dict[str, Any]) -> Checked:
    """`manifest` validated through `model`; ManifestError names the first field that breaks a rule."""
    try:
        return model.model_validate(manifest)
    except ValidationError as exc:
        name = manifest.get("name")
        whose = f" of {shown(name)}" if name is not None else ""
        raise ManifestError(f"{MANIFEST}{whose}: {first_problem(exc)}") from None
