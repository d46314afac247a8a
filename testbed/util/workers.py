"""Worker processes that end with their parent.

The worker processes of the local pool (testbed/util/executor.py: a sweep's ``--workers N``) call
`die_with_parent` when they start. If the parent is killed (SIGKILL, the out-of-memory killer, a closed terminal), its
workers end too instead of training on, orphaned, and writing results that nobody collects: on
Linux the kernel sends them SIGKILL (``prctl(PR_SET_PDEATHSIG)``); everywhere, a daemon thread that
watches the parent's process id ends the worker within ``poll_s`` seconds. Finished runs are on
disk already (one file per run, written atomically), so rerunning the same command resumes.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

# The modules every worker process imports first (os.pathsep-separated names: a user's own stabilizers, set by
# testbed.stabilizers.registry); spawned local workers inherit it, a Ray job is given the command's.
IMPORTS_ENV = "TESTBED_IMPORTS"

PR_SET_PDEATHSIG = 1


def set_parent_death_signal(sig: int = signal.SIGKILL) -> bool:
    """Ask the kernel to send this process ``sig`` when its parent ends (Linux's ``prctl(PR_SET_PDEATHSIG)``);
    False where it cannot be armed (another system)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _watch(parent_pid: int, poll_s: float) -> None:
    while True:
        if os.getppid() != parent_pid:
            os._exit(1)
        time.sleep(poll_s)


def die_with_parent(parent_pid: int, poll_s: float = 1.0) -> None:
    """End this process when process ``parent_pid`` (its parent) ends."""
    set_parent_death_signal(signal.SIGKILL)
    if os.getppid() != parent_pid:  # the parent died before the signal was armed
        os._exit(1)
    threading.Thread(target=_watch, args=(parent_pid, poll_s), daemon=True, name="parent-watch").start()
