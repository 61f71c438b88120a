"""The typed build config of `build-mixcube`: one section per stage, each naming its backend.

The defaults are the embedded backends (Haar faces, ellipse masks, the placeholder inpainter, offline review files)
except the automatic filter, which is BRISQUE as in the paper (App. A.6) and needs its weights file; the demo
switches it off. A production config names YuNet, SAM and SDXL with their weights (docs/operators.md, "The MixCuBe
build").
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import Field, model_validator

from annotation.backends import LabelStudioFilesReviewConfig, ReviewConfig
from collectors.fetch import web_hits_problem
from collectors.mixcube_originals import DemoOriginalsConfig, LocalOriginalsConfig, cells
from collectors.mixcube_search import SearchOriginalsConfig
from collectors.ssrf import storage_refusal
from curation.synthesis_filters import SynthesisFilterConfig
from data.publish.release import ReleaseConfig
from flows.engine.config import BuildConfigBase, merge
from synthesis.faces import FaceConfig, HaarFaceConfig
from synthesis.inpaint import InpaintConfig, PlaceholderInpaintConfig
from synthesis.masks import EllipseMaskConfig, MaskConfig


class BuildMixCubeConfig(BuildConfigBase):
    """Everything that decides a MixCuBe build. The same config always resolves to the same build id."""

    build_prefix: ClassVar[str] = "mixcube"
    # How it is reviewed and how the work is cut do not change what is drawn: adding a completed QA export, raising
    # the attempt cap or moving to a Label Studio server continues the same build (its stage fingerprints redo what
    # these change).
    outside_build_id: ClassVar[frozenset[str]] = BuildConfigBase.outside_build_id | {
        "qa",
        "max_attempts",
        "shard_size",
        "gpu_concurrency_limit",
        "target_per_cell",
    }

    originals: Annotated[
        LocalOriginalsConfig | SearchOriginalsConfig | DemoOriginalsConfig, Field(discriminator="backend")
    ] = Field(
        description="Where the originals come from: a folder with a labels CSV, an image search and the downloader, "
        "or the offline demo scenes."
    )
    faces: FaceConfig = Field(default_factory=HaarFaceConfig, description="Face detector (App. A.4: YuNet).")
    masks: MaskConfig = Field(default_factory=EllipseMaskConfig, description="Masks from the face boxes (SAM).")
    inpaint: InpaintConfig = Field(
        default_factory=PlaceholderInpaintConfig, description="Inpainting (App. C.2: SDXL, 60 steps, guidance 7)."
    )
    seed: int = Field(default=0, description="Base seed; each (original, ethnicity, attempt) derives its own.")
    filters: SynthesisFilterConfig = Field(
        default_factory=SynthesisFilterConfig, description="Automatic BRISQUE / CLIP filters (App. A.6)."
    )
    qa: ReviewConfig = Field(
        default_factory=LabelStudioFilesReviewConfig,
        description="Human QA of the filtered syntheses (Label Studio server, files, or auto-accept).",
    )
    max_attempts: int = Field(
        default=3,
        ge=1,
        le=10,
        description="Attempts per (original, ethnicity), the first included; pairs still without an accepted image "
        "after this many are reported as left over.",
    )
    target_per_cell: int = Field(
        default=33,
        ge=1,
        description="Released originals wanted per culture x category (App. A.2: 33); cells short of it are "
        "reported in the stage stats, the manifest and the card.",
    )
    shard_size: int = Field(
        default=16, ge=1, description="Originals (faces, masks) or attempts (inpainting, filters) per shard."
    )
    gpu_concurrency_limit: str | None = Field(
        default="gpu",
        description="Prefect global concurrency limit held while a model runs on the GPU (created by the deployment "
        "set-up; ignored when it does not exist or outside Prefect).",
    )
    release: ReleaseConfig = Field(default_factory=ReleaseConfig)

    @model_validator(mode="after")
    def _originals_are_fetched_through_the_guard(self) -> BuildMixCubeConfig:
        # fsspec opens a local collection and the local importer reads search hits; neither has an SSRF guard, so
        # web URLs must reach the HTTP downloader instead.
        originals = self.originals
        problem = None
        if isinstance(originals, SearchOriginalsConfig):
            problem = web_hits_problem(originals.search, originals.download, prefix="originals.")
        elif isinstance(originals, LocalOriginalsConfig):
            for name in ("root", "labels_csv"):
                refusal = storage_refusal(getattr(originals, name))
                if refusal:
                    problem = (
                        f"originals.{name}: {refusal}: a local collection is read from storage; web images come "
                        "through originals: {backend: search} and the SSRF-guarded HTTP downloader"
                    )
                    break
        if problem:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _cultures_are_the_packs(self) -> BuildMixCubeConfig:
        """The cultures and categories the originals name are the reference pack's (its mixcube.json)."""
        mix = self.pack().mixcube()
        cells(mix, getattr(self.originals, "cultures", None), getattr(self.originals, "categories", None))
        return self

    @property
    def is_demo(self) -> bool:
        return isinstance(self.originals, DemoOriginalsConfig)

    @classmethod
    def demo(cls, **overrides: Any) -> BuildMixCubeConfig:
        """The offline demo: composed originals for 5 cultures x 3 categories, embedded backends, no filters."""
        base: dict[str, object] = {  # a partial config: `model_validate` checks it
            "originals": DemoOriginalsConfig().model_dump(),
            "filters": {"brisque": None, "clip": None},
            "target_per_cell": DemoOriginalsConfig().per_cell,
            # Nobody reviews placeholder syntheses: the auto-accept policy decides, and the card says so first.
            "qa": {"backend": "label_studio_files", "when_unreviewed": "auto_accept"},
            "release": {"version": "0.1.0-demo"},
        }
        originals = overrides.get("originals")
        if isinstance(originals, dict) and originals.get("backend", "demo") != "demo":
            del base["originals"]  # another source replaces the demo's settings rather than merging into them
        return cls.model_validate(merge(base, overrides))
