"""A stop signal that arrives while the CLI imports its subcommands waits until the import is done.

Raised inside an extension module's initialisation (`import torch`) a KeyboardInterrupt can abort the
interpreter (exit -6, seen once in the randomized stops test); deferred, it stops the program normally.
"""

from __future__ import annotations

import os
import signal

import pytest

from inferix_core import cli
from inferix_core.stopping import STOP, stop_once

pytestmark = pytest.mark.skipif(not hasattr(signal, "pthread_sigmask"), reason="POSIX signal masks only")


def test_a_stop_during_the_imports_is_delivered_after_them():
    previous = signal.signal(signal.SIGINT, stop_once)
    STOP["raised"] = False
    seen = []
    try:
        with pytest.raises(KeyboardInterrupt), cli._stop_signals_deferred():
            os.kill(os.getpid(), signal.SIGINT)  # lands "inside the import"
            seen.append("import finished")  # not cut short
        assert seen == ["import finished"]
    finally:
        signal.signal(signal.SIGINT, previous)
        STOP["raised"] = False
