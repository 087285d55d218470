"""`python -m inferix_core ...`; under torchrun (WORLD_SIZE > 1) every rank goes through the parallel launcher."""

import os
import sys

from .cli import main as cli_main

if int(os.environ.get("WORLD_SIZE", "1")) > 1:
    from .parallel.launch import main as launch_main

    sys.exit(launch_main(cli_main))
sys.exit(cli_main())
