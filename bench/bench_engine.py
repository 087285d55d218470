"""Engine benchmark (same protocol as `inferix bench`): e.g.

python bench/bench_engine.py --preset wan-1.3b --dtype bf16 --json out/engine.json
python bench/bench_engine.py --preset tiny --device cpu --dtype fp32   # smoke test
"""

import sys

from inferix_core.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", *sys.argv[1:]]))
