"""Waits forever without using CPU: only the wall-time limit can end it."""

import time

while True:
    time.sleep(3600)
