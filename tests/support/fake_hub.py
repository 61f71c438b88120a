"""A fake Hugging Face Hub on 127.0.0.1: exactly the HTTP calls `huggingface_hub` (2.4) makes to publish a dataset
and download it back (`snapshot_download`, and `datasets.load_dataset` through `HfFileSystem`), over an in-memory
git-like store with Git LFS, for `culturebench publish`'s tests.

The store: per repository, commits (each with its parent, message and every file by path: its bytes, and whether
git holds them or an LFS pointer to them), branches, tags and the repository's LFS objects (by sha256). Creating a
repository makes its first commit on `main`, holding `.gitattributes`, as the Hub does.

Which files go to LFS is the Hub's rule, answered by `preupload`: a path an LFS rule of the branch's `.gitattributes`
matches, a file above 10 MB (`LFS_SIZE_THRESHOLD`), or a binary one (its first 512 bytes, the `sample` the client
sends, hold a NUL byte or are not UTF-8). A commit that sends such a file inline is refused, as the Hub refuses
binary files outside LFS. No Xet: the Xet routes (`xet-write-token`, ...) are unknown here (404), so the client must
upload through the LFS batch API (`HF_HUB_DISABLE_XET`, which `data.publish.hub` sets for its calls).

Two servers: the Hub, and its object storage (the S3/CDN stand-in, another port, so another origin: the client sends
it no Authorization header). Storage URLs carry an HMAC signature of what they allow, as presigned URLs do.

Hub routes (`<repo>` is `ORG/NAME`, `<rev>` a branch, a tag or a commit id, URL-quoted as the client sends it):

    POST /api/repos/create                         create a repository; 409 (with its url) when it exists
    POST /api/validate-yaml                        the card's YAML front matter must parse as a mapping
    GET  /api/datasets/<repo>[/revision/<rev>]     repository info: the commit `sha` and `siblings`
    GET  /api/datasets/<repo>/refs                 branches and tags
    GET  /api/datasets/<repo>/tree/<rev>[/<dir>]   files (`oid`: git blob sha1, of the pointer for an LFS file;
                                                   `size`; `lfs`: {oid: sha256, size, pointerSize}) and folders
    POST /api/datasets/<repo>/paths-info/<rev>     the same entries for the form's `paths` (those that exist)
    POST /api/datasets/<repo>/preupload/<rev>      each file's `uploadMode` (`lfs` or `regular`, the rule above),
                                                   and the `oid` of the file at that path: sha256 if LFS, else sha1
    POST /datasets/<repo>.git/info/lfs/objects/batch   LFS batch API (upload): per object, nothing when the
                                                   repository holds it, else an `upload` action (a signed storage
                                                   URL; several part URLs and a `chunk_size` above
                                                   `multipart_threshold`) and a `verify` action
    POST /datasets/<repo>.git/info/lfs/objects/verify  the uploaded bytes' sha256 and size checked: the object
                                                   becomes the repository's
    POST /datasets/<repo>.git/info/lfs/objects/complete/<oid>?sig=...  a multipart upload's parts joined, by
                                                   their ETags (signed: the client sends no token here)
    POST /api/datasets/<repo>/commit/<rev>         an ndjson commit: a `header` line (and `parentCommit`, checked
                                                   against the branch head), then `file` (base64; refused for a
                                                   file LFS must hold), `lfsFile` (sha256 and size of a verified
                                                   object), `deletedFile` and `deletedFolder` lines
    POST /api/datasets/<repo>/tag/<rev>            tag a revision; 409 when the tag exists
    HEAD|GET /datasets/<repo>/resolve/<rev>/<path> a git file's bytes (Range honoured), with X-Repo-Commit and
                                                   ETag; an LFS file: 302 to a signed storage URL, with
                                                   X-Linked-Etag (sha256) and X-Linked-Size

Storage routes: `PUT /upload/<repo>/<oid>[/<part>]?sig=...` (an object or one part, ETag: its md5) and
`HEAD|GET /objects/<repo>/<oid>?sig=...` (Range honoured).

Everything else is answered 404 (an unknown route) or 400 (a request it does not understand), with a message, so a
test passing against it proves which calls were made; `calls` lists each request as `METHOD route-name`. Writes,
and reads of a private repository, need `Authorization: Bearer <token>` with the server's token (401 otherwise);
`authorizations` keeps every Authorization header the Hub received, `storage_authorizations` those the storage did
(none, when the client keeps the token on the Hub), `uploads` the sha256 of every object stored by a PUT; a test sets
`storage_refuses` to have every PUT to the storage refused (403).

A hostile Hub: `redirects` maps a request path to a `Location`; the next request for that path is answered
`redirect_status` (307: the client re-sends the body) with it instead of being routed. `TrapServer`, on another
loopback address (127.0.0.2) or port, stands for the host a redirect points to: it records every connection and
request made to it.
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import hmac
import json
import os
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

import pytest
import yaml

GITATTRIBUTES = b"*.parquet filter=lfs diff=lfs merge=lfs -text\n*.tar filter=lfs diff=lfs merge=lfs -text\n"
#: The Hub stores files above 10 MB in LFS whatever `.gitattributes` says (its upload docs: "files larger than 10MB").
LFS_SIZE_THRESHOLD = 10 * 1000 * 1000
LFS_POINTER = "version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize {size}\n"
LFS_JSON = "application/vnd.git-lfs+json"


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def is_binary(sample: bytes) -> bool:
    """A NUL byte (git's own test), or bytes that are not UTF-8 (a character cut at the sample's end aside)."""
    if b"\0" in sample:
        return True
    try:
        sample.decode("utf-8")
    except UnicodeDecodeError as exc:
        return not (exc.reason == "unexpected end of data" and exc.start >= len(sample) - 3)
    return False


def lfs_patterns(gitattributes: bytes) -> list[str]:
    """The patterns `.gitattributes` puts through the LFS filter."""
    patterns = []
    for line in gitattributes.decode("utf-8", "replace").splitlines():
        fields = line.split()
        if fields and not fields[0].startswith("#") and "filter=lfs" in fields[1:]:
            patterns.append(fields[0])
    return patterns


def matches(pattern: str, path: str) -> bool:
    """gitattributes matching, as far as the Hub's default rules need: a pattern without a slash matches the file's
    name at any depth, one with a slash the whole path from the root."""
    if "/" not in pattern.strip("/"):
        return fnmatch.fnmatchcase(path.rsplit("/", 1)[-1], pattern)
    return fnmatch.fnmatchcase(path, pattern.lstrip("/"))


@dataclass(frozen=True)
class Blob:
    """A file at a commit: its bytes, held by git or (an LFS file) by a pointer to the repository's object."""

    data: bytes
    lfs: bool

    @cached_property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @cached_property
    def pointer(self) -> bytes:
        return LFS_POINTER.format(oid=self.sha256, size=len(self.data)).encode()

    @cached_property
    def blob_id(self) -> str:
        """The git blob id: of the bytes, or of the pointer git holds for an LFS file."""
        return git_blob_sha1(self.pointer if self.lfs else self.data)


@dataclass
class Commit:
    oid: str
    parent: str | None
    message: str
    files: dict[str, Blob]


@dataclass
class Repo:
    repo_id: str
    private: bool
    commits: dict[str, Commit] = field(default_factory=dict)
    branches: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    lfs: dict[str, bytes] = field(default_factory=dict)  # verified LFS objects by sha256
    staged: dict[str, bytes] = field(default_factory=dict)  # uploaded, not verified yet
    parts: dict[str, dict[int, bytes]] = field(default_factory=dict)  # multipart uploads in progress

    def commit(self, parent: str | None, message: str, files: dict[str, Blob]) -> Commit:
        listing = json.dumps(
            {"parent": parent, "message": message, "files": {p: b.blob_id for p, b in sorted(files.items())}}
        )
        oid = hashlib.sha1(f"{listing}{len(self.commits)}".encode()).hexdigest()
        made = Commit(oid, parent, message, dict(files))
        self.commits[oid] = made
        return made

    def resolve(self, rev: str) -> Commit | None:
        oid = self.branches.get(rev) or self.tags.get(rev) or rev
        return self.commits.get(oid)


class HubError(Exception):
    def __init__(self, status: int, message: str, code: str | None = None, extra: dict[str, Any] | None = None):
        super().__init__(message)
        self.status, self.message, self.code, self.extra = status, message, code, extra or {}


Answer = tuple[int, dict[str, str], bytes]  # a raw answer: status, headers, body


class FakeHub:
    """The Hub and its storage; `start()` listens on two ephemeral ports of 127.0.0.1, `endpoint` is the Hub's URL.

    `multipart_threshold`: objects above it are uploaded in parts of that many bytes (None: one PUT each)."""

    def __init__(self, token: str, multipart_threshold: int | None = None) -> None:
        self.token = token
        self.multipart_threshold = multipart_threshold
        self.repos: dict[tuple[str, str], Repo] = {}
        self.calls: list[str] = []
        self.commits_made: Counter[str] = Counter()  # repo id -> commits made through the commit route
        self.authorizations: list[str] = []
        self.storage_authorizations: list[str] = []
        self.uploads: list[str] = []  # sha256 of each object a PUT (or a multipart completion) stored
        self.storage_refuses = False  # a test sets it: every PUT to the storage is answered 403 (an expired URL)
        self.redirects: dict[str, str] = {}  # a test sets it: path -> Location, answered once (see the module)
        self.redirect_status = 307
        self._secret = os.urandom(16)
        self._lock = threading.Lock()
        self._servers: list[ThreadingHTTPServer] = []
        self._threads: list[threading.Thread] = []

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._servers[0].server_address[1]}"

    @property
    def storage(self) -> str:
        return f"http://127.0.0.1:{self._servers[1].server_address[1]}"

    def start(self) -> FakeHub:
        for name, handle in (("fake-hub", self._handle), ("fake-hub-storage", self._handle_storage)):
            server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(handle))
            thread = threading.Thread(target=server.serve_forever, name=name, daemon=True)
            thread.start()
            self._servers.append(server)
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()
        for thread in self._threads:
            thread.join(timeout=10)

    # -- what tests read ------------------------------------------------------------------------------------------

    def repo(self, repo_id: str) -> Repo:
        return self.repos[("dataset", repo_id)]

    def files_at(self, repo_id: str, rev: str) -> dict[str, bytes]:
        found = self.repo(repo_id).resolve(rev)
        assert found is not None, f"no revision {rev}"
        return {path: blob.data for path, blob in found.files.items()}

    def lfs_paths(self, repo_id: str, rev: str) -> set[str]:
        """The files LFS holds at `rev`."""
        found = self.repo(repo_id).resolve(rev)
        assert found is not None, f"no revision {rev}"
        return {path for path, blob in found.files.items() if blob.lfs}

    def needs_lfs(self, gitattributes: bytes, path: str, size: int, sample: bytes) -> bool:
        """The Hub's rule for a file at `path` (see the module)."""
        return (
            any(matches(p, path) for p in lfs_patterns(gitattributes))
            or size > LFS_SIZE_THRESHOLD
            or is_binary(sample[:512])
        )

    # -- HTTP -----------------------------------------------------------------------------------------------------

    def _handle(self, request: BaseHTTPRequestHandler, method: str) -> None:
        url = urlsplit(request.path)
        body = _body(request)
        auth = request.headers.get("Authorization")
        if auth:
            self.authorizations.append(auth)
        authorized = auth == f"Bearer {self.token}"
        with self._lock:
            location = self.redirects.pop(url.path, None)
            if location is not None:
                self.calls.append(f"{method} {url.path} -> {self.redirect_status}")
        if location is not None:
            _send(request, method, (self.redirect_status, {"Location": location}, b""))
            return
        try:
            with self._lock:
                name, result = self._route(method, url.path, parse_qs(url.query), body, authorized, request)
                self.calls.append(f"{method} {name}")
            if isinstance(result, tuple):
                answer: Answer = result
            else:
                content_type = LFS_JSON if name.startswith("lfs-") else "application/json"
                answer = (200, {"Content-Type": content_type}, json.dumps(result).encode())
        except HubError as exc:
            self.calls.append(f"{method} {url.path} -> {exc.status}")
            answer = _error(exc)
        _send(request, method, answer)

    def _handle_storage(self, request: BaseHTTPRequestHandler, method: str) -> None:
        url = urlsplit(request.path)
        body = _body(request)
        auth = request.headers.get("Authorization")
        if auth:
            self.storage_authorizations.append(auth)
        try:
            with self._lock:
                name, answer = self._storage_route(method, url.path, parse_qs(url.query), body, request)
                self.calls.append(f"{method} {name}")
        except HubError as exc:
            self.calls.append(f"{method} storage {url.path} -> {exc.status}")
            answer = _error(exc)
        _send(request, method, answer)

    def _route(
        self,
        method: str,
        path: str,
        query: dict[str, list[str]],
        body: bytes,
        authorized: bool,
        request: BaseHTTPRequestHandler,
    ) -> tuple[str, Any]:
        parts = [unquote(p) for p in path.split("/")[1:]]
        if method == "POST" and parts == ["api", "repos", "create"]:
            return "create-repo", self._create_repo(_json(body), authorized)
        if method == "POST" and parts == ["api", "validate-yaml"]:
            return "validate-yaml", self._validate_yaml(_json(body))
        if len(parts) >= 4 and parts[:2] == ["api", "datasets"]:
            repo = self._readable(f"{parts[2]}/{parts[3]}", authorized)
            action, rest = (parts[4], parts[5:]) if len(parts) > 4 else ("", [])
            if method == "GET" and action == "" and not rest:
                return "repo-info", self._info(repo, "main")
            if method == "GET" and action == "revision" and len(rest) == 1:
                return "repo-info", self._info(repo, rest[0])
            if method == "GET" and action == "refs" and not rest:
                return "list-refs", self._refs(repo)
            if method == "GET" and action == "tree" and rest:
                return "list-tree", self._tree(repo, rest[0], "/".join(rest[1:]), query)
            if method == "POST" and action == "paths-info" and len(rest) == 1:
                return "paths-info", self._paths_info(repo, rest[0], body)
            if method == "POST" and action in {"preupload", "commit", "tag"} and len(rest) == 1:
                _require(authorized)
                if action == "preupload":
                    return "preupload", self._preupload(repo, rest[0], _json(body))
                if action == "commit":
                    return "commit", self._commit(repo, rest[0], body, query)
                return "create-tag", self._tag(repo, rest[0], _json(body))
        if (
            method == "POST"
            and len(parts) >= 7
            and parts[0] == "datasets"
            and parts[2].endswith(".git")
            and parts[3:6] == ["info", "lfs", "objects"]
        ):
            repo_id = f"{parts[1]}/{parts[2].removesuffix('.git')}"
            if parts[6] == "complete" and len(parts) == 8:
                repo = self._existing(repo_id)  # signed: the client sends no token with a completion
                return "lfs-complete", self._complete(repo, parts[7], query, body)
            repo = self._readable(repo_id, authorized)
            _require(authorized)
            if parts[6:] == ["batch"]:
                return "lfs-batch", self._batch(repo, _json(body), request)
            if parts[6:] == ["verify"]:
                return "lfs-verify", self._verify(repo, _json(body))
        if method in {"GET", "HEAD"} and len(parts) >= 6 and parts[0] == "datasets" and parts[3] == "resolve":
            repo = self._readable(f"{parts[1]}/{parts[2]}", authorized)
            return "resolve", self._resolve(repo, parts[4], "/".join(parts[5:]), request)
        raise HubError(404, f"fake hub: no route for {method} {path}")

    def _existing(self, repo_id: str) -> Repo:
        repo = self.repos.get(("dataset", repo_id))
        if repo is None:
            raise HubError(404, "Repository not found", "RepoNotFound")
        return repo

    def _readable(self, repo_id: str, authorized: bool) -> Repo:
        repo = self.repos.get(("dataset", repo_id))
        if repo is None or (repo.private and not authorized):
            raise HubError(404, "Repository not found", "RepoNotFound")
        return repo

    def _commit_of(self, repo: Repo, rev: str) -> Commit:
        found = repo.resolve(rev)
        if found is None:
            raise HubError(404, f"Invalid rev id: {rev}", "RevisionNotFound")
        return found

    def _create_repo(self, payload: dict[str, Any], authorized: bool) -> dict[str, Any]:
        _require(authorized)
        known = {"name", "organization", "type", "visibility", "private"}
        if set(payload) - known or payload.get("type") != "dataset" or not payload.get("organization"):
            raise HubError(400, f"fake hub: cannot create {payload!r} (a dataset in an organization only)")
        repo_id = f"{payload['organization']}/{payload['name']}"
        url = f"{self.endpoint}/datasets/{repo_id}"
        if ("dataset", repo_id) in self.repos:
            raise HubError(409, "You already created this dataset repo", extra={"url": url})
        visibility = payload.get("visibility") or ("private" if payload.get("private") else "public")
        if visibility not in {"public", "private"}:
            raise HubError(400, f"fake hub: unknown visibility {visibility!r}")
        repo = Repo(repo_id, private=visibility == "private")
        first = repo.commit(None, "initial commit", {".gitattributes": Blob(GITATTRIBUTES, lfs=False)})
        repo.branches["main"] = first.oid
        self.repos[("dataset", repo_id)] = repo
        return {"url": url, "name": repo_id, "id": repo_id}

    def _validate_yaml(self, payload: dict[str, Any]) -> dict[str, Any]:
        content = payload.get("content")
        if not isinstance(content, str) or payload.get("repoType") != "dataset":
            raise HubError(400, "fake hub: validate-yaml wants a dataset card's content")
        if content.startswith("---\n"):
            front, _, _ = content[4:].partition("\n---")
            try:
                meta = yaml.safe_load(front)
            except yaml.YAMLError as exc:
                raise HubError(400, "invalid YAML", extra={"errors": [{"message": str(exc)}]}) from None
            if not isinstance(meta, dict):
                raise HubError(400, "metadata is not a mapping", extra={"errors": [{"message": "not a mapping"}]})
        return {"errors": [], "warnings": []}

    def _info(self, repo: Repo, rev: str) -> dict[str, Any]:
        head = self._commit_of(repo, rev)
        return {
            "id": repo.repo_id,
            "sha": head.oid,
            "private": repo.private,
            "siblings": [{"rfilename": p} for p in sorted(head.files)],
        }

    def _refs(self, repo: Repo) -> dict[str, Any]:
        def ref(name: str, kind: str, oid: str) -> dict[str, str]:
            return {"name": name, "ref": f"refs/{kind}/{name}", "targetCommit": oid}

        return {
            "branches": [ref(n, "heads", o) for n, o in sorted(repo.branches.items())],
            "converts": [],
            "tags": [ref(n, "tags", o) for n, o in sorted(repo.tags.items())],
        }

    @staticmethod
    def _file_entry(path: str, blob: Blob) -> dict[str, Any]:
        entry: dict[str, Any] = {"type": "file", "path": path, "size": len(blob.data), "oid": blob.blob_id}
        if blob.lfs:
            entry["lfs"] = {"oid": blob.sha256, "size": len(blob.data), "pointerSize": len(blob.pointer)}
        return entry

    @staticmethod
    def _folder_entry(path: str) -> dict[str, Any]:
        return {"type": "directory", "path": path, "oid": hashlib.sha1(path.encode()).hexdigest(), "size": 0}

    def _tree(self, repo: Repo, rev: str, under: str, query: dict[str, list[str]]) -> list[dict[str, Any]]:
        flags = {key: [value.lower() for value in values] for key, values in query.items()}
        if set(flags) - {"recursive", "expand"} or flags.get("expand", ["false"]) != ["false"]:
            raise HubError(400, f"fake hub: tree parameters {query} not understood (expand unsupported)")
        recursive = flags.get("recursive", ["false"]) == ["true"]
        files = self._commit_of(repo, rev).files
        prefix = f"{under.rstrip('/')}/" if under else ""
        entries: dict[str, dict[str, Any]] = {}
        for path, blob in sorted(files.items()):
            if not path.startswith(prefix):
                continue
            rel = path[len(prefix) :].split("/")
            for depth in range(1, len(rel)):
                folder = prefix + "/".join(rel[:depth])
                if recursive or depth == 1:
                    entries.setdefault(folder, self._folder_entry(folder))
                if not recursive:
                    break
            if recursive or len(rel) == 1:
                entries[path] = self._file_entry(path, blob)
        if prefix and not entries:
            raise HubError(404, f"{under} does not exist", "EntryNotFound")
        return list(entries.values())

    def _paths_info(self, repo: Repo, rev: str, body: bytes) -> list[dict[str, Any]]:
        form = parse_qs(body.decode("utf-8"), keep_blank_values=True)
        if set(form) - {"paths", "expand"} or [v.lower() for v in form.get("expand", ["false"])] != ["false"]:
            raise HubError(400, f"fake hub: paths-info form {sorted(form)} not understood (expand unsupported)")
        files = self._commit_of(repo, rev).files
        folders = {"/".join(p.split("/")[:depth]) for p in files for depth in range(1, p.count("/") + 1)}
        answer = []
        for path in form.get("paths", []):
            path = path.strip("/")
            if path in files:
                answer.append(self._file_entry(path, files[path]))
            elif path in folders:
                answer.append(self._folder_entry(path))
        return answer

    def _preupload(self, repo: Repo, rev: str, payload: dict[str, Any]) -> dict[str, Any]:
        files = payload.get("files")
        if not isinstance(files, list) or set(payload) - {"files", "gitIgnore"}:
            raise HubError(400, "fake hub: preupload wants {files: [...]}")
        existing = self._commit_of(repo, rev).files
        attributes = existing[".gitattributes"].data if ".gitattributes" in existing else b""
        answer = []
        for item in files:
            if not isinstance(item, dict) or not {"path", "sample", "size"} <= set(item):
                raise HubError(400, f"fake hub: preupload entry {item!r} not understood")
            path, size = item["path"], item["size"]
            try:
                sample = base64.b64decode(item["sample"], validate=True)
            except ValueError:
                raise HubError(400, f"fake hub: preupload sample of {path} is not base64") from None
            old = existing.get(path)
            answer.append(
                {
                    "path": path,
                    "uploadMode": "lfs" if self.needs_lfs(attributes, path, size, sample) else "regular",
                    "shouldIgnore": False,
                    "oid": None if old is None else old.sha256 if old.lfs else old.blob_id,
                }
            )
        return {"files": answer}

    # -- LFS ------------------------------------------------------------------------------------------------------

    def _sign(self, *fields: str) -> str:
        return hmac.new(self._secret, "\n".join(fields).encode(), hashlib.sha256).hexdigest()

    def _check_signature(self, query: dict[str, list[str]], *fields: str) -> None:
        if not hmac.compare_digest(query.get("sig", [""])[0], self._sign(*fields)):
            raise HubError(403, "fake hub: the signature does not match (an unsigned or altered URL)")

    def _batch(self, repo: Repo, payload: dict[str, Any], request: BaseHTTPRequestHandler) -> dict[str, Any]:
        if request.headers.get("Accept") != LFS_JSON:
            raise HubError(406, f"fake hub: the LFS batch API answers {LFS_JSON} only")
        objects = payload.get("objects")
        if (
            payload.get("operation") != "upload"
            or payload.get("hash_algo", "sha256") != "sha256"
            or "basic" not in payload.get("transfers", ["basic"])
            or not isinstance(objects, list)
            or set(payload) - {"operation", "transfers", "objects", "hash_algo", "ref"}
        ):
            raise HubError(400, f"fake hub: LFS batch request {sorted(payload)} not understood (sha256 uploads only)")
        ref = (payload.get("ref") or {}).get("name")
        if ref is not None and ref not in repo.branches:
            raise HubError(404, f"fake hub: no branch {ref!r}", "RevisionNotFound")
        answer = []
        for item in objects:
            oid, size = item.get("oid"), item.get("size")
            if not (isinstance(oid, str) and len(oid) == 64 and set(oid) <= set("0123456789abcdef")):
                answer.append({"oid": str(oid), "size": 0, "error": {"code": 422, "message": "invalid oid"}})
            elif not isinstance(size, int) or size < 0:
                answer.append({"oid": oid, "size": 0, "error": {"code": 422, "message": "invalid size"}})
            elif oid in repo.lfs:
                answer.append({"oid": oid, "size": size})  # the repository holds it: nothing to upload
            else:
                answer.append(
                    {"oid": oid, "size": size, "authenticated": True, "actions": self._actions(repo, oid, size)}
                )
        return {"transfer": "basic", "objects": answer, "hash_algo": "sha256"}

    def _actions(self, repo: Repo, oid: str, size: int) -> dict[str, Any]:
        git = f"{self.endpoint}/datasets/{repo.repo_id}.git/info/lfs/objects"
        key = quote(repo.repo_id, safe="")
        verify = {"href": f"{git}/verify"}
        chunk = self.multipart_threshold
        if chunk is None or size <= chunk:
            url = f"{self.storage}/upload/{key}/{oid}?sig={self._sign('upload', repo.repo_id, oid)}"
            return {"upload": {"href": url}, "verify": verify}
        header = {"chunk_size": str(chunk)}
        for number in range(1, -(-size // chunk) + 1):
            signature = self._sign("part", repo.repo_id, oid, str(number))
            header[f"{number:05d}"] = f"{self.storage}/upload/{key}/{oid}/{number}?sig={signature}"
        completion = f"{git}/complete/{oid}?sig={self._sign('complete', repo.repo_id, oid)}"
        return {"upload": {"href": completion, "header": header}, "verify": verify}

    def _complete(self, repo: Repo, oid: str, query: dict[str, list[str]], body: bytes) -> dict[str, Any]:
        self._check_signature(query, "complete", repo.repo_id, oid)
        payload = _json(body)
        parts = repo.parts.get(oid, {})
        listed = payload.get("parts")
        if payload.get("oid") != oid or not isinstance(listed, list) or not listed:
            raise HubError(400, "fake hub: a completion lists the object's parts")
        numbers = [p.get("partNumber") for p in listed]
        if numbers != list(range(1, len(parts) + 1)):
            raise HubError(400, f"fake hub: parts {numbers} do not match those uploaded ({sorted(parts)})")
        for item in listed:
            if str(item.get("etag")).strip('"') != _etag(parts[item["partNumber"]]):  # S3 quotes its ETags
                raise HubError(400, f"fake hub: part {item['partNumber']} has another ETag")
        repo.staged[oid] = b"".join(parts[n] for n in numbers)
        del repo.parts[oid]
        self.uploads.append(hashlib.sha256(repo.staged[oid]).hexdigest())
        return {}

    def _verify(self, repo: Repo, payload: dict[str, Any]) -> dict[str, Any]:
        oid, size = payload.get("oid"), payload.get("size")
        data = repo.staged.get(str(oid), repo.lfs.get(str(oid)))
        if data is None:
            raise HubError(404, f"fake hub: object {oid} was not uploaded")
        if hashlib.sha256(data).hexdigest() != oid or len(data) != size:
            repo.staged.pop(str(oid), None)
            raise HubError(422, f"fake hub: object {oid}: the uploaded bytes have another sha256 or size")
        repo.lfs[str(oid)] = repo.staged.pop(str(oid), data)
        return {}

    def _storage_route(
        self, method: str, path: str, query: dict[str, list[str]], body: bytes, request: BaseHTTPRequestHandler
    ) -> tuple[str, Answer]:
        parts = [unquote(p) for p in path.split("/")[1:]]
        if method == "PUT" and len(parts) in {3, 4} and parts[0] == "upload":
            if self.storage_refuses:
                raise HubError(403, "AccessDenied: Request has expired")
            repo, oid = self._existing(parts[1]), parts[2]
            if len(parts) == 3:
                self._check_signature(query, "upload", repo.repo_id, oid)
                repo.staged[oid] = body
                self.uploads.append(hashlib.sha256(body).hexdigest())
            else:
                self._check_signature(query, "part", repo.repo_id, oid, parts[3])
                repo.parts.setdefault(oid, {})[int(parts[3])] = body
            return "storage-put", (200, {"ETag": f'"{_etag(body)}"'}, b"")
        if method in {"GET", "HEAD"} and len(parts) == 3 and parts[0] == "objects":
            repo, oid = self._existing(parts[1]), parts[2]
            self._check_signature(query, "object", repo.repo_id, oid)
            if oid not in repo.lfs:
                raise HubError(404, f"fake hub: no object {oid}")
            return "storage-get", _ranged(repo.lfs[oid], request, {"ETag": f'"{oid}"'})
        raise HubError(404, f"fake hub storage: no route for {method} {path}")

    # -- commits and tags -----------------------------------------------------------------------------------------

    def _commit(self, repo: Repo, rev: str, body: bytes, query: dict[str, list[str]]) -> dict[str, Any]:
        if query:
            raise HubError(400, f"fake hub: commit parameters {sorted(query)} not supported (no pull requests)")
        if rev not in repo.branches:
            raise HubError(404, f"fake hub: commits go onto a branch, not {rev!r}", "RevisionNotFound")
        lines = [json.loads(line) for line in body.splitlines() if line.strip()]
        if not lines or lines[0].get("key") != "header":
            raise HubError(400, "fake hub: a commit starts with its header line")
        header = lines[0]["value"]
        head = repo.branches[rev]
        parent = header.get("parentCommit")
        if parent is not None and not head.startswith(parent):
            raise HubError(412, f"A commit has happened since. Parent {parent} is not the head {head}")
        files = dict(repo.commits[head].files)
        for line in lines[1:]:
            key, value = line.get("key"), line.get("value") or {}
            path = value.get("path", "")
            if not path or path.startswith("/") or ".." in path.split("/"):
                raise HubError(400, f"fake hub: bad path {path!r}")
            if key == "file" and value.get("encoding") == "base64":
                data = base64.b64decode(value["content"], validate=True)
                attributes = files[".gitattributes"].data if ".gitattributes" in files else b""
                if data and self.needs_lfs(attributes, path, len(data), data[:512]):
                    raise HubError(
                        400, f"Your push was rejected because {path} must be stored with LFS (binary or large file)"
                    )
                files[path] = Blob(data, lfs=False)
            elif key == "lfsFile":
                oid = value.get("oid")
                if value.get("algo") != "sha256" or oid not in repo.lfs:
                    raise HubError(400, f"fake hub: {path}: LFS object {oid} was never uploaded and verified")
                if "size" in value and value["size"] != len(repo.lfs[oid]):
                    raise HubError(400, f"fake hub: {path}: size {value['size']} is not the object's")
                files[path] = Blob(repo.lfs[oid], lfs=True)
            elif key == "deletedFile":
                if path not in files:
                    raise HubError(404, "A file with this name doesn't exist", "EntryNotFound")
                del files[path]
            elif key == "deletedFolder":
                files = {p: b for p, b in files.items() if not p.startswith(f"{path.rstrip('/')}/")}
            else:
                raise HubError(400, f"fake hub: commit line {key!r} not supported")
        made = repo.commit(head, str(header.get("summary", "")), files)
        repo.branches[rev] = made.oid
        self.commits_made[repo.repo_id] += 1
        return {
            "success": True,
            "commitOid": made.oid,
            "commitUrl": f"{self.endpoint}/datasets/{repo.repo_id}/commit/{made.oid}",
        }

    def _tag(self, repo: Repo, rev: str, payload: dict[str, Any]) -> dict[str, Any]:
        tag = payload.get("tag")
        if not isinstance(tag, str) or not tag or set(payload) - {"tag", "message"}:
            raise HubError(400, "fake hub: create-tag wants {tag, message?}")
        target = self._commit_of(repo, rev)
        if tag in repo.tags or tag in repo.branches:
            raise HubError(409, f"Tag {tag} already exists")
        repo.tags[tag] = target.oid
        return {}

    def _resolve(self, repo: Repo, rev: str, path: str, request: BaseHTTPRequestHandler) -> Answer:
        head = self._commit_of(repo, rev)
        blob = head.files.get(path)
        if blob is None:
            raise HubError(404, f"{path} does not exist at {rev}", "EntryNotFound", {"X-Repo-Commit": head.oid})
        if not blob.lfs:
            return _ranged(blob.data, request, {"ETag": f'"{blob.blob_id}"', "X-Repo-Commit": head.oid})
        key = quote(repo.repo_id, safe="")
        location = f"{self.storage}/objects/{key}/{blob.sha256}?sig={self._sign('object', repo.repo_id, blob.sha256)}"
        headers = {
            "Location": location,
            "ETag": f'"{blob.sha256}"',
            "X-Linked-Etag": f'"{blob.sha256}"',
            "X-Linked-Size": str(len(blob.data)),
            "X-Repo-Commit": head.oid,
        }
        return 302, headers, b""


@dataclass(frozen=True)
class TrappedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


class TrapServer:
    """A server that must never be reached: it records each connection (`connections`, the client's address) and
    each request (`requests`), and answers 200 with an empty JSON object, so a client that reached it goes on."""

    def __init__(self) -> None:
        self.connections: list[str] = []
        self.requests: list[TrappedRequest] = []
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://{host}:{port}"

    def start(self, host: str = "127.0.0.2") -> TrapServer:
        trap = self

        class Recorder(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                trap.connections.append(f"{self.client_address[0]}:{self.client_address[1]}")
                super().setup()

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _record(self) -> None:
                body = _body(self)
                trap.requests.append(TrappedRequest(self.command, self.path, dict(self.headers.items()), body))
                _send(self, self.command, (200, {"Content-Type": "application/json"}, b"{}"))

            do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = _record

        self._server = ThreadingHTTPServer((host, 0), Recorder)
        self._thread = threading.Thread(target=self._server.serve_forever, name="trap", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)


@contextmanager
def trap(host: str = "127.0.0.2") -> Iterator[TrapServer]:
    """A started TrapServer on `host`, stopped after."""
    server = TrapServer().start(host)
    try:
        yield server
    finally:
        server.stop()


def _handler(handle: Any) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            handle(self, "GET")

        def do_HEAD(self) -> None:
            handle(self, "HEAD")

        def do_POST(self) -> None:
            handle(self, "POST")

        def do_PUT(self) -> None:
            handle(self, "PUT")

        def do_DELETE(self) -> None:
            handle(self, "DELETE")

    return Handler


def _body(request: BaseHTTPRequestHandler) -> bytes:
    length = int(request.headers.get("Content-Length") or 0)
    return request.rfile.read(length) if length else b""


def _send(request: BaseHTTPRequestHandler, method: str, answer: Answer) -> None:
    status, headers, payload = answer
    request.send_response(status)
    for key, value in headers.items():
        request.send_header(key, value)
    if "Content-Length" not in headers:
        request.send_header("Content-Length", str(len(payload)))
    request.end_headers()
    if method != "HEAD":
        request.wfile.write(payload)


def _error(exc: HubError) -> Answer:
    headers = {"Content-Type": "application/json", "X-Error-Message": exc.message}
    if exc.code:
        headers["X-Error-Code"] = exc.code
    headers.update({k: v for k, v in exc.extra.items() if k.startswith("X-")})
    body = {"error": exc.message, **{k: v for k, v in exc.extra.items() if not k.startswith("X-")}}
    return exc.status, headers, json.dumps(body).encode()


def _etag(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()  # S3's ETag of a part, not a security hash


def _ranged(data: bytes, request: BaseHTTPRequestHandler, headers: dict[str, str]) -> Answer:
    """`data`, or the part a `Range: bytes=A-B` (or `A-`) header asks for (206), as HTTP file servers answer."""
    base = {"Content-Type": "application/octet-stream", "Accept-Ranges": "bytes", **headers}
    asked = request.headers.get("Range")
    if not asked:
        return 200, {**base, "Content-Length": str(len(data))}, data
    unit, _, spec = asked.partition("=")
    first, _, last = spec.partition("-")
    if unit.strip() != "bytes" or "," in spec or not first.isdigit() or (last and not last.isdigit()):
        raise HubError(400, f"fake hub: Range {asked!r} not understood (one bytes=A-B range)")
    start, end = int(first), min(int(last) if last else len(data) - 1, len(data) - 1)
    if start >= len(data) or end < start:
        return 416, {**base, "Content-Range": f"bytes */{len(data)}", "Content-Length": "0"}, b""
    chunk = data[start : end + 1]
    range_headers = {"Content-Range": f"bytes {start}-{end}/{len(data)}", "Content-Length": str(len(chunk))}
    return 206, {**base, **range_headers}, chunk


def _require(authorized: bool) -> None:
    if not authorized:
        raise HubError(401, "Invalid credentials in Authorization header")


def _json(body: bytes) -> dict[str, Any]:
    try:
        value = json.loads(body)
    except ValueError:
        raise HubError(400, "fake hub: the body is not JSON") from None
    if not isinstance(value, dict):
        raise HubError(400, "fake hub: the body is not a JSON object")
    return value


@contextmanager
def serving(monkeypatch: pytest.MonkeyPatch, token: str, **options: Any) -> Iterator[FakeHub]:
    """A started FakeHub that huggingface_hub talks to (`HF_ENDPOINT`, `HF_TOKEN`, no telemetry), stopped after."""
    server = FakeHub(token, **options).start()
    monkeypatch.setenv("HF_TOKEN", token)
    monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    try:
        yield server
    finally:
        server.stop()
