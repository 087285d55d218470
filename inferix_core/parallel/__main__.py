"""torchrun --nproc-per-node N -m inferix_core.parallel run WORKFLOW.json (see launch.py, docs/parallel.md)."""

import sys

from .launch import main

sys.exit(main())
