"""perf/gpu.py and perf/gpu_pipeline.py (issue 61) at tiny sizes on the CPU: the device run is one prepared script,
so every section it runs there has run here first."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flows.mixcube.config import BuildMixCubeConfig
from perf import gpu
from perf.gpu_pipeline import build_config


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _run(tmp_path: Path, only: str) -> list[dict]:
    out = tmp_path / "gpu.jsonl"
    code = gpu.main(["--tiny", "--only", only, "--out", str(out), "--models-dir", str(tmp_path / "models")])
    records = _records(out)
    assert code == 0, [r for r in records if r["measure"] == "error"]
    assert records[0]["measure"] == "start" and records[-1]["measure"] == "done" and records[-1]["failed"] == []
    return records


def test_sam_bge_llava_sections_measure_and_save(tmp_path: Path) -> None:
    records = _run(tmp_path, "sam,bge_m3,llava")
    by = {r["measure"] for r in records}
    assert {"sam_encoder", "sam_pipeline", "bge_m3", "llava_answer"} <= by
    for r in records:
        for key in ("images_per_s", "sentences_per_s", "answers_per_s"):
            if key in r:
                assert r[key] > 0, r
    assert (tmp_path / "models" / "sam_vit_h.pth").stat().st_size > 0  # what the pipeline's SAM stage loads


@pytest.mark.slow
def test_sdxl_section_counts_flops_and_saves_a_loadable_pipeline(tmp_path: Path) -> None:
    records = _run(tmp_path, "sdxl")
    steps = [r for r in records if r["measure"] == "sdxl_inpaint"]
    assert [r["batch"] for r in steps] == [1, 2]
    assert steps[1]["unet_tflop_per_step"] > steps[0]["unet_tflop_per_step"] > 0  # twice the batch, more FLOPs
    # Timings only exist and are positive: their ratios move with the machine's load (a suite on a busy machine).
    assert steps[0]["pipeline_s"] > 0 and steps[0]["unet_share"] > 0
    from synthesis.inpaint import SdxlInpaintConfig, build_inpainter

    inpainter = build_inpainter(SdxlInpaintConfig(model=str(tmp_path / "models" / "sdxl-inpaint")))
    assert inpainter.model_id  # the saved folder is one the stage's loader accepts


def test_unknown_section_is_a_one_line_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        gpu.main(["--tiny", "--only", "sdxl,nope"])
    assert exit_info.value.code == 2
    assert "--only: unknown section(s) nope" in capsys.readouterr().err


def test_pipeline_config_is_a_valid_mixcube_build(tmp_path: Path) -> None:
    models = tmp_path / "models"
    (models / "sdxl-inpaint").mkdir(parents=True)
    for name in ("sam_vit_h.pth", "open_clip-ViT-B-32.pt"):
        (models / name).write_bytes(b"x")
    cfg = BuildMixCubeConfig.demo(**build_config(models, tmp_path, steps=60, cultures=2))
    assert cfg.inpaint.num_inference_steps == 60 and cfg.masks.backend == "sam"
    assert cfg.filters.clip is not None and cfg.filters.clip.embedder.precision == "fp16"
    assert cfg.originals.cultures == ["Azerbaijan", "South Korea"]
