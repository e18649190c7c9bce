"""Prints 1 GB to stdout and stderr."""

import sys

chunk = "x" * 2**20
for i in range(1024):
    (sys.stdout if i % 2 else sys.stderr).write(chunk)
