"""What a value of a reference pack may be, by where it ends up. A pack is untrusted input, and its values become
ids and file names (`demo-kr-food-00-eastasian`, tar members), table cells of a card, CSV cells, Croissant fields
and model prompts, so each is checked against a pattern when the pack is read, by the same pydantic types whether it
comes from a hand-written file or from a model's draft (`reference translate`):

- `IdPart`: part of an id or a file name (a MixCuBe category or ethnicity label): ASCII letters and digits (and
  `_`), starting with a letter, as the sample ids of `evaluation/harnesses/exports/common.py` `SAMPLE_ID` need;
- `Name`: a name shown as it is (a country, region, language or culture name, an adjective, an accepted answer):
  letters, marks and digits of any script, spaces and the punctuation names use, as `data/concept_names.py` allows
  a concept name; never a formula, markup or a control character;
- `Text`: a phrase in any language (a translation, a prompt, a description): one line, no control or format
  character (bidi overrides, zero-width spaces, ESC; ZWJ and ZWNJ, which scripts need, are kept), no markup
  (`<`, `>`), not starting like a spreadsheet formula;
- `Prose` (a description, notes, a source): as `Text`, but `<` and `>` may stand; `Key`: a plain key;
- `template_fields` and `check_template`: a `str.format` template may hold bare named fields only (`{concept}`),
  never a conversion, a format spec or a nested field (`{concept!r:>99999999}` would exhaust memory).
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Mapping
from typing import Annotated

from pydantic import AfterValidator

from data.concept_names import invalid_name
from data.text_safety import FORMULA_PREFIXES, hidden_character

ID_PART = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,39}")
MAX_NAME = 100
MAX_TEXT = 2_000
MAX_PROSE = 8_000
_KEY = re.compile(r"[a-z][a-z0-9_]{0,63}")
_JOINERS = "\u200c\u200d"
_MARKUP = frozenset("<>")
_HIDDEN = "control or format character (a line break, a bidi override, a zero-width space, ESC)"
_NAME_RULE = "letters and digits of any script, spaces and ' - & / . , ( ), starting with a letter or digit"
_FIELD_NAME = re.compile(r"[a-z_]+")


def id_part_problem(value: str) -> str | None:
    if ID_PART.fullmatch(value) is None:
        return (
            f"{value[:40]!r} is not an id part: ASCII letters, digits and '_', starting with a letter, at most 40 "
            "(it becomes part of sample ids and file names)"
        )
    return None


def name_problem(value: str) -> str | None:
    if len(value) > MAX_NAME:
        return f"{value[:40]!r}… is longer than {MAX_NAME} characters"
    problem = invalid_name(value.translate({ord(c): None for c in _JOINERS}))
    if problem is not None or value[:1] in _JOINERS:
        return f"{value[:40]!r} is not a name: {_NAME_RULE}"
    return None


def _line_problem(value: str, cap: int) -> str | None:
    """What `Text` and `Prose` share: a length cap, no control or format character, no formula start."""
    if len(value) > cap:
        return f"{value[:40]!r}… is longer than {cap:,} characters"
    hidden = hidden_character(value)
    if hidden is not None:
        return f"{value[:40]!r} holds {hidden}, a {_HIDDEN}"
    if value.startswith(FORMULA_PREFIXES):
        return f"{value[:40]!r} starts like a spreadsheet formula"
    return None


def text_problem(value: str) -> str | None:
    if not value.strip():
        return "is empty"
    problem = _line_problem(value, MAX_TEXT)
    if problem is None and any(c in _MARKUP for c in value):
        return f"{value[:40]!r} holds markup ('<' or '>')"
    return problem


def prose_problem(value: str) -> str | None:
    """Prose that is recorded, never laid out (a description, notes, a source): as `Text`, but `<` and `>` may
    stand (`'X of <country>'`), and it may be empty; whatever shows it escapes it."""
    return _line_problem(value, MAX_PROSE)


def key_problem(value: str) -> str | None:
    if _KEY.fullmatch(value) is None:
        return f"{value[:40]!r} is not a key: lower-case ASCII letters, digits and '_', starting with a letter"
    return None


def _checked(problem: Callable[[str], str | None]) -> AfterValidator:
    def check(value: str) -> str:
        found = problem(value)
        if found is not None:
            raise ValueError(found)
        return value

    return AfterValidator(check)


IdPart = Annotated[str, _checked(id_part_problem)]
Name = Annotated[str, _checked(name_problem)]
Text = Annotated[str, _checked(text_problem)]
Prose = Annotated[str, _checked(prose_problem)]
Key = Annotated[str, _checked(key_problem)]


def template_fields(template: str) -> list[str]:
    """The placeholders of a `str.format` template, in order (`{concept} of {country}` -> concept, country). A
    field with a conversion (`!r`), a format spec (`:>9`), an attribute or index (`{0.x}`, `{a[0]}`), a positional
    field (`{}`, `{0}`) or a nested field is a ValueError: a template holds bare names only."""
    fields = []
    for _, name, spec, conversion in string.Formatter().parse(template):
        if name is None:
            continue
        if conversion is not None or spec:
            shown = "{" + name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}"
            raise ValueError(f"the field {shown[:60]} has a conversion or format spec; write {{{name}}} alone")
        if _FIELD_NAME.fullmatch(name) is None:
            raise ValueError(f"the field {{{name[:40]}}} is not a bare name such as {{concept}}")
        fields.append(name)
    return fields


def check_fields(template: str, counts: Mapping[str, tuple[int, int]]) -> str:
    """`template` is one line of text holding only the bare fields of `counts`, each between its (least, most)
    times; else a ValueError saying why."""
    try:
        fields = template_fields(template)
    except ValueError as exc:
        raise ValueError(f"template {template[:60]!r}: {exc}") from None
    problem = text_problem(template)
    if problem is not None:
        raise ValueError(f"template {problem}")
    unknown = [f for f in fields if f not in counts]
    if unknown:
        names = " and ".join(f"{{{f}}}" for f in sorted(counts))
        raise ValueError(f"template {template[:60]!r} has the placeholder {{{unknown[0]}}}; only {names} exist")
    for name, (least, most) in sorted(counts.items()):
        if not least <= fields.count(name) <= most:
            times = "exactly once" if least == most == 1 else "at most once" if most == 1 else f"{least}-{most} times"
            raise ValueError(f"template {template[:60]!r} needs {{{name}}} {times}")
    return template


#: RQ3's descriptor templates (3XCM §3.2.3): a language's holds {concept} and {country} once each; a concept's own
#: may write the concept out (gender, classifiers), so {concept} at most once there.
LANGUAGE_TEMPLATE = {"concept": (1, 1), "country": (1, 1)}
CONCEPT_TEMPLATE = {"concept": (0, 1), "country": (1, 1)}


def check_language_template(template: str) -> str:
    return check_fields(template, LANGUAGE_TEMPLATE)


def check_concept_template(template: str) -> str:
    return check_fields(template, CONCEPT_TEMPLATE)
