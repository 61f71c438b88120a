"""A fake Hugging Face Hub on 127.0.0.1: exactly the HTTP calls `huggingface_hub` (2.4) makes to publish a dataset
and download it back, over an in-memory git-like store, for `culturebench publish`'s tests.

The store: per repository, commits (each with its parent, message and every file's bytes by path), branches and
tags. Creating a repository makes its first commit on `main`, holding `.gitattributes`, as the Hub does.

Routes (`<repo>` is `ORG/NAME`, `<rev>` a branch, a tag or a commit id, URL-quoted as the client sends it):

    POST /api/repos/create                         create a repository; 409 (with its url) when it exists
    POST /api/validate-yaml                        the card's YAML front matter must parse as a mapping
    GET  /api/datasets/<repo>[/revision/<rev>]     repository info: the commit `sha` and `siblings`
    GET  /api/datasets/<repo>/refs                 branches and tags
    GET  /api/datasets/<repo>/tree/<rev>[/<dir>]   files (`oid`: git blob sha1, `size`) and folders, `recursive=`
    POST /api/datasets/<repo>/preupload/<rev>      every file `uploadMode: "regular"` (no LFS, no Xet), and the
                                                   `oid` of the file already at that path, if any
    POST /api/datasets/<repo>/commit/<rev>         an ndjson commit: a `header` line (and `parentCommit`, checked
                                                   against the branch head), then `file` (base64), `deletedFile`
                                                   and `deletedFolder` lines; `lfsFile` and anything else: 400
    POST /api/datasets/<repo>/tag/<rev>            tag a revision; 409 when the tag exists
    HEAD|GET /datasets/<repo>/resolve/<rev>/<path> a file's bytes, with X-Repo-Commit, ETag and Content-Length

Everything else is answered 404 (an unknown route) or 400 (a request it does not understand), with a message, so a
test passing against it proves which calls were made; `calls` lists each request as `METHOD route-name`. Writes,
and reads of a private repository, need `Authorization: Bearer <token>` with the server's token (401 otherwise);
`authorizations` keeps every Authorization header received, for the tests that check where the token went.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import yaml

GITATTRIBUTES = b"*.parquet filter=lfs diff=lfs merge=lfs -text\n*.tar filter=lfs diff=lfs merge=lfs -text\n"


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class Commit:
    oid: str
    parent: str | None
    message: str
    files: dict[str, bytes]


@dataclass
class Repo:
    repo_id: str
    private: bool
    commits: dict[str, Commit] = field(default_factory=dict)
    branches: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)

    def commit(self, parent: str | None, message: str, files: dict[str, bytes]) -> Commit:
        listing = json.dumps(
            {"parent": parent, "message": message, "files": {p: git_blob_sha1(b) for p, b in sorted(files.items())}}
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


class FakeHub:
    """The server and its store; `start()` listens on an ephemeral port of 127.0.0.1, `endpoint` is its URL."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.repos: dict[tuple[str, str], Repo] = {}
        self.calls: list[str] = []
        self.commits_made: Counter[str] = Counter()  # repo id -> commits made through the commit route
        self.authorizations: list[str] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> FakeHub:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                hub._handle(self, "GET")

            def do_HEAD(self) -> None:
                hub._handle(self, "HEAD")

            def do_POST(self) -> None:
                hub._handle(self, "POST")

            def do_PUT(self) -> None:
                hub._handle(self, "PUT")

            def do_DELETE(self) -> None:
                hub._handle(self, "DELETE")

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-hub", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)

    # -- what tests read ------------------------------------------------------------------------------------------

    def repo(self, repo_id: str) -> Repo:
        return self.repos[("dataset", repo_id)]

    def files_at(self, repo_id: str, rev: str) -> dict[str, bytes]:
        found = self.repo(repo_id).resolve(rev)
        assert found is not None, f"no revision {rev}"
        return dict(found.files)

    # -- HTTP -----------------------------------------------------------------------------------------------------

    def _handle(self, request: BaseHTTPRequestHandler, method: str) -> None:
        url = urlsplit(request.path)
        query = parse_qs(url.query)
        length = int(request.headers.get("Content-Length") or 0)
        body = request.rfile.read(length) if length else b""
        auth = request.headers.get("Authorization")
        if auth:
            self.authorizations.append(auth)
        authorized = auth == f"Bearer {self.token}"
        status, headers, payload = 200, {}, b""
        try:
            with self._lock:
                name, result = self._route(method, url.path, query, body, authorized)
                self.calls.append(f"{method} {name}")
            if isinstance(result, tuple):  # a file: (bytes, headers)
                payload, headers = result
            else:
                payload = json.dumps(result).encode()
                headers = {"Content-Type": "application/json"}
        except HubError as exc:
            self.calls.append(f"{method} {url.path} -> {exc.status}")
            status = exc.status
            payload = json.dumps({"error": exc.message, **exc.extra}).encode()
            headers = {"Content-Type": "application/json", "X-Error-Message": exc.message}
            if exc.code:
                headers["X-Error-Code"] = exc.code
        request.send_response(status)
        for key, value in headers.items():
            request.send_header(key, value)
        if "Content-Length" not in headers:
            request.send_header("Content-Length", str(len(payload)))
        request.end_headers()
        if method != "HEAD":
            request.wfile.write(payload)

    def _route(
        self, method: str, path: str, query: dict[str, list[str]], body: bytes, authorized: bool
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
            if method == "POST" and action in {"preupload", "commit", "tag"} and len(rest) == 1:
                if not authorized:
                    raise HubError(401, "Invalid credentials in Authorization header")
                if action == "preupload":
                    return "preupload", self._preupload(repo, rest[0], _json(body))
                if action == "commit":
                    return "commit", self._commit(repo, rest[0], body, query)
                return "create-tag", self._tag(repo, rest[0], _json(body))
        if method in {"GET", "HEAD"} and len(parts) >= 6 and parts[0] == "datasets" and parts[3] == "resolve":
            repo = self._readable(f"{parts[1]}/{parts[2]}", authorized)
            return "resolve", self._resolve(repo, parts[4], "/".join(parts[5:]))
        raise HubError(404, f"fake hub: no route for {method} {path}")

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
        if not authorized:
            raise HubError(401, "Invalid credentials in Authorization header")
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
        repo.branches["main"] = repo.commit(None, "initial commit", {".gitattributes": GITATTRIBUTES}).oid
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

    def _tree(self, repo: Repo, rev: str, under: str, query: dict[str, list[str]]) -> list[dict[str, Any]]:
        flags = {key: [value.lower() for value in values] for key, values in query.items()}
        if set(flags) - {"recursive", "expand"} or flags.get("expand", ["false"]) != ["false"]:
            raise HubError(400, f"fake hub: tree parameters {query} not understood (expand unsupported)")
        recursive = flags.get("recursive", ["false"]) == ["true"]
        files = self._commit_of(repo, rev).files
        prefix = f"{under.rstrip('/')}/" if under else ""
        entries: dict[str, dict[str, Any]] = {}
        for path, data in sorted(files.items()):
            if not path.startswith(prefix):
                continue
            rel = path[len(prefix) :].split("/")
            for depth in range(1, len(rel)):
                folder = prefix + "/".join(rel[:depth])
                if recursive or depth == 1:
                    entries.setdefault(folder, {"type": "directory", "path": folder, "oid": "0" * 40, "size": 0})
                if not recursive:
                    break
            if recursive or len(rel) == 1:
                entries[path] = {"type": "file", "path": path, "size": len(data), "oid": git_blob_sha1(data)}
        if prefix and not entries:
            raise HubError(404, f"{under} does not exist", "EntryNotFound")
        return list(entries.values())

    def _preupload(self, repo: Repo, rev: str, payload: dict[str, Any]) -> dict[str, Any]:
        files = payload.get("files")
        if not isinstance(files, list) or set(payload) - {"files", "gitIgnore"}:
            raise HubError(400, "fake hub: preupload wants {files: [...]}")
        existing = self._commit_of(repo, rev).files
        answer = []
        for item in files:
            if not isinstance(item, dict) or not {"path", "sample", "size"} <= set(item):
                raise HubError(400, f"fake hub: preupload entry {item!r} not understood")
            path = item["path"]
            old = existing.get(path)
            answer.append(
                {
                    "path": path,
                    "uploadMode": "regular",
                    "shouldIgnore": False,
                    "oid": git_blob_sha1(old) if old is not None else None,
                }
            )
        return {"files": answer}

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
                files[path] = base64.b64decode(value["content"], validate=True)
            elif key == "deletedFile":
                if path not in files:
                    raise HubError(404, "A file with this name doesn't exist", "EntryNotFound")
                del files[path]
            elif key == "deletedFolder":
                files = {p: b for p, b in files.items() if not p.startswith(f"{path.rstrip('/')}/")}
            else:
                raise HubError(400, f"fake hub: commit line {key!r} not supported (no LFS: preupload said regular)")
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

    def _resolve(self, repo: Repo, rev: str, path: str) -> tuple[bytes, dict[str, str]]:
        head = self._commit_of(repo, rev)
        data = head.files.get(path)
        if data is None:
            raise HubError(404, f"{path} does not exist at {rev}", "EntryNotFound")
        etag = git_blob_sha1(data)
        return data, {
            "Content-Type": "application/octet-stream",
            "Content-Length": str(len(data)),
            "ETag": f'"{etag}"',
            "X-Repo-Commit": head.oid,
        }


def _json(body: bytes) -> dict[str, Any]:
    try:
        value = json.loads(body)
    except ValueError:
        raise HubError(400, "fake hub: the body is not JSON") from None
    if not isinstance(value, dict):
        raise HubError(400, "fake hub: the body is not a JSON object")
    return value
