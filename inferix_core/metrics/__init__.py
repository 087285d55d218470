"""Video quality metrics; LV-Bench (VDE + VBench + FramePack drift) is the one benchmark so far."""

from .lvbench import *  # noqa: F403
from .lvbench import __all__  # noqa: F401
