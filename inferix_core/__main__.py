"""`python -m inferix_core ...`; under torchrun (WORLD_SIZE > 1) every rank goes through the parallel launcher."""

import os
import sys

if int(os.environ.get("WORLD_SIZE", "1")) > 1:
    from .parallel.launch import main
else:
    from .cli import main

sys.exit(main())
