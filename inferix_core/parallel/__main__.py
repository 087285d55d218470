"""torchrun --nproc-per-node N -m inferix_core.parallel run WORKFLOW.json (see launch.py, docs/parallel.md)."""

import sys

from ..cli import main as cli_main
from .launch import main

sys.exit(main(cli_main))
