#!/usr/bin/env bash
# tests/integration/test_gpu_memory.py (a core UMT5-XXL CLIPLoader and our Load World Model in one real ComfyUI
# server under a memory limit that fits each alone) on a GPU machine with no network, on ComfyUI v0.3.64 and v0.27.
#
#   bash bench/run_gpu_memory.sh prepare [DIR]   # here: fills DIR (default .gpumem, git-ignored) with what the
#                                                # GPU image lacks: pruned ComfyUI trees (.tar.xz), wheels, stand-ins
#   bash .gpumem/run_gpu_memory.sh device        # there, from the repo root (carry .gpumem): logs in $OUT
#
# The GPU image has torch, transformers, sentencepiece, safetensors, aiohttp, ... but not every ComfyUI
# requirement. What the two servers need to start and run this workflow (found by starting each on CPU with the
# image's missing packages blocked): torchsde + trampoline (both), SQLAlchemy, pydantic (+ pydantic-core,
# annotated-types, typing-inspection, typing-extensions) and comfy-aimdo (v0.27: its DynamicVRAM is on by
# default on NVIDIA, so it is the real one). Two stand-ins instead of packages: `av` (PyAV, ~35 MB: ComfyUI's
# comfy_api imports it at start-up; this workflow encodes no video, it ends in SaveLatent) and
# `comfyui_frontend_package` (a blank static/ page: the server exits without one; the test uses the HTTP API).
# Nodes whose optional imports fail (kornia, spandrel, alembic, API nodes, ...) are only logged by ComfyUI.
set -u
MODE=${1:-}
VERSIONS=${VERSIONS:-"0.3.64 0.27"}
COMFY_SRC=${COMFY_SRC:-/work/comfyui-}   # + version: the CPU-side trees

prepare() {
  local dest=${1:-.gpumem}
  mkdir -p "$dest/whl" "$dest/stub/av/subtitles" "$dest/stub/comfyui_frontend_package/static"
  for v in $VERSIONS; do
    tar --exclude=.git --exclude=__pycache__ --exclude=./tests --exclude=./tests-unit \
      -C "$COMFY_SRC$v" -cJf "$dest/comfyui-$v.tar.xz" .
  done
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 -d "$dest/whl" \
    torchsde==0.2.6 trampoline==0.1.2 SQLAlchemy==2.1.9 comfy-aimdo==0.4.10 pydantic==2.14.4 pydantic-core==2.50.5 \
    annotated-types==0.8.0 typing-inspection==0.4.5 typing-extensions==4.16.0
  cat >"$dest/stub/av/__init__.py" <<'EOF'
"""Stand-in for PyAV (absent on the GPU machine): ComfyUI and the node pack import it; it encodes nothing.

Any attribute is a placeholder class, so `from av.container import InputContainer` and annotations work;
opening or encoding a video fails. test_gpu_memory.py's workflow never touches video (it ends in SaveLatent).
"""


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return type(name, (), {})
EOF
  for m in codec container error video audio subtitles/__init__ subtitles/stream; do
    cp "$dest/stub/av/__init__.py" "$dest/stub/av/$m.py"
  done
  echo '"""Stand-in for comfyui-frontend-package: a blank page; the test uses the HTTP API only."""' \
    >"$dest/stub/comfyui_frontend_package/__init__.py"
  echo '<!doctype html><title>no frontend</title>' >"$dest/stub/comfyui_frontend_package/static/index.html"
  # this checkout's committed code (the device tool sends the session's checkout, which may be another branch or
  # mid-edit): laid over a copy of the sent tree there; big binaries (bundled weights, fixtures) come from the sent tree
  git archive --format=tar HEAD -- . ':(exclude)inferix_core/assets/bundled' ':(exclude)tests/fixtures' \
    ':(exclude)docs' ':(exclude)example_workflows' ':(exclude)bench/fixtures' | xz -T2 >"$dest/src.tar.xz"
  git rev-parse HEAD >"$dest/src.commit"
  cp "$0" "$dest/run_gpu_memory.sh"
  du -sh "$dest"
}

device() {
  local here
  here=$(cd "$(dirname "$0")" && pwd)
  OUT=${OUT:-out}
  mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
  {
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
    python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())"
  } 2>&1 | tee "$OUT/gpu.txt"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    "$here"/whl/*.whl 2>&1 | tail -3 | tee -a "$OUT/gpu.txt" || return 1
  local tree=/tmp/ComfyUI-Inferix
  rm -rf "$tree" && mkdir -p "$tree" && tar --exclude=./.gpumem --exclude=./.git -cf - . | tar -C "$tree" -xf - \
    && tar -C "$tree" -xJf "$here/src.tar.xz" && cd "$tree" || return 1
  echo "tree: commit $(cat "$here/src.commit") over the sent tree, in $tree" | tee -a "$OUT/gpu.txt"
  export PYTHONPATH=/tmp/site:$here/stub PYTHONUNBUFFERED=1 COMFYUI_PYTHON=python3
  local start end deadline=$(($(date +%s) + ${TOTAL_S:-560}))
  for v in $VERSIONS; do
    rm -rf "/tmp/comfyui-$v" && mkdir -p "/tmp/comfyui-$v" && tar -C "/tmp/comfyui-$v" -xJf "$here/comfyui-$v.tar.xz"
    local left=$((deadline - $(date +%s)))
    [ "$left" -gt "${CAP_S:-330}" ] && left=${CAP_S:-330}  # so that a hung first version leaves time for the next
    [ "$left" -gt 60 ] || { echo "ComfyUI $v: no time left" | tee -a "$OUT/gpu.txt"; continue; }
    start=$(date +%s)
    # SIGINT on time-out: pytest unwinds and the conftest stops the server (its own process group)
    COMFYUI_DIR=/tmp/comfyui-$v timeout -s INT -k 30 "$left" python3 -m pytest tests/integration/test_gpu_memory.py \
      -v -s -rs -p no:cacheprovider -o tmp_path_retention_policy=all --basetemp="/tmp/pt-$v" 2>&1 | tee "$OUT/pytest-$v.log"
    local rc=${PIPESTATUS[0]}
    end=$(date +%s)
    echo "ComfyUI $v: pytest exit $rc in $((end - start)) s" | tee -a "$OUT/gpu.txt"
    local log
    log=$(find "/tmp/pt-$v" -name server.log 2>/dev/null | head -1)
    if [ -n "$log" ]; then cp "$log" "$OUT/server-$v.log"; else echo "no server.log under /tmp/pt-$v" | tee -a "$OUT/gpu.txt"; fi
    rm -rf "/tmp/pt-$v"  # 14 GB of random weights
  done
}

case $MODE in
  prepare) shift; prepare "$@" ;;
  device) device ;;
  *) echo "usage: $0 prepare [DIR] | device" >&2; exit 2 ;;
esac
