"""Forks children that each stay under the per-process memory limit but together pass the run's."""

import json
import os
import time
from pathlib import Path

params = json.loads((Path(__file__).parent / "params.json").read_text())
children = []
for _ in range(params["children"]):
    pid = os.fork()
    if pid == 0:
        hoard = bytearray(params["mb_each"] * 2**20)  # zero-filled: every page touched
        time.sleep(params["sleep_s"])
        os._exit(0)
    children.append(pid)
for pid in children:
    os.waitpid(pid, 0)
