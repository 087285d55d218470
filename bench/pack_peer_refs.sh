#!/usr/bin/env bash
# Copy the few files the side-by-side harnesses import from the other projects into the git-ignored .ref/
# (.git/info/exclude has /.ref/), so that they travel to the GPU machine with the working tree (64 MiB in all).
# Nothing here is committed and nothing of theirs is in the repository: the lists are the import closures,
# found by importing the harness's own path (with its shims) and listing the modules loaded from each checkout.
#   .ref/comfy : ComfyUI's CausalWanModel path (comfy/...), comfy/k_diffusion/sampling.py (its sample_ar_video)
#                and comfy_extras/nodes_torch_compile.py (the node's guard filter); bench/compare_comfy_core.py
#                compiles those two functions from the files
#   .ref/ck    : comfy_kitchen's Python files (core's RoPE calls it; `--kitchen-dir .ref/ck`): its eager backend
#   .whl/      : with CK_WHEEL=1 (default), comfy_kitchen's cp312 wheel for the GPU image (7 MB, its CUDA extension
#                inside; /.whl/ is ignored too): installed there, core runs its RoPE as users on cu130 do
#   .ref/ll1   : LongLive v1.0's pipeline path (wan/, utils/, pipeline/) and configs/longlive_inference.yaml
# Usage: COMFY=/work/comfyui-0.27 LL=/work/ref/longlive-v1.0 KITCHEN=<site-packages with comfy_kitchen> \
#        SITE=<folder with peft, omegaconf (pip --target)> bash bench/pack_peer_refs.sh
# Only peft, accelerate, omegaconf, antlr4 and yaml are taken from SITE (linked into a temporary folder), so the
# closure is the one of the GPU image, which has no diffusers (the harness stubs its two base classes there).
set -euo pipefail
cd "$(dirname "$0")/.."
COMFY=${COMFY:-/work/comfyui-0.27}
LL=${LL:-/work/ref/longlive-v1.0}
KITCHEN=${KITCHEN:-/work/comfyui-venv-0.27/lib/python3.11/site-packages}
SITE=${SITE:-/tmp/refsite}
CK_VERSION=${CK_VERSION:-0.2.16}  # ComfyUI v0.27's requirements.txt pin
EXCLUDE="$(git rev-parse --git-common-dir)/info/exclude"
grep -qx '/.ref/' "$EXCLUDE" || { echo "add /.ref/ to $EXCLUDE first"; exit 1; }
rm -rf .ref/comfy .ref/ck .ref/ll1
mkdir -p .ref/comfy .ref/ck .ref/ll1
LINKS=$(mktemp -d)
trap 'rm -rf "$LINKS"' EXIT
for d in "$SITE"/peft* "$SITE"/accelerate* "$SITE"/omegaconf* "$SITE"/antlr4* "$SITE"/yaml "$SITE"/_yaml "$SITE"/pyyaml*; do
  [ -e "$d" ] && ln -s "$d" "$LINKS/"
done
SITE=$LINKS

closure() {  # $1: checkout, $2: python that imports the harness's path; prints the checkout's loaded files
  PYTHONPATH=.:$KITCHEN:$SITE python - "$1" <<EOF
import sys
from pathlib import Path
sys.argv = sys.argv[:1]
root = Path("$1").resolve()
sys.path.insert(0, "bench"); sys.path.insert(0, "bench/fixtures")
$2
for m in list(sys.modules.values()):
    f = getattr(m, "__file__", None)
    if f and Path(f).resolve().is_relative_to(root):
        print(Path(f).resolve().relative_to(root))
EOF
}

copy() {  # $1: from, $2: to, then relative paths on stdin
  while read -r rel; do install -D -m 644 "$1/$rel" "$2/$rel"; done
}

closure "$COMFY" "import torch, compare_comfy_core as c; c.import_core(root, torch.device('cpu'), Path('$KITCHEN'))" \
  | sort -u | copy "$COMFY" .ref/comfy
printf '%s\n' comfy_extras/nodes_torch_compile.py comfy/k_diffusion/sampling.py | copy "$COMFY" .ref/comfy
(cd "$KITCHEN" && find comfy_kitchen -name '*.py') | copy "$KITCHEN" .ref/ck
if [ "${CK_WHEEL:-1}" = 1 ]; then
  grep -qx '/.whl/' "$EXCLUDE" || { echo "add /.whl/ to $EXCLUDE first"; exit 1; }
  python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 -d .whl "comfy-kitchen==$CK_VERSION" \
    || echo "comfy_kitchen wheel not fetched: core's RoPE will run in its eager backend (.ref/ck)"
fi
closure "$LL" "
import gen_longlive as gl
gl.install_shims(root)
import wan.modules.attention, wan.modules.causal_model, wan.modules.model, utils.wan_wrapper, utils.lora_utils
import pipeline.causal_inference" | sort -u | copy "$LL" .ref/ll1
echo configs/longlive_inference.yaml | copy "$LL" .ref/ll1
echo "files: comfy $(find .ref/comfy -type f | wc -l), ck $(find .ref/ck -type f | wc -l), ll1 $(find .ref/ll1 -type f | wc -l)"
du -sh .ref/comfy .ref/ck .ref/ll1 .whl/comfy_kitchen-* 2>/dev/null || true
du -shc .ref/comfy .ref/ck .ref/ll1 | tail -1
