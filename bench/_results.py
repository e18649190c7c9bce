"""bench/RESULTS.md is made of sections, one per benchmark script, each replaced by its own script.

A section lies between ``<!-- begin NAME -->`` and ``<!-- end NAME -->``; a script rewrites only its
own, so the benchmarks can be regenerated one at a time. Each section starts with the command that
made it and when.
"""

from __future__ import annotations

import os
import platform
import re
import sys
import time
from pathlib import Path

ORDER = ("detection", "detection_examples", "realworld", "torch", "scaling", "memory", "checker_speed", "corpus_time")
TITLE = """# Benchmark results

Each section below says the command that made it; run it again to regenerate that section:

    pip install torch==2.13.0            # benchmark-only extra (the `bench` extra); never a dependency
    python bench/detection.py            # corpus detection, gradguard vs gradcheck and check_grads
    python bench/detection.py --max-examples 1 --results bench/RESULTS.md   # the detection/time trade-off
    python bench/detection.py --corpus realworld   # the public real-world corpus (tests/realworld/)
    python bench/detection.py --corpus torch       # the PyTorch rules (tests/corpus/torch_*.py) vs gradcheck, gradgradcheck
    python bench/scaling.py --results bench/RESULTS.md
    python bench/memory.py --results bench/RESULTS.md
    python bench/checker_speed.py --results bench/RESULTS.md
    python bench/memory_limit.py --results bench/RESULTS.md   # the per-rule memory budget: its cost, each rule's growth
    python bench/corpus_time.py --results bench/RESULTS.md    # where the time goes on the real-world corpus, per module and check

Times are wall-clock on a shared machine: compare only figures measured in the same run (ratios).
tests/test_bench_smoke.py runs each script in a tiny configuration.
"""


def environment() -> str:
    import numpy

    parts = [f"{os.cpu_count()} CPUs", f"Python {platform.python_version()}", f"NumPy {numpy.__version__}"]
    for name in ("jax", "torch", "hypothesis"):
        mod = sys.modules.get(name)
        if mod is not None:
            parts.append(f"{name} {mod.__version__}")
    return ", ".join(parts)


def write_section(path: str | Path, name: str, heading: str, command: str, body: str) -> None:
    path = Path(path)
    text = path.read_text() if path.exists() else TITLE
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    section = (
        f"<!-- begin {name} -->\n## {heading}\n\nMade by `{command}` ({stamp}; {environment()}).\n\n"
        f"{body.rstrip()}\n<!-- end {name} -->"
    )
    pattern = re.compile(rf"<!-- begin {re.escape(name)} -->.*?<!-- end {re.escape(name)} -->", re.DOTALL)
    if pattern.search(text):
        text = pattern.sub(lambda _: section, text)
    else:
        # Keep the sections in ORDER: insert before the first later section that exists.
        later = [n for n in ORDER[ORDER.index(name) + 1 :] if name in ORDER] if name in ORDER else []
        at = min((text.find(f"<!-- begin {n} -->") for n in later if f"<!-- begin {n} -->" in text), default=-1)
        text = (text[:at] + section + "\n\n" + text[at:]) if at >= 0 else (text.rstrip() + "\n\n" + section + "\n")
    path.write_text(text)


def command_line(script: str, argv: list[str] | None) -> str:
    args = argv if argv is not None else sys.argv[1:]
    return " ".join(["python", f"bench/{script}", *args])


class Transcript:
    """A ``print`` that also keeps what it printed, for a RESULTS.md section in a text block."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, *parts: object, **_: object) -> None:
        text = " ".join(str(p) for p in parts)
        self.lines.append(text)
        sys.stdout.write(text + "\n")
        sys.stdout.flush()

    def block(self) -> str:
        return "```text\n" + "\n".join(self.lines) + "\n```\n"
