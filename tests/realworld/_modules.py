"""The modules of correct real-world rules (tests/realworld/correct_*.py) that can be checked here.

Shared by tests/realworld/test_realworld_correct.py and bench/corpus_time.py, so that the benchmark measures
the modules the tests check.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

__all__ = ["NEEDS_TORCH", "correct_modules"]

HERE = Path(__file__).resolve().parent

# Modules of rules written against PyTorch itself (torch_rule), checked only where PyTorch is installed (CI
# installs it; the README's test command alone does not).
NEEDS_TORCH = {"correct_torch_libraries.py", "correct_torch_functions.py", "correct_torch_db.py"}


def correct_modules() -> list[Path]:
    """Every correct_*.py module, those in NEEDS_TORCH only where PyTorch is installed, in name order."""
    torch = importlib.util.find_spec("torch") is not None
    return sorted(p for p in HERE.glob("correct_*.py") if torch or p.name not in NEEDS_TORCH)
