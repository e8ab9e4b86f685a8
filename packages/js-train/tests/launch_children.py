"""A script for js.training.launch that needs no JAX: each rank plays a part of a hostile case.

orphan     rank 0 starts a child process and waits; rank 1 exits with status 3
wait       every rank prints its pid and waits (the test signals the launcher)
last-line  every rank prints a last line without a newline and exits 0
"""

import os
import subprocess
import sys
import time

rank = int(os.environ["JS_PROCESS_ID"])
case = sys.argv[1]
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
