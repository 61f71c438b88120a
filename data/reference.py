"""Reference packs: the countries, languages, concepts, translations, MixCuBe cultures and audit prompts that a
benchmark is built for. The shipped data is the default pack (`data/reference/`), read by the same loader as any
pack a researcher writes (`culturebench reference init DIR` starts one).

A pack is untrusted input: `load_pack` reads it within caps (`data/reference_files.py`) and checks every file
(`data/reference_parse.py`), raising `PackErrors` with one line per problem.
"""

from __future__ import annotations

import os
from functools import cache, lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from data.reference_files import PackError, PackErrors, PackFiles, listing_key, read_pack_files
from data.reference_models import (
    ENGLISH,
    REVIEW_AWAITING,
    UNKNOWN_REGION,
    Concept,
    ConceptTranslation,
    Country,
    CountryName,
    Language,
    LanguagePack,
    MixCubeCulture,
    MixCubeEthnicity,
    MixCubeReference,
    PackInfo,
    ReferencePack,
)
from data.reference_parse import parse_pack

__all__ = [
    "DEFAULT_PACK_DIR",
    "ENGLISH",
    "REVIEW_AWAITING",
    "UNKNOWN_REGION",
    "Concept",
    "ConceptTranslation",
    "Country",
    "CountryName",
    "Language",
    "LanguagePack",
    "MixCubeCulture",
    "MixCubeEthnicity",
    "MixCubeReference",
    "PackError",
    "PackErrors",
    "PackInfo",
    "ReferencePack",
    "default_pack",
    "load_pack",
    "pack_or_default",
]

#: The shipped default pack.
DEFAULT_PACK_DIR = Path(str(resources.files("data").joinpath("reference")))


@cache
def _default_files() -> PackFiles:
    return read_pack_files(DEFAULT_PACK_DIR)


def default_digest() -> str:
    return _default_files().digest()


@cache
def default_pack() -> ReferencePack:
    """The shipped pack, read and checked like any other."""
    return parse_pack(_default_files(), default_digest())


def load_pack(location: str | os.PathLike[str]) -> ReferencePack:
    """The pack at `location` (a folder path or an fsspec URL), checked; read again when one of its files changes."""
    return _load(listing_key(location))


@lru_cache(maxsize=16)
def _load(key: tuple[str, tuple[tuple[str, int, Any], ...]]) -> ReferencePack:
    files = read_pack_files(key[0])
    return parse_pack(files, default_digest())


def pack_or_default(location: str | os.PathLike[str] | None) -> ReferencePack:
    """The pack a config names, or the default pack where it names none."""
    return default_pack() if location is None or str(location) == "" else load_pack(location)
