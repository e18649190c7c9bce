"""Watch mode: which pullback read an array that was mutated after it was captured, and who mutated it.

Every array a pullback captures is fingerprinted when it is captured (shape,
dtype and a CRC-32 of its bytes). The tape re-fingerprints the pending
captures before and after every primitive call, at the end of the forward
pass and after every pullback, so the FIRST culprit of each change is known:
a primitive, "the program between step i and step j" (plain in-place NumPy
code the tape cannot see), or a pullback. Just before a pullback runs, its
captures are compared with their fingerprints; each difference becomes a
`MutationDiagnosis`.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import numpy as np

__all__ = ["MutationDiagnosis", "MutationWarning", "Watcher", "fingerprint", "closure_arrays"]


class MutationWarning(RuntimeWarning):
    """Issued by `grad`, `value_and_grad` and `vjp` with ``watch=True`` for each `MutationDiagnosis`."""


@dataclass(frozen=True)
class MutationDiagnosis:
    """A pullback read an array that was mutated in place after the pullback captured it.

    ``argument`` is the captured argument's position (None for the output or a
    closure variable; ``captured`` says which). ``mutated_by`` is the primitive
    that mutated it (at ``mutated_step``), or, with ``mutated_step=None``,
    plain program code such as "the program between step 0 and step 1".
    ``during_backward`` is True when a pullback (``mutated_by``) did it.
    """

    op: str
    op_step: int
    argument: int | None
    mutated_by: str
    mutated_step: int | None
    captured: str = ""
    during_backward: bool = False

    @property
    def message(self) -> str:
        what = self.captured or (f"argument {self.argument}" if self.argument is not None else "an array")
        if self.during_backward:
            culprit = f"the pullback of `{self.mutated_by}` (step {self.mutated_step})"
            when = f"during the backward pass, before {self.op}'s pullback ran"
        else:
            culprit = self.mutated_by if self.mutated_step is None else f"`{self.mutated_by}` (step {self.mutated_step})"
            when = "before the backward pass"
        return (
            f"`{self.op}` (step {self.op_step}) captured {what} by reference; {culprit} mutated it in place "
            f"{when}, so {self.op}'s pullback read the mutated values."
        )


def fingerprint(a: np.ndarray) -> tuple:
    """A cheap identity for an array's contents: shape, dtype and a CRC-32 of its bytes.

    CRC-32 runs at memory speed (several times faster than blake2b), which
    matters because every pending capture is re-fingerprinted at every step;
    an accidental collision hides a mutation with probability 2**-32.
    """
    buf = np.ascontiguousarray(a).reshape(-1)
    return a.shape, a.dtype.str, zlib.crc32(buf.view(np.uint8))


def closure_arrays(pullback: Callable[..., Any], raw_args: tuple) -> list[tuple[int | None, str, np.ndarray]]:
    """The arrays a user pullback holds: NumPy arrays in its closure cells (one level into tuples/lists).

    Falls back to the array arguments when the pullback has no closure (a
    callable object or a partial), which over-approximates what it reads.
    """
    fn = getattr(pullback, "__func__", pullback)
    cells = getattr(fn, "__closure__", None)
    if not cells:
        return [(i, f"argument {i}", a) for i, a in enumerate(raw_args) if isinstance(a, np.ndarray)]
    found = []
    for name, cell in zip(fn.__code__.co_freevars, cells):
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        for arr in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(arr, np.ndarray):
                pos = next((i for i, a in enumerate(raw_args) if a is arr), None)
                found.append((pos, f"argument {pos}" if pos is not None else f"closure variable `{name}`", arr))
    return found


@dataclass(eq=False)
class _Capture:
    op: str
    op_step: int
    argument: int | None
    what: str
    array: np.ndarray
    taken: tuple
    mutated_by: str | None = None
    mutated_step: int | None = None
    during_backward: bool = False


class Watcher:
    """Fingerprints the arrays pullbacks capture and attributes each change to its first culprit."""

    def __init__(self) -> None:
        self.captures: list[_Capture] = []
        self.last_step: int | None = None

    def capture(self, op: str, step: int, arrays: Iterable[tuple[int | None, str, np.ndarray]]) -> None:
        """Record what the node ``op`` at ``step`` captured, as it is right after the call."""
        for pos, what, arr in arrays:
            if arr.dtype != object:
                self.captures.append(_Capture(op, step, pos, what, arr, fingerprint(arr)))

    def before_step(self, step: int) -> None:
        if self.last_step is not None:
            self._scan(f"the program between step {self.last_step} and step {step}", None)

    def after_step(self, op: str, step: int, raw_args: tuple) -> None:
        """Blame ``op`` for changes to arrays it could reach through its arguments.

        A change elsewhere (e.g. a rule writing to a global) is caught at the
        next step and blamed on the program; scanning only reachable arrays
        halves the cost of watching.
        """
        flat = [b for a in raw_args for b in (a if isinstance(a, (tuple, list)) else (a,))]
        reachable = [a for a in flat if isinstance(a, np.ndarray)]
        self._scan(op, step, among=lambda arr: any(np.may_share_memory(arr, a) for a in reachable))
        self.last_step = step

    def end_forward(self) -> None:
        if self.last_step is not None:
            self._scan(f"the program after step {self.last_step}", None)

    def after_pullback(self, op: str, step: int) -> None:
        self._scan(op, step, during_backward=True)

    def check(self, step: int) -> list[MutationDiagnosis]:
        """Diagnoses for the node at ``step``, whose pullback is about to run."""
        out = []
        for c in self.captures:
            if c.op_step == step and fingerprint(c.array) != c.taken:
                culprit = c.mutated_by or "code the tape could not see"
                out.append(MutationDiagnosis(c.op, c.op_step, c.argument, culprit, c.mutated_step, c.what, c.during_backward))
        return out

    def _scan(self, culprit: str, step: int | None, during_backward: bool = False,
              among: Callable[[np.ndarray], bool] = lambda arr: True) -> None:
        prints: dict[int, tuple] = {}
        for c in self.captures:
            if c.mutated_by is None and among(c.array):
                if id(c.array) not in prints:  # each distinct array is hashed once per scan
                    prints[id(c.array)] = fingerprint(c.array)
                if prints[id(c.array)] != c.taken:
                    c.mutated_by, c.mutated_step, c.during_backward = culprit, step, during_backward
