#!/usr/bin/env bash
# The packages perf/gpu_device_run.sh needs that the device image (Python 3.12, torch, transformers) lacks, as
# cp312 wheels in .whl/ (ignored through .git/info/exclude; about 35 MB, under the device call's 64 MiB). The
# versions are this project's lock. imagecodecs travels trimmed to its PNG codec (the full wheel is 26 MB).
#   bash perf/gpu_wheels.sh
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx "/.whl/" .git/info/exclude 2>/dev/null || echo "/.whl/" >> .git/info/exclude
mkdir -p .whl
platforms="--platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64"
lock() { grep -i -E "^$1==" requirements.lock | head -1; }
names="amplitude-analytics annotated-types asgi-lifespan babel braceexpand cachetools coolname datasets defusedxml dill
  exceptiongroup griffecli griffelib h2 hpack httpcore2 httpx2 hyperframe jsonpointer jsonschema
  jsonschema-specifications lz4 multiprocess opentelemetry-api orjson pendulum prefect pydantic pydantic-core
  pydantic-extra-types pydantic-settings python-dotenv python-slugify pytz referencing rfc3339-validator rpds-py
  starlette text-unidecode toml truststore typing-inspection tzdata webdataset websockets diffusers segment-anything
  open-clip-torch ftfy wcwidth importlib-metadata piq"
for name in $names; do
  pin=$(lock "$name" || true)
  [ -n "$pin" ] || pin=$(lock "${name//-/_}" || true)
  [ -n "$pin" ] || { echo "gpu_wheels: $name is not in requirements.lock" >&2; exit 2; }
  # shellcheck disable=SC2086
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $platforms \
    -d .whl "$pin"
done
pin=$(lock imagecodecs)
scratch=$(mktemp -d)
# shellcheck disable=SC2086
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $platforms \
  -d "$scratch" "$pin"
(cd "$scratch" && unzip -q imagecodecs-*.whl && mkdir -p trim/imagecodecs trim/imagecodecs.libs &&
  cp imagecodecs/*.py imagecodecs/*.pyi imagecodecs/_imcd.* imagecodecs/_png.* imagecodecs/_shared* trim/imagecodecs/ &&
  cp imagecodecs.libs/libpng16-* trim/imagecodecs.libs/ && cp -r imagecodecs-*.dist-info trim/)
tar czf .whl/imagecodecs-trim.tgz -C "$scratch/trim" .
rm -rf "$scratch"
du -sh .whl
