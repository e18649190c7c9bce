"""NumPy's global random generator, as a NumPy rule's calls see it.

A rule may draw from NumPy's global generator (``np.random.rand``: Chainer's dropout draws its mask that way and
keeps it for the backward pass). A program using it is reproducible under ``np.random.seed``, and the gradient the
pullback returns is right for the mask its own forward drew. So every call of a NumPy rule's forward and primal
starts from one fixed state of that generator (`start_fixed`, called by the layer every NumPy-kind call passes
through, `gradguard.checker.foreign`, for rules whose first call drew from it: `moved`), as a program re-run under
one seed does: two calls on one input draw the same
mask, and what the checks compare (two calls, the primal, finite differences) is one function. PyTorch's global
generators get the same treatment for torch rules (`gradguard.engines.torch_engine.apply`). Randomness from anywhere
else (an unseeded ``np.random.default_rng()``, the clock) still differs from call to call (GG406), and so does a
pullback that draws again instead of keeping what its forward drew.

The caller's state of the generator is restored when the check of a rule ends (`kept`).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import numpy as np

__all__ = ["SEED", "start_fixed", "moved", "kept"]

SEED = 0


def start_fixed() -> None:
    """Put NumPy's global generator in its fixed state (a few microseconds: ``np.random.seed``)."""
    np.random.seed(SEED)


def moved() -> bool:
    """Whether NumPy's global generator left the fixed state `start_fixed` put it in (something drew from it).
    Reading the state costs about 50 microseconds: the layer asks once per rule, after its first call."""
    _, _, pos, has_gauss, _ = np.random.get_state()
    return pos != 624 or has_gauss != 0  # np.random.seed leaves MT19937 at position 624, no cached Gaussian


@contextmanager
def kept() -> Iterator[None]:
    """Restore NumPy's global generator to its state at entry when the block ends."""
    state = np.random.get_state()
    try:
        yield
    finally:
        np.random.set_state(state)
