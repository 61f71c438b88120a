"""The README stays a short guide whose links hold.

The documentation site itself (docs/, mkdocs.yml) is checked by `mkdocs build --strict`, which `make test` runs
before pytest: broken links and anchors between pages, and pages missing from nav, fail it. These tests are the cheap
part that mkdocs does not see: the README is outside the site.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

from tests.support.paths import REPO_ROOT

ROOT = REPO_ROOT
README = ROOT / "README.md"
MAX_README_LINES = 300

#: Inline links and images, `[text](target)` / `![alt](target "title")`.
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def _prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks, with inline code spans blanked out."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(CODE_SPAN.sub("``", line))
    return lines


def _links(text: str) -> list[str]:
    return [m.group(1) for line in _prose_lines(text) for m in LINK.finditer(line)]


def _slug(heading: str) -> str:
    """The anchor of a heading, as GitHub and Python-Markdown's toc both make it for plain ASCII headings."""
    text = re.sub(r"`([^`]*)`", r"\1", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[\s]+", "-", text)


def _anchors(path: Path) -> set[str]:
    anchors = set()
    for line in _prose_lines(path.read_text(encoding="utf-8")):
        match = HEADING.match(line)
        if match:
            anchors.add(_slug(match.group(2)))
    return anchors


def _commands_section(text: str) -> str:
    match = re.search(r"^## The two commands\n(.*?)(?=^## )", text, flags=re.M | re.S)
    assert match, "README.md has no '## The two commands' section"
    return match.group(1)


def test_readme_is_a_short_guide() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, (
        f"README.md has {len(lines)} lines (at most {MAX_README_LINES}): move the detail into a page under docs/"
    )


def test_readme_keeps_the_two_commands_verbatim() -> None:
    section = _commands_section(README.read_text(encoding="utf-8"))
    block = re.search(r"```bash\n(.*?)```", section, flags=re.S)
    assert block, "the commands section has no ```bash block"
    commands = [line.split("#", 1)[0].strip() for line in block.group(1).splitlines()]
    assert [c for c in commands if c] == ["make demo", "make test"]
    # CI runs the same two commands, verbatim and in that order.
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()]
    assert [line for line in ci if line.startswith("make ")] == ["make demo", "make test"]


def test_every_relative_link_in_the_readme_resolves() -> None:
    links = _links(README.read_text(encoding="utf-8"))
    assert any(link.startswith("docs/") for link in links), "README.md links into no page of docs/"
    broken = []
    for link in links:
        if re.match(r"^[a-z][a-z0-9+.-]*:", link, flags=re.I):  # https:, mailto:, ...
            continue
        target, _, anchor = link.partition("#")
        path = (README.parent / target).resolve() if target else README
        if not path.exists():
            broken.append(f"{link}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
            broken.append(f"{link}: {target or README.name} has no heading with the anchor #{anchor}")
    assert not broken, "broken links in README.md:\n" + "\n".join(broken)


def test_every_page_the_readme_names_is_in_the_site_nav() -> None:
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    pages = {link.partition("#")[0] for link in _links(README.read_text(encoding="utf-8"))}
    missing = [p for p in sorted(pages) if p.startswith("docs/") and p.endswith(".md") and p[5:] not in nav]
    assert not missing, f"pages linked from README.md but absent from mkdocs.yml's nav: {missing}"


def test_the_link_parser_skips_code_and_slugs_like_the_site() -> None:
    text = "See [ops](docs/operators.md), `[not a link](nowhere.md)`, and [gone](docs/nowhere.md#x).\n"
    text += "```\n[in a fence](x.md)\n```\n"
    assert _links(text) == ["docs/operators.md", "docs/nowhere.md#x"]
    assert _slug("The benchmark rules (stricter than the published 3XCM)") == (
        "the-benchmark-rules-stricter-than-the-published-3xcm"
    )
    assert _slug("Reference data (`data/reference/`)") == "reference-data-datareference"
