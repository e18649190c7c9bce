"""Writes 2 MB of garbage into the report channel (its fd is on the command line)."""

import os
import sys

fd = int(sys.argv[sys.argv.index("--report-fd") + 1])
os.write(fd, b"{" + b"x" * 2 * 2**20)
