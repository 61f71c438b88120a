#!/usr/bin/env bash
# The one device call of issue 61, in the order the issue sets: the CUDA tests, perf/gpu.py (SDXL, open_clip, SAM,
# BGE-M3), the MixCuBe GPU stages through the pipeline (perf/gpu_pipeline.py), then torch.compile and LLaVA with
# what time is left. Run from the repository root on the device, with the packages the image lacks as wheels in
# .whl/ (docs/performance.md, "GPU"):  bash perf/gpu_device_run.sh [TOTAL_S]
set -uo pipefail
total=${1:-540}
start=$SECONDS
out=${OUT:-/tmp/gpu-out}
mkdir -p "$out" /tmp/models
left() { echo $((total - (SECONDS - start))); }
if [ ! -d /tmp/site ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
  tar xzf .whl/imagecodecs-trim.tgz -C /tmp/site || exit 3
fi
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 DO_NOT_TRACK=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv | tee "$out/nvidia-smi.csv"
python3 -c "import prefect, diffusers, open_clip, segment_anything, imagecodecs, flows.mixcube.build; print('imports ok')" || exit 4
echo "== CUDA tests ($(left) s left)"
timeout 120 python3 -m pytest --noconftest -p no:cacheprovider -q -rA -k cuda \
  tests/curation/test_image_embeddings.py tests/synthesis/test_inpaint.py 2>&1 | tail -25 | tee "$out/cuda_tests.txt"
echo "== perf/gpu.py ($(left) s left)"
timeout 320 python3 perf/gpu.py --only sdxl,open_clip,sam,bge_m3 --out "$out/gpu.jsonl" --models-dir /tmp/models \
  --budget-s 270 2>&1 | grep -v "it/s\]" | tail -80
echo "== pipeline ($(left) s left)"
timeout 150 python3 perf/gpu_pipeline.py --models-dir /tmp/models --root /tmp/gpu-build --steps 60 --cultures 2 \
  > "$out/pipeline.log" 2>&1
tail -c 3000 "$out/pipeline.log"
grep '^{"measure"' "$out/pipeline.log" >> "$out/gpu.jsonl"
rest=$(( $(left) - 25 ))
echo "== compile, llava ($rest s left)"
if [ "$rest" -gt 60 ]; then
  timeout "$rest" python3 perf/gpu.py --only llava,sdxl_compile --out "$out/gpu.jsonl" --budget-s $((rest - 20)) 2>&1 | tail -20
fi
echo "== done in $((SECONDS - start)) s"
