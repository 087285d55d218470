#!/usr/bin/env bash
# The CUDA tests (`pytest -m cuda`) on a GPU machine, e.g. through the device tool:
#   bash bench/run_cuda_tests.sh            # results in $OUT (default ./out): gpu.txt, cuda_tests.txt, junit.xml
# They run from a copy of the tree without the pack's root __init__.py: pytest imports it as a package and it
# loads the node pack, whose video output needs PyAV, which the GPU image lacks; test modules that import PyAV
# themselves collect against an empty stand-in module (logged in gpu.txt).
set -u
OUT=${OUT:-out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
python -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" | tee -a "$OUT/gpu.txt"
git rev-parse HEAD 2>/dev/null | tee -a "$OUT/gpu.txt"
STUB=
if ! python -c "import av" 2>/dev/null; then  # logged: modules that import PyAV at the top then collect
  mkdir -p /tmp/avstub/av && echo '"""Stand-in for PyAV, absent on this machine."""' >/tmp/avstub/av/__init__.py
  echo "PyAV absent: an empty 'av' module lets test modules import (no CUDA test encodes video)" | tee -a "$OUT/gpu.txt"
  STUB=/tmp/avstub:
fi
COPY=/tmp/inferix_cuda_tests
rm -rf "$COPY" && cp -r . "$COPY" && rm -f "$COPY/__init__.py"
# the node pack under its installed name (the GPU image has the project uninstalled): tests/nodes import inferix_nodes
[ -e "$COPY/inferix_nodes" ] || ln -s "$COPY/nodes" "$COPY/inferix_nodes"
cd "$COPY" && PYTHONPATH=$STUB. timeout "${TESTS_TIMEOUT:-520}" python -m pytest -m cuda -q -rs -p no:cacheprovider --continue-on-collection-errors \
  --junitxml="$OUT/junit.xml" ${TESTS:-tests} 2>&1 | tail -80 | tee "$OUT/cuda_tests.txt"
