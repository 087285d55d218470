#!/usr/bin/env bash
# Issue #19's side-by-side rows on one GPU in one device call (< 600 s): ComfyUI core's AR video path
# (bench/compare_comfy_core.py, eager/eager and compile/compile) and LongLive-1.3B's own pipeline
# (bench/compare_longlive.py, window 12 + sink 3 + LoRA merged; theirs eager, ours eager and compiled) against
# ours, 81 frames, 480x832, bf16. Each part has its own time limit and writes its JSON after every row, so a part
# cut short keeps what it measured. Writes under ${OUT:-out}/.
# Needs what bench/pack_peer_refs.sh puts in the ignored .ref/comfy, .ref/ck, .ref/ll1 (and .whl/comfy_kitchen-*,
# optional: without it core's RoPE runs in comfy_kitchen's eager backend), and omegaconf + antlr4 wheels
# (.ref/dz/*.whl; LongLive's config loader, not in the GPU image). .ref/dz/d.zip (diffusers) is not needed: the
# harness stubs the two diffusers base classes LongLive's model uses when no diffusers is importable.
#   REPEATS=2 (timed runs per row, after one warm-up)   CORE_S=300 LL_S=250 (time limits, seconds)
set -u
OUT=${OUT:-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
SITE=/tmp/peers_site
wheels=()
for w in .whl/comfy_kitchen-*.whl .ref/dz/omegaconf-*.whl .ref/dz/antlr4*.whl; do [ -f "$w" ] && wheels+=("$w"); done
if [ ${#wheels[@]} -gt 0 ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "${wheels[@]}"
fi
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH}:$SITE
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
git rev-parse HEAD 2>/dev/null | tee "$OUT/commit.txt"
python3 -c "import torch, peft, omegaconf; print('torch', torch.__version__, 'peft', peft.__version__)" | tee -a "$OUT/gpu.txt"
timeout "${CORE_S:-300}" python3 bench/compare_comfy_core.py --comfyui-dir .ref/comfy --kitchen-dir .ref/ck \
  --warmup 1 --repeats "${REPEATS:-2}" --json "$OUT/core.json" 2>&1 | tee "$OUT/core.txt"
timeout "${LL_S:-250}" python3 bench/compare_longlive.py --reference-dir .ref/ll1 \
  --warmup 1 --repeats "${REPEATS:-2}" --json "$OUT/longlive.json" 2>&1 | tee "$OUT/longlive.txt"
echo "done; files in $OUT:"; ls -la "$OUT"
