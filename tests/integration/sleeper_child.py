"""A child process for the worker-watchdog test: arms `testbed.util.workers.die_with_parent`, then sleeps."""

import time

from testbed.util.workers import die_with_parent


def sleep_forever(parent: int) -> None:
    die_with_parent(parent, poll_s=0.2)
    time.sleep(600)
