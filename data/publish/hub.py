"""A release folder published to a Hugging Face Hub dataset repository, in one commit tagged with its version.

`publish_release` verifies the folder against its manifest (`data.publish.integrity.verified`), creates the dataset
repository if needed, and compares the release with what the Hub holds, file by file (from the Hub's tree listing:
each file's size and its git blob sha1, or its LFS sha256 for a file the Hub stored in LFS/Xet), so that:

- a version whose tag already holds the release's files is `unchanged`: no commit, no new tag;
- a version whose tag holds other files is refused (`PublishRefused`): a release never changes, and its tag never
  moves;
- otherwise one commit on `main` makes the repository hold exactly the release (every file added, each file a
  previous release had and this one has not deleted; `.gitattributes`, the Hub's own, kept), then the version is
  tagged on it and the tag is read back. A takedown patch is one more version: one more commit and tag on top.

Files go up through the Hub's Git LFS API (`huggingface_hub` asks the Hub which files LFS must hold: binary ones and
those above 10 MB), never through Xet (`lfs_uploads`): LFS is the path the tests run against a local Hub
(`tests/support/fake_hub.py`), and Xet's storage protocol has no local stand-in. Downloads are not concerned.

The token goes to `huggingface_hub` only (its Authorization header): never into a message, a log or a file, and
never over plain http except to a loopback host (`check_endpoint`: a Hub elsewhere must be https://). While it
publishes, `huggingface_hub`'s client follows a redirect only within the origin (scheme, host and port) it was sent to
(`same_origin_redirects`): a Hub, or a man in the middle of a loopback mirror, that answers 307 to another host gets
neither the release's bytes nor a request there. The repository id is checked by the Hub's own rules
(`huggingface_hub.utils.validate_repo_id`: no `--` or `..`, no name that starts or ends with `-` or `.`) before
anything else, so it never fails half-way.

Only the kinds of file a release writer produces are uploaded (`RELEASE_FILE`, and the files of the reference pack
under `reference/`): a manifest that lists anything else
(the Hub's own `.gitattributes`, whose LFS rules it would replace, a script, a dotfile) is refused before the first
call to the Hub, naming the file.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import SplitResult, urlsplit

from data.publish.format import MANIFEST
from data.publish.integrity import ReleaseIntegrityError, file_digest, read_manifest, verify_files
from data.publish.reader import REFERENCE_DIR
from data.reference_files import pack_file_kind
from data.ssrf import is_loopback_host

if TYPE_CHECKING:
    import httpx2
    from huggingface_hub import HfApi

REPO_TYPE = "dataset"
BRANCH = "main"
#: Files the Hub keeps in a repository beside a release (it writes `.gitattributes` when it creates one).
HUB_FILES = frozenset({".gitattributes"})
#: The files a release must hold to be a Hub dataset: its card (the repository's README) and its Croissant record.
REQUIRED = ("README.md", "croissant.json")
_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}$")
#: The Hub `huggingface_hub` talks to when neither --endpoint nor HF_ENDPOINT names one.
DEFAULT_ENDPOINT = "https://huggingface.co"
ENDPOINT_ENV = "HF_ENDPOINT"
#: Every file a release (or a takedown patch) holds, as the writers name them: the card, the manifest and the
#: Croissant record; the Parquet configs (`image_tables.py`, `tables.py`: `<config>/<split>-NNNNN-of-NNNNN`);
#: the WebDataset tars and their features (`image_tables.py`); the figures (`sources.py`, the benchmarks' release
#: writers); the authors' benchmark CSV (`flows/xcm`), MixCuBe's food labels and masks by sha256
#: (`flows/mixcube/release.py`).
#: Nothing else is uploaded: not `.gitattributes` (the Hub's LFS rules), not a dotfile, not a file of another kind.
RELEASE_FILE = re.compile(
    r"README\.md|manifest\.json|croissant\.json"
    r"|[a-z][a-z0-9_]*/[a-z][a-z0-9_]*-\d{5,}-of-\d{5,}\.parquet"
    r"|images/\d{5,}\.tar|images/features\.json"
    r"|figures/[a-z0-9][a-z0-9_-]*\.png"
    r"|benchmarks/[a-z0-9][a-z0-9_-]*\.csv|food_label\.csv"
    r"|masks/[0-9a-f]{64}\.png"
)


def is_release_file(rel: str) -> bool:
    """A file of a kind a release writer produces: `RELEASE_FILE`, or a file of the reference pack it carries."""
    if rel.startswith(f"{REFERENCE_DIR}/"):
        return pack_file_kind(rel.removeprefix(f"{REFERENCE_DIR}/")) is not None
    return RELEASE_FILE.fullmatch(rel) is not None


class PublishInputError(ValueError):
    """A publication that cannot start: no token, a repository id that is not ORG/NAME, a folder without its card."""


class PublishRefused(RuntimeError):
    """The Hub cannot take the release: its version is tagged on other files, or the Hub refused a call."""


class RedirectRefused(PublishRefused):
    """The Hub answered a redirect to another origin (scheme, host or port): not followed."""


@dataclass(frozen=True)
class RemoteFile:
    size: int
    blob_id: str  # git blob sha1
    lfs_sha256: str | None  # the content's sha256, for a file stored in LFS/Xet


@dataclass(frozen=True)
class LocalFile:
    size: int
    sha256: str
    blob_id: str


@dataclass(frozen=True)
class PublishResult:
    status: Literal["created", "unchanged"]
    repo_id: str
    tag: str
    commit: str

    def line(self) -> str:
        return f"{self.status}: {self.repo_id} tag {self.tag} at commit {self.commit}"


def _shown(parts: SplitResult) -> str:
    """The endpoint without its user or password, for a message."""
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    port = f":{parts.port}" if parts.port is not None else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


def check_endpoint(endpoint: str, option: str = "--endpoint") -> str:
    """The Hub's URL (no trailing slash) if the token may be sent to it: https://, or plain http:// to a loopback
    host (127.0.0.0/8, ::1, localhost: a test Hub, a mirror on this machine); PublishInputError naming `option`
    otherwise. Plain http:// to another host would carry `Authorization: Bearer hf_...` in clear."""
    try:
        parts = urlsplit(endpoint.strip())
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in range
    except ValueError:
        raise PublishInputError(f"{option} is not a URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise PublishInputError(f"{option} is not an http(s) URL with a host (e.g. {DEFAULT_ENDPOINT})")
    shown = _shown(parts)
    if parts.username is not None or parts.password is not None:
        raise PublishInputError(f"{option} {shown}: holds a user or password; the token is the only credential sent")
    if parts.query or parts.fragment:
        raise PublishInputError(f"{option} {shown}: has a query or fragment; name the Hub's base URL only")
    if parts.scheme == "http" and not is_loopback_host(parts.hostname):
        raise PublishInputError(
            f"{option} {shown}: plain http:// would send the Hub token in clear; use https:// "
            "(http:// is accepted for a loopback host only: 127.0.0.0/8, ::1, localhost)"
        )
    return endpoint.strip().rstrip("/")


def resolve_endpoint(endpoint: str | None) -> str:
    """`endpoint` (from --endpoint), else HF_ENDPOINT, else the public Hub: checked (`check_endpoint`), naming the
    option or variable it came from."""
    if endpoint:
        return check_endpoint(endpoint, "--endpoint")
    from_env = os.environ.get(ENDPOINT_ENV, "").strip()
    return check_endpoint(from_env, ENDPOINT_ENV) if from_env else DEFAULT_ENDPOINT


def check_repo_id(repo_id: str) -> str:
    """`repo_id` if it is ORG/NAME by the Hub's rules (those `huggingface_hub` checks before any call); otherwise
    PublishInputError, before a request is made."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    if not _REPO_ID.fullmatch(repo_id) or ".." in repo_id or repo_id.endswith((".git", ".")):
        raise PublishInputError(f"--repo-id {repo_id!r} is not ORG/NAME (letters, digits, '-', '_', '.')")
    try:
        validate_repo_id(repo_id)
    except HFValidationError as exc:
        rule = " ".join(str(exc).split()).split(":", 1)[0]  # the rule broken, without the id echoed again
        raise PublishInputError(
            f"--repo-id {repo_id!r} is not a Hub repository id ({rule}); ORG/NAME of letters, digits, '-', '_', '.'"
        ) from None
    return repo_id


def git_blob_sha1(path: Path) -> str:
    """The file's git blob id, as the Hub lists a regular (non-LFS) file."""
    digest = hashlib.sha1(f"blob {path.stat().st_size}\0".encode())
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def local_files(folder: Path) -> tuple[str, str, dict[str, LocalFile]]:
    """The release's name, version and files (those its manifest lists, and the manifest): each of a kind a release
    holds (checked first: before a byte is hashed), then verified."""
    manifest = read_manifest(folder)
    for rel in sorted(manifest.files):
        if rel in HUB_FILES:
            raise PublishInputError(
                f"{folder / MANIFEST}: lists {rel}, the Hub's own file (its LFS rules); a release never replaces it"
            )
        if not is_release_file(rel):
            raise PublishInputError(
                f"{folder / MANIFEST}: lists {rel!r}, which is not a file a release holds (card, manifest, Croissant, "
                "Parquet configs, image tars, figures, benchmark CSVs, masks, reference pack); nothing was uploaded"
            )
    problems = verify_files(manifest)  # what `verified` does, on the manifest just checked (read once)
    if problems:
        raise ReleaseIntegrityError(folder, problems)
    missing = [name for name in REQUIRED if name not in manifest.files]
    if missing:
        raise PublishInputError(f"{folder}: no {', '.join(missing)}; a Hub dataset needs its card and Croissant record")
    files = {
        rel: LocalFile(entry.bytes, entry.sha256, git_blob_sha1(folder / rel)) for rel, entry in manifest.files.items()
    }
    path = folder / MANIFEST
    files[MANIFEST] = LocalFile(path.stat().st_size, file_digest(path), git_blob_sha1(path))
    return manifest.name, manifest.version, files


def differences(local: dict[str, LocalFile], remote: dict[str, RemoteFile]) -> list[str]:
    """Each file that differs between the release and a revision on the Hub (the Hub's own files aside)."""
    problems = []
    for rel in sorted((set(local) | set(remote)) - HUB_FILES):
        mine, theirs = local.get(rel), remote.get(rel)
        if theirs is None:
            problems.append(f"{rel} is not on the Hub")
        elif mine is None:
            problems.append(f"{rel} is on the Hub only")
        elif mine.size != theirs.size or (
            theirs.lfs_sha256 != mine.sha256 if theirs.lfs_sha256 else theirs.blob_id != mine.blob_id
        ):
            problems.append(f"{rel} has other bytes on the Hub")
    return problems


@contextmanager
def hub_errors(what: str) -> Iterator[None]:
    """The Hub's and the network's errors as one PublishRefused line (status and the server's message)."""
    import httpx2  # huggingface_hub's HTTP client
    from huggingface_hub.errors import HfHubHTTPError

    def refused(exc: HfHubHTTPError, doing: str) -> PublishRefused:
        status = exc.response.status_code if exc.response is not None else "?"
        detail = " ".join((exc.server_message or "").split())[:300]
        try:  # a request to the Hub's storage (a signed URL) carries no token: the hint is not for it
            sent_token = "authorization" in exc.response.request.headers
        except (AttributeError, RuntimeError):  # httpx raises RuntimeError for a response without its request
            sent_token = True
        hint = "; check the token and its write access" if status in (401, 403) and sent_token else ""
        return PublishRefused(f"the Hub refused to {doing}: HTTP {status}" + (f": {detail}" if detail else "") + hint)

    try:
        yield
    except HfHubHTTPError as exc:
        raise refused(exc, what) from None
    except httpx2.HTTPError as exc:
        raise PublishRefused(f"cannot reach the Hub to {what}: {type(exc).__name__}") from None
    except ValueError as exc:  # huggingface_hub's own checks (a card whose metadata the Hub rejects)
        raise PublishRefused(f"cannot {what}: {' '.join(str(exc).split())[:300]}") from None
    except PublishRefused:
        raise
    except RuntimeError as exc:  # an LFS upload: "Error while uploading 'PATH'", the HTTP error as its cause
        cause = exc.__cause__
        if isinstance(cause, PublishRefused):  # a redirect refused during an upload
            raise cause from None
        doing = f"{what} ({' '.join(str(exc).split())[:200]})"
        if isinstance(cause, HfHubHTTPError):
            raise refused(cause, doing) from None
        if isinstance(cause, httpx2.HTTPError):
            raise PublishRefused(f"cannot reach the Hub's storage to {doing}: {type(cause).__name__}") from None
        raise


def _origin(url: httpx2.URL) -> tuple[str, str, int | None]:
    return url.scheme, url.host.lower(), url.port or {"http": 80, "https": 443}.get(url.scheme)


def _shown_origin(url: httpx2.URL) -> str:
    return f"{url.scheme}://{url.host}" + (f":{url.port}" if url.port else "")


def refuse_cross_origin_redirect(response: httpx2.Response) -> None:
    """An httpx response hook: a redirect to another origin than the request's raises `RedirectRefused` before the
    client follows it (httpx would re-send a 307's body there, and huggingface_hub's client follows every redirect)."""
    import httpx2

    if not response.has_redirect_location:
        return
    sent = response.request.url
    try:
        target = sent.join(response.headers["Location"])
        where = _shown_origin(target) if _origin(target) != _origin(sent) else None
    except (httpx2.InvalidURL, ValueError):  # an unusable Location is not followed either
        where = "an unusable Location"
    if where is not None:
        raise RedirectRefused(
            f"the Hub at {_shown_origin(sent)} answered {response.request.method} {sent.path[:100]} with HTTP "
            f"{response.status_code} to {where}, another origin: not followed (the token and the release go to the "
            "Hub only)"
        )


@contextmanager
def same_origin_redirects() -> Iterator[None]:
    """For the length of the block, `huggingface_hub`'s shared HTTP client (made by its client factory) refuses a
    redirect to another origin (`refuse_cross_origin_redirect`); the factory it had is put back afterwards (a
    download, `snapshot_download`, follows the Hub's redirects to its storage as before)."""
    from huggingface_hub.utils import _http, set_client_factory

    previous: Callable[[], Any] = getattr(_http, "_GLOBAL_CLIENT_FACTORY", _http.default_client_factory)

    def guarded() -> Any:
        client = previous()
        hooks = client.event_hooks
        client.event_hooks = {**hooks, "response": [*hooks.get("response", []), refuse_cross_origin_redirect]}
        return client

    set_client_factory(guarded)
    try:
        yield
    finally:
        set_client_factory(previous)


@contextmanager
def lfs_uploads() -> Iterator[None]:
    """For the length of the block, `huggingface_hub` uploads through the LFS batch API, not Xet (which it picks
    whenever `hf_xet` is installed, as it is here), and draws no progress bars (the command prints one line). It reads
    HF_HUB_DISABLE_XET once, at import: the constant `is_xet_available` reads at each upload is what is set, and
    restored afterwards."""
    from huggingface_hub import constants
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    xet_was_off, bars_were_off = constants.HF_HUB_DISABLE_XET, are_progress_bars_disabled()
    constants.HF_HUB_DISABLE_XET = True
    disable_progress_bars()
    try:
        yield
    finally:
        constants.HF_HUB_DISABLE_XET = xet_was_off
        if not bars_were_off:
            enable_progress_bars()


def remote_files(api: HfApi, repo_id: str, revision: str) -> dict[str, RemoteFile]:
    from huggingface_hub import RepoFile

    with hub_errors(f"list the files of {repo_id} at {revision}"):
        return {
            entry.path: RemoteFile(
                entry.lfs.size if entry.lfs else entry.size, entry.blob_id, entry.lfs.sha256 if entry.lfs else None
            )
            for entry in api.list_repo_tree(repo_id, recursive=True, revision=revision, repo_type=REPO_TYPE)
            if isinstance(entry, RepoFile)
        }


def commit_release(
    api: HfApi,
    repo_id: str,
    folder: Path,
    local: dict[str, LocalFile],
    head: tuple[str, dict[str, RemoteFile]] | None,
    message: str,
) -> str:
    """One commit on `main` (on top of `head`: its commit and files) after which it holds exactly the release and the
    Hub's own files."""
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete

    stale = set(head[1]) - set(local) - HUB_FILES if head else set()
    operations: list[CommitOperationAdd | CommitOperationDelete] = [
        CommitOperationAdd(path_in_repo=rel, path_or_fileobj=folder / rel) for rel in sorted(local)
    ]
    operations += [CommitOperationDelete(path_in_repo=rel) for rel in sorted(stale)]
    with hub_errors(f"commit to {repo_id}"), lfs_uploads():
        info = api.create_commit(
            repo_id,
            operations,
            commit_message=message,
            repo_type=REPO_TYPE,
            revision=BRANCH,
            parent_commit=head[0] if head else None,
        )
    return str(info.oid)


def tagged_release(
    api: HfApi, repo_id: str, folder: Path, local: dict[str, LocalFile], version: str, tags: dict[str, str]
) -> PublishResult | None:
    """`unchanged` if the version's tag holds the release already, None if there is no such tag; PublishRefused if
    it holds other files."""
    if version not in tags:
        return None
    problems = differences(local, remote_files(api, repo_id, tags[version]))
    if problems:
        raise PublishRefused(
            f"{repo_id}: tag {version} already holds other files than {folder} ({'; '.join(problems[:3])}"
            f"{'; ...' if len(problems) > 3 else ''}); a published version never changes: publish a new version"
        )
    return PublishResult("unchanged", repo_id, version, tags[version])


@dataclass(frozen=True)
class PublishPreview:
    """What `publish_release` would do, read from the release and the Hub without writing anything."""

    repo_id: str
    endpoint: str
    name: str
    version: str
    status: Literal["new", "unchanged"]  # unchanged: the version's tag holds the release already
    repository: Literal["new", "existing"]
    files: int
    total_bytes: int
    changes: tuple[str, ...]  # how `main` differs from the release: what the commit would change


def preview_release(folder: Path, repo_id: str, token: str, endpoint: str | None = None) -> PublishPreview:
    """The release verified (as `publish_release` does first) and compared with what the Hub holds: its version's tag
    (refused if it holds other files, as `publish_release` would be), else `main`. Nothing is written."""
    from huggingface_hub import HfApi

    check_repo_id(repo_id)
    hub = resolve_endpoint(endpoint)
    name, version, local = local_files(folder)
    with same_origin_redirects():
        return _preview(HfApi(endpoint=hub, token=token), hub, repo_id, folder, name, version, local)


def _preview(
    api: HfApi, hub: str, repo_id: str, folder: Path, name: str, version: str, local: dict[str, LocalFile]
) -> PublishPreview:
    from huggingface_hub.errors import RepositoryNotFoundError

    with hub_errors(f"list the branches and tags of {repo_id}"):
        try:
            refs = api.list_repo_refs(repo_id, repo_type=REPO_TYPE)
        except RepositoryNotFoundError:
            refs = None  # publish_release creates it
    tags = {ref.name: ref.target_commit for ref in refs.tags} if refs else {}
    main = next((ref.target_commit for ref in refs.branches if ref.name == BRANCH), None) if refs else None
    unchanged = tagged_release(api, repo_id, folder, local, version, tags)
    changes = () if unchanged else tuple(differences(local, remote_files(api, repo_id, main) if main else {}))
    return PublishPreview(
        repo_id,
        hub,
        name,
        version,
        "unchanged" if unchanged else "new",
        "existing" if refs else "new",
        len(local),
        sum(file.size for file in local.values()),
        changes,
    )


def publish_release(
    folder: Path, repo_id: str, token: str, endpoint: str | None = None, private: bool | None = None
) -> PublishResult:
    """Publish the release `folder` to the dataset repository `repo_id`, tagged with its version (see the module)."""
    from huggingface_hub import HfApi

    check_repo_id(repo_id)
    hub = resolve_endpoint(endpoint)  # explicit: huggingface_hub would otherwise read HF_ENDPOINT unchecked
    name, version, local = local_files(folder)
    with same_origin_redirects():
        return _publish(HfApi(endpoint=hub, token=token), repo_id, folder, name, version, local, private)


def _publish(
    api: HfApi,
    repo_id: str,
    folder: Path,
    name: str,
    version: str,
    local: dict[str, LocalFile],
    private: bool | None,
) -> PublishResult:
    with hub_errors(f"create the dataset repository {repo_id}"):
        api.create_repo(repo_id, repo_type=REPO_TYPE, private=private, exist_ok=True)
    with hub_errors(f"list the branches and tags of {repo_id}"):
        refs = api.list_repo_refs(repo_id, repo_type=REPO_TYPE)
    tags = {ref.name: ref.target_commit for ref in refs.tags}
    unchanged = tagged_release(api, repo_id, folder, local, version, tags)
    if unchanged is not None:
        return unchanged
    main = next((ref.target_commit for ref in refs.branches if ref.name == BRANCH), None)
    head = (main, remote_files(api, repo_id, main)) if main is not None else None
    if head is not None and not differences(local, head[1]):
        commit = head[0]  # `main` holds the release already (a run stopped before its tag): tag it as it is
    else:
        commit = commit_release(api, repo_id, folder, local, head, f"{name} {version}")
    with hub_errors(f"tag {repo_id} with {version}"):
        api.create_tag(repo_id, tag=version, revision=commit, tag_message=f"{name} {version}", repo_type=REPO_TYPE)
    problems = differences(local, remote_files(api, repo_id, version))
    if problems:
        raise PublishRefused(f"{repo_id}: tag {version} does not hold the release after publishing: {problems[0]}")
    return PublishResult("created", repo_id, version, commit)
