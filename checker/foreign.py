"""Arrays of other libraries (JAX, PyTorch) in a rule's inputs and outputs: the checker sees NumPy copies.

A JAX user declares inputs the way the rule takes them, ``arrays(shape=(5,)).map(jnp.asarray)``, and a rule
written with ``jax.numpy`` returns ``jax.Array`` values. Every check computes with NumPy arrays (finite
differences move them, mutation checks compare their bytes, engines trace them), and an array of another
library is not one: taken as it is, a float ``jax.Array`` argument read as a value without a tangent, so a
correct pullback got GG106 ("its tangent must be None").

So values cross one boundary, here:

* `plain_args` wraps a rule's argument strategy: each concrete JAX array or PyTorch tensor becomes a NumPy
  copy of it (same dtype and shape), and the library it came from is remembered per argument position; a sparse
  float tensor at a position not declared ``constant(...)`` or ``nondiff=`` is refused (`SparseArgument`): the
  checks differentiate dense arrays only, and taken as a constant its gradient went unchecked without a word;
* `foreign_rule` / `foreign_primal` wrap a NumPy-kind rule and its primal: an argument at such a position
  that arrives as a NumPy array is handed over as the library's array again (the rule gets what its spec
  draws), and outputs and tangents that are concrete arrays of another library come back as NumPy arrays.
  A cotangent handed to the pullback is given in the library of the output it belongs to.

Only dense float and complex arrays are converted, and never in an argument declared ``constant(...)``. Anything
else passes through untouched: NumPy values, Python numbers, integer index arrays and sparse tensors (constants the
rule gets as drawn), the tape's traced arrays,
JAX tracers (the JAX reference and the JAX column trace the rule; a tracer is never read out). The adapters of
``jax_rule`` and ``torch_rule`` already take NumPy arrays, so their rules need only `plain_args`.

Every call of a NumPy-kind rule and its primal passes through these wrappers, which also start it from the fixed
state of NumPy's global generator (`gradguard.checker.random_state`).
"""

from __future__ import annotations

import functools
import sys
from typing import Any, Callable

import numpy as np

from hypothesis.strategies import SearchStrategy

from gradguard.checker.errors import SpecError
from gradguard.checker.random_state import moved, start_fixed
from gradguard.checker.trees import leaves, tree_map

__all__ = ["SparseArgument", "FOREIGN_ARRAYS", "library_of", "to_numpy", "PlainArgs", "plain_args", "foreign_rule", "foreign_primal", "is_foreign_layer"]

FOREIGN_ARRAYS = "foreign_arrays"  # RuleSpec.extra key: the rule's PlainArgs (reproducers name its libraries)
# Attribute on the wrappers below, holding the wrapper itself: GG203 unwraps them to the user's primal. An outer
# functools.wraps copies it onto its own wrapper, where it names the inner one: `is_foreign_layer` tells them apart.
FOREIGN_LAYER = "gradguard_foreign_layer"


def library_of(value: Any) -> str | None:
    """``"jax"`` for a concrete ``jax.Array``, ``"torch"`` for a ``torch.Tensor``, else None (tracers included)."""
    if isinstance(value, (np.ndarray, np.generic, float, int, complex, bool)) or value is None:
        return None
    root = type(value).__module__.partition(".")[0]
    if root in ("jax", "jaxlib"):
        jax = sys.modules.get("jax")
        if jax is not None and isinstance(value, jax.Array) and not isinstance(value, jax.core.Tracer):
            return "jax"
        return None
    if root == "torch":
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(value, torch.Tensor):
            return "torch"
    return None


def to_numpy(value: Any) -> Any:
    """A writable NumPy copy of a dense float or complex JAX array or PyTorch tensor (same dtype, shape and, for a
    tensor, memory order: a channels_last one stays so when the checks hand it back as a tensor); other
    values as they are: an integer index array, a sparse tensor, a constant of the rule's own kind is handed to the
    rule as drawn (it has no tangent either way, and an adapter may need it as it is)."""
    lib = library_of(value)
    if lib == "jax" and np.dtype(value.dtype).kind in "fc":
        return np.array(value)
    if lib == "torch" and value.layout == sys.modules["torch"].strided and (value.is_floating_point() or value.is_complex()):
        return value.detach().cpu().resolve_conj().numpy().copy(order="K")  # its memory layout kept (channels_last)
    return value


def _as_library(lib: str, value: Any) -> Any:
    """``value`` as an array of ``lib`` if it is a NumPy array; anything else (a traced array) as it is."""
    if not isinstance(value, np.ndarray):
        return value
    if lib == "jax":
        return sys.modules["jax"].numpy.asarray(value)
    # a tensor sharing the array's memory, so that the checks see what the rule writes into its input; an array
    # the checker keeps read-only is copied (a tensor cannot be read-only)
    return sys.modules["torch"].from_numpy(value if value.flags.writeable else value.copy())


def _plain_tree(tree: Any) -> tuple[Any, str | None]:
    """``tree`` with its foreign arrays as NumPy copies (`to_numpy`), and the library of the first (None if none)."""
    found: list[str] = []

    def convert(leaf: Any) -> Any:
        plain = to_numpy(leaf)
        if plain is not leaf:
            found.append(library_of(leaf))
        return plain

    return tree_map(convert, tree), (found[0] if found else None)  # tree_map calls convert on a bare leaf too


class SparseArgument(SpecError):
    """A drawn argument holds a sparse float tensor the rule would differentiate."""


def _sparse_float(leaf: Any) -> str | None:
    """The layout of a sparse float or complex tensor (PyTorch's sparse layouts, JAX's BCOO and BCSR), else None."""
    lib = type(leaf).__module__
    if lib.startswith("torch"):
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(leaf, torch.Tensor) and leaf.layout != torch.strided \
                and (leaf.is_floating_point() or leaf.is_complex()):
            return str(leaf.layout).removeprefix("torch.")
    elif lib.startswith("jax.experimental.sparse") and np.dtype(getattr(leaf, "dtype", np.int8)).kind in "fc":
        return type(leaf).__name__
    return None


def _refuse_sparse(i: int, arg: Any) -> None:
    for leaf in leaves(arg):
        layout = _sparse_float(leaf)
        if layout is not None:
            raise SparseArgument(
                f"argument {i} draws a sparse tensor ({layout}, {leaf.dtype}), and gradguard differentiates dense arrays "
                f"only: taken as it is, its gradient would go unchecked. Draw it dense (arrays(...): a torch_rule or "
                f"jax_rule gets it as a tensor or array) if the rule takes dense values, or hold it fixed with "
                f"constant(...) or nondiff=({i},) to check the other arguments' gradients.")


def _foreign_tree(lib: str, tree: Any) -> Any:
    return tree_map(lambda leaf: _as_library(lib, leaf), tree)


class PlainArgs:
    """What a rule's argument strategy does to each drawn tuple (see `plain_args`): foreign arrays become NumPy
    copies; ``libraries`` records, per argument position, the library the spec drew there (shared with the
    rule's wrappers, which make every call through `call`)."""

    def __init__(self, constants: frozenset[int] = frozenset(), nondiff: frozenset[int] = frozenset()) -> None:
        self.libraries: dict[int, str] = {}
        self.constants = constants  # positions declared constant(...): handed to the rule exactly as given
        self.nondiff = nondiff  # positions held fixed (constant(...) or nondiff=): a sparse tensor may stand there
        self.draws_global: bool | None = None  # whether the rule or its primal draws from NumPy's global generator

    def call(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """``fn`` (the rule or its primal) on ``args`` given in their libraries again, started from the fixed state
        of NumPy's global generator where the rule draws from it (found on its first call: `random_state`)."""
        if self.draws_global is False:
            return fn(*self.restore(args), **kwargs)
        start_fixed()
        try:
            return fn(*self.restore(args), **kwargs)
        finally:
            if self.draws_global is None:
                self.draws_global = moved()

    def __call__(self, args: tuple[Any, ...]) -> tuple[Any, ...]:
        out = []
        for i, arg in enumerate(args):
            if i in self.constants:
                out.append(arg)
                continue
            plain, lib = _plain_tree(arg)
            if lib is not None:
                self.libraries.setdefault(i, lib)
            if i not in self.nondiff and type(plain) is not np.ndarray:
                _refuse_sparse(i, plain)
            out.append(plain)
        return tuple(out)

    def restore(self, args: tuple[Any, ...]) -> tuple[Any, ...]:
        """``args`` with the positions the spec draws as foreign arrays given in that library again."""
        if not self.libraries:
            return args
        return tuple(_foreign_tree(self.libraries[i], a) if i in self.libraries else a for i, a in enumerate(args))


class _PlainArgsStrategy(SearchStrategy):
    """The argument tuples of ``inner``, through ``plain``. Its repr and label are the inner strategy's, and it
    adds no span to the choices: the verdict cache keys a rule by that repr, and Hypothesis' search reads the
    spans, so a rule whose spec draws only NumPy values is drawn, searched and cached exactly as without it."""

    def __init__(self, inner: SearchStrategy, plain: PlainArgs) -> None:
        super().__init__()
        self.inner, self.plain = inner, plain

    def do_draw(self, data: Any) -> tuple[Any, ...]:
        # the inner strategy's draw in this strategy's own span, which carries the inner's label: no span of its
        # own, which Hypothesis' search (its mutations copy spans by label) would see as another structure
        return self.plain(self.inner.do_draw(data))

    def calc_label(self) -> int:
        return self.inner.label

    def do_validate(self) -> None:
        self.inner.validate()

    def calc_is_empty(self, recur: Any) -> bool:
        return recur(self.inner)

    def __repr__(self) -> str:
        return repr(self.inner)


def plain_args(strategy: SearchStrategy, constants: frozenset[int] = frozenset(),
               nondiff: frozenset[int] = frozenset()) -> tuple[SearchStrategy, PlainArgs]:
    """``strategy`` (of argument tuples) drawing NumPy copies of foreign arrays, and the record of where it drew
    them. ``constants``: positions declared ``constant(...)``, left as they are (norse hands its Functions a
    NamedTuple of tensor parameters: NumPy copies of its fields broke the forward's arithmetic with tensors);
    ``nondiff``: every position held fixed, where a sparse tensor is no gradient left unchecked."""
    plain = PlainArgs(constants, nondiff | constants)
    return _PlainArgsStrategy(strategy, plain), plain


def _plain_output(y: Any) -> tuple[Any, str | None]:
    if type(y) is np.ndarray or y is None or isinstance(y, (float, int)):
        return y, None  # the common case, without walking a tree
    return _plain_tree(y)


def foreign_rule(rule: Callable[..., Any], plain: PlainArgs) -> Callable[..., Any]:
    """``rule`` taking and returning NumPy values where its spec and its code use another library's arrays
    (see the module docstring); a result that is not a pair is returned as it is (GG101 reports it)."""

    @functools.wraps(rule)
    def on_numpy(*args: Any, **kwargs: Any) -> Any:
        result = plain.call(rule, args, kwargs)
        if not (isinstance(result, tuple) and len(result) == 2 and callable(result[1])):
            return result
        y, pullback = result
        y, lib = _plain_output(y)
        if lib is None and not plain.libraries:
            return y, pullback

        @functools.wraps(pullback)
        def numpy_pullback(ybar: Any) -> Any:
            tangents = pullback(ybar if lib is None else _foreign_tree(lib, ybar))
            if isinstance(tangents, (tuple, list)):
                out = [_plain_output(t)[0] for t in tangents]
                return type(tangents)(out) if isinstance(tangents, list) else tuple(out)
            return tangents

        return y, numpy_pullback

    setattr(on_numpy, FOREIGN_LAYER, on_numpy)
    return on_numpy


def is_foreign_layer(fn: Any) -> bool:
    """Whether ``fn`` is one of this module's wrappers itself (not a wrapper around one)."""
    return getattr(fn, FOREIGN_LAYER, None) is fn


def foreign_primal(primal: Callable[..., Any], plain: PlainArgs) -> Callable[..., Any]:
    """``primal`` taking and returning NumPy values, as `foreign_rule` does for the rule."""

    @functools.wraps(primal)
    def on_numpy(*args: Any, **kwargs: Any) -> Any:
        return _plain_output(plain.call(primal, args, kwargs))[0]

    setattr(on_numpy, FOREIGN_LAYER, on_numpy)
    return on_numpy
