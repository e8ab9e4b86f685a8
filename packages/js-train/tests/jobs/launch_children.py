"""A script for js.training.launch that needs no JAX: each rank plays a part of a hostile case.

orphan     rank 0 starts a child process and waits; rank 1 exits with status 3
wait       every rank prints its pid and waits (the test signals the launcher)
last-line  every rank prints a last line without a newline and exits 0
flaky DIR      first start (JS_RESTART_COUNT=0): rank 0 prints its pid and waits, rank 1 exits
               3; a restart: every rank prints its restart count and address, and exits 0
failing DIR    on every start, rank 1 exits 3 while rank 0 waits
hang DIR       first start: rank 0 ignores SIGTERM and waits, rank 1 exits 3; a restart: exit 0
flaky-wait DIR first start as flaky; a restart: every rank prints its pid and waits
"""

import os
import signal
import subprocess
import sys
import time

rank = int(os.environ["JS_PROCESS_ID"])
restart = int(os.environ["JS_RESTART_COUNT"])
case = sys.argv[1]


def fail(ignore_sigterm: bool = False) -> None:
    """Rank 1 exits with 3 once rank 0 is ready (a file in the directory ``sys.argv[2]``);
    rank 0 prints its pid and address, and waits (to be stopped)."""
    ready = os.path.join(sys.argv[2], f"ready-{restart}")
    if rank == 1:
        while not os.path.exists(ready):
            time.sleep(0.01)
        sys.exit(3)
    if ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print(
        f"pid {os.getpid()} start {restart} at {os.environ['JS_COORDINATOR_ADDRESS']}", flush=True
    )
    open(ready, "w").close()
    time.sleep(600)


if case == "orphan":
    if rank == 1:
        time.sleep(1.0)
        sys.exit(3)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    print(f"child {child.pid}", flush=True)
    time.sleep(600)
elif case == "wait":
    print(f"pid {os.getpid()}", flush=True)
    time.sleep(600)
elif case == "last-line":
    sys.stdout.write(f"r{rank} final words")
    sys.stdout.flush()
elif case in ("flaky", "failing", "flaky-wait") and (restart == 0 or case == "failing"):
    fail()
elif case == "flaky":
    print(f"restart {restart} at {os.environ['JS_COORDINATOR_ADDRESS']}", flush=True)
elif case == "flaky-wait":
    print(f"pid {os.getpid()} start {restart}", flush=True)
    time.sleep(600)
elif case == "hang" and restart == 0:
    fail(ignore_sigterm=True)
