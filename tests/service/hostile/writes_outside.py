"""Tries to write everywhere but its tmpfs: the bundle, the installation, /etc, /."""

import json
import os
import sys
import tempfile
from pathlib import Path

from gradguard import checker
from gradguard.checker import arrays, rrule

here = Path(__file__).parent


def _write(path):
    try:
        with open(path, "w") as f:
            f.write("pwned")
        return "written"
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {e}"


def _unlink(path):
    try:
        os.unlink(path)
        return "removed"
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {e}"


facts = {
    "observer": "writes",
    "bundle_new": _write(here / "dropped.py"),
    "bundle_self": _write(here / "params.json"),
    "bundle_remove": _unlink(here / "params.json"),
    "checker": _write(Path(checker.__file__).parent / "pwned.py"),
    "site": _write(Path(json.__file__).parent / "pwned.py"),
    "etc": _write("/etc/pwned"),
    "root": _write("/pwned"),
    "usr": _write("/usr/pwned"),
    "tmpdir": _write(Path(tempfile.gettempdir()) / "fine.txt"),
    "home": _write(Path(os.environ["HOME"]) / ".fine"),
}
print("GG-FACTS " + json.dumps(facts), file=sys.stderr)


def ident(x):
    return x


@rrule(ident, arrays(shape=(2,)))
def ident_rrule(x):
    return ident(x), lambda ybar: (None if ybar is None else ybar,)
