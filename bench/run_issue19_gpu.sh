#!/usr/bin/env bash
# Issue #19 on one GPU in one device call (< 600 s): the CUDA tests of the CUDA-graph runner and the FA4
# backend, then ours eager / compiled / compiled with CUDA graphs (diffusion), then end to end with the Wan VAE at
# the loader's CUDA decode options and slicing (one latent frame per call, the previous state released) against
# whole blocks and the previous state released alone. Every part has its own time limit and writes its JSON as it goes, so a
# part cut short still returns what it measured. Writes under ${OUT:-out}/.
#   REF=/path/to/Self-Forcing  adds the reference's rows (bench/compare_reference.py --reference-dir)
#         (the tracked tree is ~62 of the device's 64 MiB: carry only its code, e.g. `git --git-dir=MIRROR archive HEAD
#         configs model pipeline utils wan demo_utils '*.py' | tar -x -C .ref/sfm`, 0.8 MB; prompts/, images/ stay)
#   PARTS=tests,diffusion,e2e  (the default: all three) runs only the parts named, for a call split in two;
#         `profile` adds bench/profile_engine.py --efficiency (each kernel group against its measured peak);
#         `offload` adds bench/offload_hiding_ab.py (the offload's transfer hiding, the eighth pass's levers on/off)
#   DIFF_VARIANTS / E2E_VARIANTS  override the variant lists (FA4 variants are added to the diffusion list
#         only when flash_attn.cute imports: pip install '.[fa4]' first)
set -u
OUT=${OUT:-out}
PARTS=,${PARTS:-tests,diffusion,e2e},
part() { [[ $PARTS == *,$1,* ]]; }
mkdir -p "$OUT"
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
git rev-parse HEAD 2>/dev/null | tee "$OUT/commit.txt"
python -c "import torch; print('torch', torch.__version__)" | tee -a "$OUT/gpu.txt"
REFARG=()
if [ -n "${REF:-}" ] && [ -d "$REF" ]; then REFARG=(--reference-dir "$REF"); fi
VARIANTS=${DIFF_VARIANTS:-eager,compile,compile+graphs}
E2E=${E2E_VARIANTS:-compile+vaewhole,compile+vaerelease,compile}
PROFILE_ATTENTION=sdpa
if python -c "import flash_attn.cute.interface" 2>/dev/null; then
  [ -z "${DIFF_VARIANTS:-}" ] && VARIANTS=$VARIANTS,compile+graphs+fa4
  PROFILE_ATTENTION=flash_attn_4; echo "flash-attn-4: importable" | tee -a "$OUT/gpu.txt"
else
  echo "flash-attn-4: not installed (fa4 variants skipped; its CUDA test skips)" | tee -a "$OUT/gpu.txt"
fi
# the tests run from a copy without the pack's __init__.py: it imports the nodes, hence PyAV, absent on the GPU image
TESTS_COPY=/tmp/inferix_tests_copy
if part tests || part offload; then rm -rf "$TESTS_COPY" && cp -r . "$TESTS_COPY" && rm -f "$TESTS_COPY/__init__.py"; fi
part tests && (cd "$TESTS_COPY" && timeout 150 python -m pytest -m cuda -v -rs -p no:cacheprovider \
  tests/models/test_cuda_graphs_cuda.py tests/attention/test_fa4_backend.py tests/kernels 2>&1) | tail -60 | tee "$OUT/cuda_tests.txt"
part offload && (cd "$TESTS_COPY" && timeout 200 python bench/offload_hiding_ab.py 2>&1) | tail -30 | tee "$OUT/offload_ab.txt"
part diffusion && timeout 190 python bench/compare_reference.py ${REFARG[@]+"${REFARG[@]}"} --what diffusion --variants "$VARIANTS" \
  --warmup 1 --repeats 3 --json "$OUT/graphs_diffusion.json" 2>&1 | grep -v "^\s*$" | tail -40 | tee "$OUT/graphs_diffusion.txt"
part e2e && timeout 260 python bench/compare_reference.py ${REFARG[@]+"${REFARG[@]}"} --what e2e --variants "$E2E" \
  --warmup 1 --repeats 2 --json "$OUT/graphs_e2e.json" 2>&1 | grep -v "^\s*$" | tail -40 | tee "$OUT/graphs_e2e.txt"
part profile && timeout 200 python bench/profile_engine.py --compile --cuda-graphs --efficiency \
  --attention "${PROFILE_ATTENTION_OVERRIDE:-$PROFILE_ATTENTION}" --json "$OUT/profile.json" 2>&1 | tail -45 | tee "$OUT/profile.txt"
echo "done; files in $OUT:"; ls -la "$OUT"
