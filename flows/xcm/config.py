"""The typed build config of `build-3xcm`: one section per stage, each naming its backend."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field, ValidationInfo, field_validator, model_validator

from annotation.backends import LabelStudioFilesReviewConfig, ReviewConfig
from collectors.concepts import ConceptsConfig, ShippedConceptsConfig
from collectors.fetch import FetchConfig, web_hits_problem
from collectors.importer import ImportConfig
from collectors.search import LocalFolderSearchConfig, SearchConfig
from collectors.translations import ShippedTranslationsConfig, TranslationsConfig
from curation.assemble import AssemblyConfig
from curation.concept_dedup import ConceptDedupConfig, LexicalConceptDedupConfig
from curation.image_dedup import ImageDedupConfig
from curation.tagging import OwnConceptTaggingConfig, TaggingConfig
from data.publish.release import ReleaseConfig
from data.reference import pack_or_default
from demo.corpus import DemoCorpusConfig, demo_selection
from flows.engine.config import BuildConfigBase, merge


class Build3XCMConfig(BuildConfigBase):
    """Everything that decides a 3XCM build. The same config always resolves to the same build id."""

    build_prefix: ClassVar[str] = "3xcm"
    # How the review is reached does not change what is collected: adding a completed review export continues the
    # same build (the review stage's fingerprint redoes it).
    outside_build_id: ClassVar[frozenset[str]] = BuildConfigBase.outside_build_id | {
        "review",
        "gpu_concurrency_limit",
    }

    countries: list[str] = Field(
        default_factory=list,
        validate_default=True,
        description="Countries to build (names, slugs or ISO codes of the reference pack); empty for every country "
        "of the pack (the default pack's 16 are the paper's).",
    )
    demo_corpus: DemoCorpusConfig | None = Field(
        default=None, description="Generate the offline demo corpus into the workspace and search it."
    )
    concepts: ConceptsConfig = Field(default_factory=ShippedConceptsConfig)
    concept_dedup: ConceptDedupConfig = Field(default_factory=LexicalConceptDedupConfig)
    translations: TranslationsConfig = Field(default_factory=ShippedTranslationsConfig)
    search: SearchConfig = Field(default_factory=LocalFolderSearchConfig)
    download: FetchConfig = Field(
        default_factory=ImportConfig, description="How hits are fetched: local fsspec import or the HTTP downloader."
    )
    image_dedup: ImageDedupConfig = Field(default_factory=ImageDedupConfig)
    review: ReviewConfig = Field(
        default_factory=LabelStudioFilesReviewConfig,
        description="Human review of the ambiguous near-duplicate pairs (Label Studio server, files, or auto-accept).",
    )
    tagging: TaggingConfig = Field(default_factory=OwnConceptTaggingConfig)
    assembly: AssemblyConfig = Field(default_factory=AssemblyConfig)
    release: ReleaseConfig = Field(default_factory=ReleaseConfig)
    gpu_concurrency_limit: str | None = Field(
        default="gpu",
        description="Prefect global concurrency limit that BGE-M3 and open_clip hold per call (or shard) inside a "
        "Prefect run, so builds sharing a GPU take turns; None, or a limit the server lacks, holds nothing.",
    )

    @model_validator(mode="before")
    @classmethod
    def _demo_selection_from_the_pack(cls, data: Any) -> Any:
        """A demo build's selection left null (a deployment's parameters, a config written for one pack and run on
        another) is its pack's: `demo_corpus.countries`/`concepts` its pack.json `demo`, `countries` the corpus's,
        `concepts.include` the corpus's concepts. Nulls outside a demo mean what they always did (every country)."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if data.get("countries") is None:
            data.pop("countries", None)
        corpus = data.get("demo_corpus")
        if not isinstance(corpus, dict):
            return data
        reference = data.get("reference")
        countries, concepts = demo_selection(reference if isinstance(reference, str) else None)
        corpus = dict(corpus)
        if corpus.get("countries") is None:
            corpus["countries"] = countries
        if corpus.get("concepts") is None:
            corpus["concepts"] = concepts
        data["demo_corpus"] = corpus
        if not data.get("countries"):
            data["countries"] = corpus["countries"]
        chosen = data.get("concepts")
        if isinstance(chosen, dict) and chosen.get("backend", "shipped") == "shipped" and chosen.get("include") is None:
            data["concepts"] = {**chosen, "include": corpus["concepts"]}
        return data

    @field_validator("countries")
    @classmethod
    def _canonical_countries(cls, value: list[str], info: ValidationInfo) -> list[str]:
        """The countries by their pack names, in the pack's order; every country of the pack where none is named.
        (A field validator: its error is reported beside the other fields'; `reference` is validated before.)"""
        pack = pack_or_default(info.data.get("reference"))
        names = pack.country_names(value) if value else [c.name for c in pack.countries]
        if len(set(names)) != len(names):
            raise ValueError(f"countries repeat: {names}")
        if len(names) < 2:
            raise ValueError(f"a benchmark needs at least 2 countries, not {names}")
        order = {c.name: i for i, c in enumerate(pack.countries)}
        return sorted(names, key=order.__getitem__)

    @model_validator(mode="after")
    def _concepts_are_the_packs(self) -> Build3XCMConfig:
        self.concepts.check_include(self.pack())
        return self

    @model_validator(mode="after")
    def _web_hits_need_the_http_downloader(self) -> Build3XCMConfig:
        # The local importer has no SSRF guard: a web search must not hand it URLs (it would refuse each one anyway).
        problem = web_hits_problem(self.search, self.download)
        if problem:
            raise ValueError(problem)
        return self

    @property
    def language_codes(self) -> list[str]:
        by_name = self.pack().country_by_name()
        return sorted({code for c in self.countries for code in by_name[c].language_codes})

    @classmethod
    def demo(cls, **overrides: Any) -> Build3XCMConfig:
        """The offline demo: a generated corpus of the pack's demo concepts and countries (the default pack's: 6
        concepts x 8 countries in 6 language groups; see its pack.json `demo`)."""
        countries, concepts = demo_selection(overrides.get("reference"))
        base: dict[str, object] = {  # a partial config: `model_validate` checks it
            "countries": countries,
            "demo_corpus": DemoCorpusConfig(countries=countries, concepts=concepts).model_dump(),
            "concepts": {"backend": "shipped", "include": concepts},
            # Nobody annotates a demo: its review files are written, and the auto-accept policy (stated first thing
            # in the release card) decides. Production configs wait for people.
            "review": {"backend": "label_studio_files", "when_unreviewed": "auto_accept"},
            "release": {"version": "0.1.0-demo"},
        }
        return cls.model_validate(merge(base, overrides))
