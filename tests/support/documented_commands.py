"""The shell commands the documentation gives users: every fenced ```bash block of README.md and docs/*.md, one
command per logical line (a trailing backslash continues it), its trailing comment left off, as a user would copy
it. tests/test_documented_commands.py accounts for each one."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tests.support.paths import REPO_ROOT

DOCUMENTS: tuple[Path, ...] = (REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md")))
_FENCE = re.compile(r"^\s*```(\w*)\s*$")


@dataclass(frozen=True)
class Command:
    document: str  # relative to the repository root
    line: int  # where the command starts, 1-based
    block: int  # which bash block of the document, 0-based
    text: str  # the command, continuation lines joined with a single space, its comment left off

    def __str__(self) -> str:
        return f"{self.document}:{self.line}: {self.text}"


def strip_comment(line: str) -> str:
    """`line` without a trailing `# comment` (a `#` outside quotes, after a blank or at the start)."""
    quote = ""
    for at, char in enumerate(line):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (at == 0 or line[at - 1].isspace()):
            return line[:at].rstrip()
    return line.rstrip()


def bash_blocks(text: str, wanted: str = "bash") -> list[list[tuple[int, str]]]:
    """Each ```bash block's lines (or another language's: `wanted`), numbered from 1 in the document."""
    blocks: list[list[tuple[int, str]]] = []
    language: str | None = None  # of the block the line is in; None outside blocks
    for number, line in enumerate(text.splitlines(), start=1):
        fence = _FENCE.match(line)
        if fence and language is None:
            language = fence.group(1)
            if language == wanted:
                blocks.append([])
        elif fence:
            language = None
        elif language == wanted:
            blocks[-1].append((number, line))
    return blocks


def commands(path: Path) -> list[Command]:
    """The commands of `path`'s bash blocks, in order."""
    found: list[Command] = []
    document = path.relative_to(REPO_ROOT).as_posix()
    for index, block in enumerate(bash_blocks(path.read_text(encoding="utf-8"))):
        parts: list[str] = []
        start = 0
        for number, raw in block:
            line = strip_comment(raw).strip()
            if not parts:
                start = number
            if not line and not parts:
                continue
            if line.endswith("\\"):
                parts.append(line[:-1].strip())
                continue
            parts.append(line)
            found.append(Command(document, start, index, " ".join(p for p in parts if p)))
            parts = []
        if parts:
            found.append(Command(document, start, index, " ".join(parts)))
    return found


def all_commands() -> list[Command]:
    return [command for path in DOCUMENTS for command in commands(path)]


@dataclass(frozen=True)
class Snippet:
    document: str
    line: int  # of its first line
    code: str

    def __str__(self) -> str:
        return f"{self.document}:{self.line}"

    def printed(self) -> list[str]:
        """What the snippet says its prints show: the comment after each `print(...)`."""
        return [
            line.split("# ", 1)[1].strip()
            for line in self.code.splitlines()
            if line.strip().startswith("print(") and "# " in line
        ]


def python_snippets() -> list[Snippet]:
    """Every ```python block of README.md and docs/*.md."""
    found = []
    for path in DOCUMENTS:
        document = path.relative_to(REPO_ROOT).as_posix()
        for block in bash_blocks(path.read_text(encoding="utf-8"), "python"):
            if block:
                found.append(Snippet(document, block[0][0], "\n".join(line for _, line in block) + "\n"))
    return found
