"""Fills its private temp folder far past the tmpfs size."""

import os
import tempfile

with open(os.path.join(tempfile.gettempdir(), "big"), "wb") as f:
    for _ in range(64):
        f.write(b"\0" * 2**20)
