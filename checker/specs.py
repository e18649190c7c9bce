"""Rule specs: how a rule author tells gradguard what to check.

    @rrule(addone_, arrays(shape=(3,)), mutates=(0,))
    def addone_rrule(a):
        y = addone_(a)
        return y, lambda ybar: (np.full(a.shape, ybar),)

`rrule(...)` returns a :class:`RuleSpec`, which stays callable like the rule
itself. Argument specs are Hypothesis strategies; `arrays`, `floats` and
`constant` are convenience factories that compose like any other strategy.

Why this module is over 400 lines: it is the whole declaration surface a rule author meets (the argument
strategies, :class:`RuleSpec` and the validation of every `rrule` option), and the two halves are read
together: `build_spec` reads what the strategies mark (a `constant` argument is nondifferentiable, a
structured one is checked in its structure) and `jax_rules.py` and `torch_rules.py` call it for their own
declarations. Much of it is the validation's error messages, each of which names the option and the fix.
"""

from __future__ import annotations

import functools
import inspect
import math
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from hypothesis.strategies import SearchStrategy

from gradguard.checker.check_ids import split_check_ids
from gradguard.checker.errors import SpecError
from gradguard.checker.trees import children, rebuild
from gradguard.checker.foreign import FOREIGN_ARRAYS, plain_args, foreign_primal, foreign_rule
from gradguard.checker.structure import STRUCTURES, make_structured, structured_primal, structured_rule
from gradguard.engines.errors import clause

__all__ = [
    "RuleSpec",
    "rrule",
    "arrays",
    "floats",
    "constant",
    "is_constant",
    "structure_of",
    "structures_of",
    "bounds_of",
    "UNUSED_COTANGENTS",
    "DEFAULT_UNUSED_COTANGENT",
    "unused_cotangent_of",
    "validate_unused_cotangent",
    "COMPLEX_CONVENTIONS",
    "complex_convention_of",
]

# Arrays up to this many elements are drawn element by element through
# Hypothesis (so failures shrink to readable values); larger ones are filled
# from a seeded generator (Hypothesis draws only the seed), which keeps a
# 10**6-element rule cheap to check.
SHRINKABLE_SIZE = 64

# What the pullback of an unused output receives in the engines a rule is written for: "zeros" (JAX and
# PyTorch materialise zero cotangents; HIPS/autograd never calls it) or "none" (ChainRules' NoTangent,
# Zygote's nothing, the tape's `none` policy). NumPy rules that declare nothing get the run's default,
# "zeros" unless the project says otherwise: the Python engines a NumPy rule is plugged into pass zeros
# or skip the pullback, and a None-passing engine is one its author opts into (and then declares).
UNUSED_COTANGENTS = ("zeros", "none")
DEFAULT_UNUSED_COTANGENT = "zeros"
RUN_UNUSED_COTANGENT = "unused_cotangent"  # RuleSpec.run_state key: the run's default, set by the runner
# How a pullback treats complex numbers, as the engine it is written for does: "chainrules" (the adjoint
# for the real inner product, conj(f'(z)) * ybar for a holomorphic f: ChainRules, PyTorch, the tape, and
# every NumPy rrule that declares nothing) or "jax" (f'(z) * ybar: JAX, and HIPS/autograd's documented
# convention). jax.custom_vjp rules always follow JAX's.
COMPLEX_CONVENTIONS = ("chainrules", "jax")

_CONSTANTS: "weakref.WeakSet[SearchStrategy]" = weakref.WeakSet()
_STRUCTURED: "weakref.WeakKeyDictionary[SearchStrategy, str]" = weakref.WeakKeyDictionary()
# The [min_value, max_value] each `arrays` strategy that draws its own elements was declared with: the domain an
# argument may be given (a context that passes one argument's array in another's place stays inside it).
_BOUNDS: "weakref.WeakKeyDictionary[SearchStrategy, tuple[float, float]]" = weakref.WeakKeyDictionary()


def constant(value: Any) -> SearchStrategy:
    """A non-differentiable argument that always takes ``value``.

    Its position is added to the rule's ``nondiff=`` automatically: the
    pullback must return ``None`` for it.
    """
    strategy = st.just(value)
    _CONSTANTS.add(strategy)
    return strategy


def is_constant(strategy: SearchStrategy) -> bool:
    return strategy in _CONSTANTS


def constant_positions(arg_specs: Any) -> dict[int, Any]:
    """The arguments ``arg_specs`` (a rule's, or None) declare with ``constant(value)``: position -> value."""
    return {i: spec.value for i, spec in enumerate(arg_specs or ()) if is_constant(spec)}


def floats(min_value: float = -10.0, max_value: float = 10.0) -> SearchStrategy:
    """A differentiable Python float in ``[min_value, max_value]`` (finite)."""
    _check_bounds(min_value, max_value)
    return st.floats(min_value=min_value, max_value=max_value, allow_nan=False, allow_infinity=False)


def arrays(
    shape: int | tuple[int, ...] | SearchStrategy = (3,),
    dtype: str | np.dtype = "float64",
    *,
    elements: SearchStrategy | None = None,
    min_value: float = -10.0,
    max_value: float = 10.0,
    structure: str | None = None,
) -> SearchStrategy:
    """A differentiable NumPy array.

    ``shape`` is a tuple, an int or a strategy of tuples (e.g.
    ``hypothesis.extra.numpy.array_shapes()``). Elements are finite and lie in
    ``[min_value, max_value]`` unless ``elements`` is given; for complex
    dtypes the bounds apply to the real and imaginary parts.

    ``structure`` declares a structured domain for square matrices (stacks of
    them): ``"symmetric"``, ``"psd"`` (positive definite), ``"lower"``,
    ``"upper"``, ``"diagonal"`` or ``"rotation"`` (SO(n), real); or ``"unit"`` for
    unit vectors along the last axis (unit quaternions, directions; real, at least 2
    elements). Inputs are drawn with the structure, finite differences move inside it
    (along the tangent space of a curved one), and tangents are compared by their
    projection onto it, as ChainRules' ``ProjectTo`` does (see :mod:`gradguard.checker.structure`).
    """
    if structure is not None and structure not in STRUCTURES:
        raise SpecError(f"Got structure={structure!r}; use one of {', '.join(map(repr, STRUCTURES))}, or None.")
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise SpecError(f"Got dtype={dtype!r}, which NumPy does not know. Use e.g. 'float64' or 'complex128'.") from exc
    if dt.kind not in "fc":
        raise SpecError(
            f"Got dtype={dtype!r}, but differentiable arrays must be float or complex. "
            "Use constant(...) for an integer or boolean argument."
        )
    _check_bounds(min_value, max_value)
    if structure == "rotation" and dt.kind != "f":
        raise SpecError(f"Got structure='rotation' with dtype={dtype!r}; rotations are real: use a float dtype.")
    if structure == "unit" and dt.kind != "f":
        raise SpecError(f"Got structure='unit' with dtype={dtype!r}; unit vectors are real here: use a float dtype.")
    if isinstance(shape, int):
        shape = (shape,)
    if isinstance(shape, tuple):
        if not all(isinstance(s, int) and s >= 0 for s in shape):
            raise SpecError(f"Got shape={shape!r}, but a shape must be a tuple of non-negative ints.")
        shapes: SearchStrategy = st.just(shape)
    elif isinstance(shape, SearchStrategy):
        shapes = shape
    else:
        raise SpecError(f"Got shape={shape!r}; pass a tuple of ints, an int, or a strategy of tuples.")

    declared_elements = elements
    if elements is None:
        elements = _elements(dt, min_value, max_value)

    made: dict[tuple[int, ...], SearchStrategy] = {}  # per shape: a strategy built and validated once

    def for_shape(shp: tuple[int, ...]) -> SearchStrategy:
        # flatmap asks for the strategy of the drawn shape at every draw: building and validating hnp.arrays
        # anew each time cost as much as drawing a small array's elements
        try:
            return made[shp]
        except (KeyError, TypeError):  # not built yet, or a shape strategy that draws lists
            pass
        strategy = _for_shape(shp)
        if len(made) < 64:
            try:
                made[shp] = strategy
            except TypeError:
                pass
        return strategy

    def _for_shape(shp: tuple[int, ...]) -> SearchStrategy:
        if structure == "unit" and (len(shp) < 1 or shp[-1] < 2):
            raise SpecError(f"Got structure='unit' with shape={shp!r}; unit vectors need a last axis of at least 2 "
                            "elements: a shape (n,), or (..., n) for a stack of them.")
        if structure not in (None, "unit") and (len(shp) < 2 or shp[-1] != shp[-2]):
            raise SpecError(f"Got structure={structure!r} with shape={shp!r}; a structure needs square matrices: "
                            "a shape (n, n), or (..., n, n) for a stack of them.")
        size = math.prod(shp)
        if size <= SHRINKABLE_SIZE:
            drawn = hnp.arrays(dt, shp, elements=elements, fill=st.nothing())
        else:
            drawn = st.integers(0, 2**32 - 1).map(lambda seed: _random_array(seed, shp, dt, min_value, max_value))
        return drawn if structure is None else drawn.map(lambda a: make_structured(structure, a))

    if isinstance(shape, tuple):
        for_shape(shape)  # a wrong shape for the structure is an error at declaration
    strategy = shapes.flatmap(for_shape)
    if structure is not None:
        _STRUCTURED[strategy] = structure
    if declared_elements is None:
        _BOUNDS[strategy] = (float(min_value), float(max_value))
    return strategy


def bounds_of(strategy: SearchStrategy) -> tuple[float, float] | None:
    """The ``(min_value, max_value)`` an :func:`arrays` strategy draws every element (every real and imaginary
    part) from; None for a strategy with its own ``elements=`` and for any other strategy (domain not known)."""
    try:
        return _BOUNDS.get(strategy)
    except TypeError:  # an unhashable strategy was never registered
        return None


def structure_of(strategy: SearchStrategy) -> str | None:
    """The ``structure=`` an :func:`arrays` strategy was declared with, if any."""
    try:
        return _STRUCTURED.get(strategy)
    except TypeError:  # an unhashable strategy was never registered
        return None


def structures_of(arg_specs: Iterable[SearchStrategy]) -> dict[int, str]:
    """Position -> ``structure=`` of the argument specs declared with one."""
    return {i: kind for i, s in enumerate(arg_specs) if (kind := structure_of(s)) is not None}


def _mapped_structure(strategy: SearchStrategy) -> str | None:
    """The ``structure=`` of an :func:`arrays` strategy underneath ``.map(...)`` calls on ``strategy`` (None where
    there is none, or no map above it): the mapped values are not known to keep it."""
    mapped = False
    for _ in range(16):
        inner = getattr(strategy, "mapped_strategy", None)
        if inner is None:
            return structure_of(strategy) if mapped else None
        strategy, mapped = inner, True
    return None


def _check_no_lost_structure(arg_specs: tuple[Any, ...]) -> None:
    """A SpecError for an argument spec whose ``structure=`` sits under ``.map(...)``: the checks would read the
    mapped values as unstructured and move them off the structure (``arrays(structure="psd").map(lambda m: m + I)``
    gave a false GG201 on a Cholesky solve that reads one triangle)."""
    for i, spec in enumerate(arg_specs):
        if structure_of(spec) is None and (kind := _mapped_structure(spec)) is not None:
            raise SpecError(
                f"Got the spec of argument {i}: arrays(..., structure={kind!r}) under .map(...). gradguard cannot know "
                f"that the mapped values keep the structure, so its directions and finite differences would leave it "
                f"(a false finding, or a missed one). Draw the values the rule receives with arrays(..., "
                f"structure={kind!r}) itself, and move the map into the primal and the rule if it is part of the "
                "function."
            )


def _elements(dt: np.dtype, lo: float, hi: float) -> SearchStrategy:
    width = 32 if dt in (np.float32, np.complex64) else 64
    if width == 32:  # Hypothesis takes only bounds a float32 holds exactly: the float32 values inside them
        lo, hi = _inside_float32(lo, hi)
    real = st.floats(min_value=lo, max_value=hi, allow_nan=False, allow_infinity=False, width=width)
    if dt.kind == "c":
        return st.builds(complex, real, real)
    return real


def _random_array(seed: int, shape: tuple[int, ...], dt: np.dtype, lo: float, hi: float) -> np.ndarray:
    rng = np.random.default_rng(seed)
    out = rng.uniform(lo, hi, size=shape)
    if dt.kind == "c":
        out = out + 1j * rng.uniform(lo, hi, size=shape)
    return out.astype(dt)


def _inside_float32(lo: float, hi: float) -> tuple[float, float]:
    """The smallest and largest float32 values in ``[lo, hi]`` (a bound like 1e-4 has no float32 twin)."""
    with np.errstate(over="ignore"):  # a bound past float32's range becomes its largest finite value below
        low, high = np.float32(lo), np.float32(hi)
    if float(low) < lo:
        low = np.nextafter(low, np.float32(np.inf))
    if float(high) > hi:
        high = np.nextafter(high, np.float32(-np.inf))
    if not (np.isfinite(low) and np.isfinite(high)) or low > high:
        raise SpecError(f"Got min_value={lo!r}, max_value={hi!r} for float32 elements, but no finite float32 value "
                        "lies between them; widen the bounds or use float64.")
    return float(low), float(high)


def _check_bounds(lo: float, hi: float) -> None:
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise SpecError(f"Got min_value={lo!r}, max_value={hi!r}, but both bounds must be finite.")
    if lo > hi:
        raise SpecError(f"Got min_value={lo!r} > max_value={hi!r}; swap them.")


@dataclass(eq=False)
class RuleSpec:
    """A rule under test: the rrule, the primal it claims to differentiate, and its inputs."""

    rrule: Callable[..., Any]
    primal: Callable[..., Any]
    name: str
    arg_specs: tuple[SearchStrategy, ...] | None
    args_strategy: SearchStrategy
    nargs: int | None
    mutates: frozenset[int] = frozenset()
    nondiff: frozenset[int] = frozenset()
    rtol: float | None = None
    atol: float | None = None
    kind: str = "numpy"  # "numpy", "jax" or "torch"
    unused_cotangent: str | None = None  # declared convention (UNUSED_COTANGENTS); None: the run's default
    complex_convention: str | None = None  # declared (COMPLEX_CONVENTIONS); None: the rule kind's own
    ignore: tuple[str, ...] = ()  # check ids or prefixes this rule's declaration leaves out of its runs
    # positions of a tuple output that programs never differentiate (declared: an auxiliary statistic)
    nondiff_outputs: frozenset[int] = frozenset()
    jax_fn: Any = None  # the custom_vjp function, for jax rules
    source_file: str | None = None
    source_lines: tuple[int, int] | None = None
    module: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # facts about the rule that never change (caches)
    # Scratch space for checks during one check of this rule; the runner empties it before each check,
    # so that a verdict never depends on what an earlier check of the same rule left behind.
    run_state: dict[str, Any] = field(default_factory=dict)

    def __call__(self, *args: Any) -> Any:
        return self.rrule(*args)

    def __repr__(self) -> str:
        return f"<RuleSpec {self.name} for {getattr(self.primal, '__name__', self.primal)!r}>"


# RuleSpec.extra key: the rule as declared, without the structure's projections (GG705 compares PyTorch's derivative
# of the backward itself with finite differences of that same backward)
UNSTRUCTURED_RRULE = "unstructured_rrule"
# RuleSpec.extra key: the file of the module a rule was found in (loader.rules_in), which reproducers load it from:
# not always its source_file, the file of its code (a torch rule's Function, an rrule defined in a helper module).
DECLARED_IN = "declared_in"
CONSTANT_OUTPUTS = "constant_outputs"  # RuleSpec.extra key: positions of a tuple output that carry no derivative


def without_constant_outputs(rule: RuleSpec, y: Any) -> Any:
    """``y`` with None at the positions of a tuple (or list) output that the rule's framework declares to carry no
    derivative (a `torch.autograd.Function`'s outputs marked with ``ctx.mark_non_differentiable``: PyTorch never
    passes a gradient through them, and the backward is not asked for their derivative), or that its declaration
    says programs never differentiate (``nondiff_outputs=``); ``y`` itself where there are none. What draws cotangents and weights from ``y`` then gives those positions none."""
    positions = rule.nondiff_outputs | rule.extra.get(CONSTANT_OUTPUTS, frozenset())
    if not positions or not isinstance(y, (tuple, list)) or not any(k < len(y) for k in positions):
        return y
    return rebuild(y, (None if k in positions else part for k, part in enumerate(children(y))))


def ignored_checks(value: Any) -> tuple[str, ...]:
    """The check ids or prefixes of a rule's ``ignore=`` (a string, comma-separated or not, or a sequence of them),
    upper-cased; a SpecError naming one that is not of a check id's form. Whether each matches a registered check is
    asked when the rule is checked (`per_rule.check_rule`): the check modules import this one."""
    return tuple(split_check_ids("ignore", value, SpecError))


def ignores(rule: RuleSpec, check_id: str) -> bool:
    """Whether ``rule``'s declaration leaves ``check_id`` out (``ignore=``)."""
    return any(check_id.startswith(p) for p in rule.ignore)


def validate_unused_cotangent(value: Any, option: str = "unused_cotangent") -> str | None:
    """``value`` if it names a convention in ``UNUSED_COTANGENTS`` (or is None), else a SpecError quoting it."""
    if value is None or value in UNUSED_COTANGENTS:
        return value
    raise SpecError(
        f"Got {option}={value!r}, but {option} must be 'zeros' (the engines the rule is written for pass zero "
        "cotangents to an unused output's pullback, as JAX and PyTorch do) or 'none' (they may pass None, as "
        "ChainRules-style engines do)."
    )


def _complex_convention(value: Any) -> str | None:
    if value is None or value in COMPLEX_CONVENTIONS:
        return value
    raise SpecError(
        f"Got complex_convention={value!r}, but complex_convention must be 'chainrules' (the pullback is the "
        "adjoint: conj(f'(z)) * ybar for a holomorphic f, as ChainRules and PyTorch) or 'jax' (f'(z) * ybar, as "
        "JAX and HIPS/autograd)."
    )


def complex_convention_of(rule: RuleSpec) -> str:
    """The complex convention a rule is judged by: "jax" for jax.custom_vjp rules, else its declaration, else
    "chainrules"."""
    return "jax" if rule.kind == "jax" else rule.complex_convention or "chainrules"


def unused_cotangent_of(rule: RuleSpec) -> str:
    """The convention a rule is checked under: its own declaration, else the run's default, else
    ``DEFAULT_UNUSED_COTANGENT``."""
    return rule.unused_cotangent or rule.run_state.get(RUN_UNUSED_COTANGENT) or DEFAULT_UNUSED_COTANGENT


def _positions(option: str, value: Any, nargs: int | None, what: str = "argument") -> frozenset[int]:
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value,)
    if not isinstance(value, Iterable) or isinstance(value, (str, bytes)):
        raise SpecError(f"Got {option}={value!r}, but {option} must be a tuple of {what} positions, e.g. {option}=(0,).")
    out = []
    for v in value:
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise SpecError(f"Got {option}={value!r}, but {v!r} is not a non-negative {what} position.")
        if nargs is not None and v >= nargs:
            raise SpecError(f"Got {option}={value!r}, but the rule takes {nargs} argument(s), so position {v} does not exist.")
        out.append(v)
    return frozenset(out)


def _tolerance(option: str, value: float | None) -> float | None:
    if value is None:
        return None
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value >= 0 or not math.isfinite(value):
        raise SpecError(f"Got {option}={value!r}, but {option} must be a finite number >= 0.")
    return float(value)


def _primal_arity(primal: Callable[..., Any]) -> int | None:
    """The number of required positional parameters, None when the signature cannot say."""
    sig = _signature(primal)
    if sig is None:
        return None
    params = list(sig.parameters.values())
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return None
    return sum(1 for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty)


def _signature(fn: Callable[..., Any]) -> inspect.Signature | None:
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None


def _check_call_shape(primal: Callable[..., Any], nargs: int, kwargs: dict[str, Any]) -> None:
    """The primal must accept ``nargs`` positional arguments and ``kwargs`` (defaults fill the rest)."""
    sig = _signature(primal)
    if sig is None:
        return
    try:
        sig.bind(*range(nargs), **kwargs)
    except TypeError as exc:
        name = getattr(primal, "__name__", "primal")
        required = _primal_arity(primal)
        positional = sum(1 for p in sig.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))
        given = f"{nargs} spec(s)" + (f" and kwargs={sorted(kwargs)}" if kwargs else "")
        if required is not None and not kwargs and not (required <= nargs <= positional):
            takes = f"{required} required argument(s)" if positional == required else (
                f"{required} to {positional} positional argument(s) ({required} required)")
            raise SpecError(
                f"The primal {name} takes {takes}, but {nargs} spec(s) were given. "
                "Give one spec per positional argument (parameters with defaults may be left out)."
            ) from None
        raise SpecError(
            f"The primal {name}{sig} cannot be called with {given}: {clause(exc)}. Give one spec per positional argument "
            "(parameters with defaults may be left out), and fix keyword-only arguments with kwargs={...}."
        ) from None


def _kwargs(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and k.isidentifier() for k in value):
        raise SpecError(f"Got kwargs={value!r}, but kwargs must be a dict of keyword arguments, e.g. kwargs={{'axis': 1}}.")
    return dict(value)


def with_kwargs(fn: Callable[..., Any], kwargs: dict[str, Any]) -> Callable[..., Any]:
    """``fn`` with fixed keyword arguments (not differentiated), keeping its name for reports."""
    if not kwargs:
        return fn

    @functools.wraps(fn)
    def bound(*args: Any) -> Any:
        return fn(*args, **kwargs)

    bound.bound_kwargs = dict(kwargs)  # type: ignore[attr-defined]  # GG203 re-binds them to a jax.numpy copy of fn
    return bound


def source_location(fn: Callable[..., Any]) -> tuple[str | None, tuple[int, int] | None]:
    try:
        fn = inspect.unwrap(fn)
        path = inspect.getsourcefile(fn)
        lines, start = inspect.getsourcelines(fn)
        return path, (start, start + len(lines) - 1)
    except (TypeError, OSError):
        return None, None


def build_spec(
    rule_fn: Callable[..., Any],
    primal: Callable[..., Any],
    arg_specs: tuple[Any, ...],
    *,
    args: SearchStrategy | None,
    mutates: Any,
    nondiff: Any,
    name: str | None,
    rtol: float | None,
    atol: float | None,
    kind: str = "numpy",
    jax_fn: Any = None,
    kwargs: dict[str, Any] | None = None,
    unused_cotangent: str | None = None,
    complex_convention: str | None = None,
    ignore: Any = None,
    nondiff_outputs: Any = (),
) -> RuleSpec:
    """Validate everything eagerly and build a :class:`RuleSpec` (shared by `rrule` and `jax_rule`)."""
    if not callable(primal):
        raise SpecError(f"Got primal={primal!r}, but the first argument of rrule must be the primal function.")
    if not callable(rule_fn):
        raise SpecError(f"Got {rule_fn!r}, but rrule decorates a function returning (output, pullback).")
    if arg_specs and args is not None:
        raise SpecError("Pass either one spec per argument or args=<strategy of tuples>, not both.")
    if args is None and not arg_specs:
        raise SpecError(
            f"No argument specs given for {getattr(rule_fn, '__name__', rule_fn)}. Pass one spec per positional "
            "argument, e.g. rrule(f, arrays(shape=(3,))), or args=<strategy of tuples>."
        )
    for i, spec in enumerate(arg_specs):
        if not isinstance(spec, SearchStrategy):
            raise SpecError(
                f"Got {spec!r} as the spec of argument {i}, but specs must be Hypothesis strategies: "
                f"use arrays(...), floats(...) or constant({spec!r})."
            )
    if args is not None and not isinstance(args, SearchStrategy):
        raise SpecError(f"Got args={args!r}, but args= must be a Hypothesis strategy of tuples, e.g. st.tuples(...).")
    _check_no_lost_structure(tuple(arg_specs))
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise SpecError(f"Got name={name!r}, but name must be a non-empty string.")

    nargs = len(arg_specs) if arg_specs else None
    kwargs = _kwargs(kwargs)
    arity = _primal_arity(primal)
    if nargs is not None:
        _check_call_shape(primal, nargs, kwargs)
    mutates_set = _positions("mutates", mutates, nargs)
    nondiff_set = _positions("nondiff", nondiff, nargs)
    constants = constant_positions(arg_specs)
    nondiff_set |= constants.keys()
    unused_cotangent = validate_unused_cotangent(unused_cotangent)
    complex_convention = _complex_convention(complex_convention)
    ignored = ignored_checks(ignore)
    constant_outputs = _positions("nondiff_outputs", nondiff_outputs, None, "output")  # against the output: GG101

    # Arrays of other libraries a spec draws (arrays(...).map(jnp.asarray)) reach the checks as NumPy copies;
    # a NumPy-kind rule gets them back in its own library, and its foreign outputs come back as NumPy arrays
    strategy, plain = plain_args(st.tuples(*arg_specs) if arg_specs else args, frozenset(constants), frozenset(nondiff_set))
    path, lines = source_location(rule_fn)
    if kind == "numpy":
        rule_fn, primal = foreign_rule(rule_fn, plain), foreign_primal(primal, plain)
    structures = structures_of(arg_specs)
    unstructured = rule_fn
    if structures:  # the checker reads the rule on the structure's tangent space (see checker.structure)
        rule_fn, primal = structured_rule(rule_fn, structures), structured_primal(primal, structures)
        if jax_fn is not None:  # JAX's own derivatives (GG204, GG60x, the jax column) read it there too
            jax_fn = structured_primal(jax_fn, structures)
    spec = RuleSpec(
        rrule=with_kwargs(rule_fn, kwargs),
        primal=with_kwargs(primal, kwargs),
        name=name or getattr(rule_fn, "__name__", "rule"),
        arg_specs=tuple(arg_specs) if arg_specs else None,
        args_strategy=strategy,
        nargs=nargs if nargs is not None else arity,
        mutates=mutates_set,
        nondiff=frozenset(nondiff_set),
        rtol=_tolerance("rtol", rtol),
        atol=_tolerance("atol", atol),
        kind=kind,
        unused_cotangent=unused_cotangent,
        complex_convention=complex_convention,
        ignore=ignored,
        nondiff_outputs=constant_outputs,
        jax_fn=jax_fn,
        source_file=path,
        source_lines=lines,
        module=getattr(rule_fn, "__module__", None),
    )
    if kwargs:
        spec.extra["kwargs"] = kwargs
    spec.extra[FOREIGN_ARRAYS] = plain
    if structures:
        spec.extra[UNSTRUCTURED_RRULE] = with_kwargs(unstructured, kwargs)
    return spec


def rrule(
    primal: Callable[..., Any],
    *arg_specs: SearchStrategy,
    args: SearchStrategy | None = None,
    mutates: Iterable[int] | int = (),
    nondiff: Iterable[int] | int = (),
    name: str | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    kwargs: dict[str, Any] | None = None,
    unused_cotangent: str | None = None,
    complex_convention: str | None = None,
    ignore: Any = None,
    nondiff_outputs: Iterable[int] | int = (),
) -> Callable[[Callable[..., Any]], RuleSpec]:
    """Declare a reverse-mode rule for ``primal``; returns a decorator producing a :class:`RuleSpec`.

    The decorated function takes the primal's arguments and returns
    ``(output, pullback)``; ``pullback(ybar)`` returns one tangent per
    argument (``None`` for non-differentiable ones). ``kwargs`` fixes keyword arguments (an ``axis=``, a
    keyword-only option): the rule and the primal are always called with them, and they get no tangent.
    Parameters with defaults may be left without a spec; they keep their defaults.
    ``unused_cotangent`` says what the pullback of an unused output receives in the engines the rule is
    written for: ``"zeros"`` or ``"none"`` (``None``: the run's default, ``"zeros"`` unless set; see
    ``UNUSED_COTANGENTS``). Under ``"none"`` the pullback must accept ``None`` (GG302).
    ``complex_convention`` says how the pullback treats complex numbers in the engine it is written for:
    ``"chainrules"`` (the default: the adjoint, ``conj(f'(z)) * ybar``) or ``"jax"`` (``f'(z) * ybar``, as
    JAX and HIPS/autograd); GG201, GG205 and the safety matrix judge the rule by it.
    ``ignore`` leaves check ids or prefixes (``["GG201", "GG501"]``, or ``"GG201,GG501"``) out of every run of this
    rule, as ``--ignore`` does for a whole run: a straight-through estimator or a surrogate gradient, which is not
    the derivative on purpose, fails those by design, and the other rules keep them. The report lists them as
    skipped, with the declaration as the reason.
    ``nondiff_outputs`` names positions of a tuple output that programs never differentiate (an auxiliary
    statistic returned for logging, whose cotangent the pullback ignores on purpose): every check hands them a
    zero cotangent, as PyTorch does for an output marked with ``ctx.mark_non_differentiable``, and the contexts
    give them no weight. The other outputs are checked as before. It is a promise about the programs the rule
    is used in: one that differentiates such an output gets a wrong gradient, and no check can see that.
    """
    if not callable(primal):
        raise SpecError(f"Got primal={primal!r}, but the first argument of rrule must be the primal function.")

    def decorate(rule_fn: Callable[..., Any]) -> RuleSpec:
        return build_spec(
            rule_fn, primal, arg_specs, args=args, mutates=mutates, nondiff=nondiff, name=name, rtol=rtol, atol=atol,
            kwargs=kwargs, unused_cotangent=unused_cotangent, complex_convention=complex_convention, ignore=ignore,
            nondiff_outputs=nondiff_outputs,
        )

    # Validate the options now, not at decoration, so the error points at the rrule(...) line.
    build_spec(_validation_stub, primal, arg_specs, args=args, mutates=mutates, nondiff=nondiff, name=name, rtol=rtol,
               atol=atol, kwargs=kwargs, unused_cotangent=unused_cotangent, complex_convention=complex_convention, ignore=ignore,
               nondiff_outputs=nondiff_outputs)
    return decorate


def _validation_stub(*_args: Any) -> Any:  # pragma: no cover - never called
    raise AssertionError


