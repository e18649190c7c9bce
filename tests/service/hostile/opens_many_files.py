"""Opens files until the descriptor table is full."""

import os

held = [os.open("/dev/null", os.O_RDONLY) for _ in range(100_000)]
