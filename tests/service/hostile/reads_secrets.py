"""Looks for secrets: the environment, /etc/shadow, the service's database and source."""

import json
import os
import sys
from pathlib import Path

import numpy as np

from gradguard.checker import arrays, rrule

params = json.loads((Path(__file__).parent / "params.json").read_text())


def _read(path):
    try:
        return Path(path).read_text()[:200]
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {e}"


facts = {
    "observer": "secrets",
    "uid": os.getuid(),
    "env": dict(os.environ),
    "files": {p: _read(p) for p in ["/etc/shadow", *params["paths"]]},
    "proc1_environ": _read("/proc/1/environ"),
    "parent_environ": _read(f"/proc/{os.getppid()}/environ"),
}
print("GG-FACTS " + json.dumps(facts), file=sys.stderr)


def double(x):
    return 2.0 * x


@rrule(double, arrays(shape=(2,)))
def double_rrule(x):
    return double(x), lambda ybar: (None if ybar is None else 2.0 * ybar,)
