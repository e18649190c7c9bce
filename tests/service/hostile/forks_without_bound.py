"""Forks without bound, and some of its processes escape.

First a few daemons: each child starts a grandchild in a new session and
exits, so the grandchild belongs to no one. Then sleeping children until fork
fails in this process (the checker records the load error). Every one of
them must be gone when the run ends.
"""

import os
import time


def sleep_forever():
    try:
        time.sleep(3600)
    finally:
        os._exit(0)


for _ in range(8):
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            if os.fork() == 0:
                sleep_forever()
        finally:
            os._exit(0)
    os.waitpid(pid, 0)

while True:
    if os.fork() == 0:
        sleep_forever()
