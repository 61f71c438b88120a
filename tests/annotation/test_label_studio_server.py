"""The test server itself: annotators are real users with their own tokens, and local-file storage serves the
files under its folder and nothing else under the document root."""

from __future__ import annotations

import uuid

import requests
from label_studio_sdk import LabelStudio

from tests.support.label_studio_server import RunningLabelStudio, signup_annotator


def test_annotators_sign_up_through_the_invite_link_with_their_own_token(label_studio: RunningLabelStudio) -> None:
    tag = uuid.uuid4().hex[:8]
    emails = [f"infra{n}-{tag}@example.com" for n in range(2)]
    tokens = [signup_annotator(label_studio, email, f"pw-{tag}-{n}-xyz") for n, email in enumerate(emails)]
    assert len(set(tokens)) == 2 and label_studio.admin_token not in tokens
    for email, token in zip(emails, tokens, strict=True):
        me = requests.get(
            f"{label_studio.url}/api/current-user/whoami", headers={"Authorization": f"Token {token}"}, timeout=30
        )
        assert me.status_code == 200 and me.json()["email"] == email


def test_local_file_storage_serves_only_its_own_folder(label_studio: RunningLabelStudio) -> None:
    tag = uuid.uuid4().hex[:8]
    inside = label_studio.document_root / f"build-{tag}" / "images"
    inside.mkdir(parents=True)
    (inside / "a.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"0" * 64)
    (label_studio.document_root / f"secret-{tag}.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"1" * 64)
    admin = LabelStudio(base_url=label_studio.url, api_key=label_studio.admin_token)
    project = admin.projects.create(title=f"storage {tag}", label_config='<View><Image name="i" value="$i"/></View>')
    admin.import_storage.local.create(project=project.id, path=str(inside), use_blob_urls=False, title="images")

    def get(relative: str) -> int:
        url = f"{label_studio.url}/data/local-files/?d={relative}"
        return requests.get(url, headers=label_studio.auth_headers, timeout=30).status_code

    assert get(f"build-{tag}/images/a.png") == 200
    assert get(f"secret-{tag}.png") == 404
    assert get(f"build-{tag}/images/../../secret-{tag}.png") == 404
