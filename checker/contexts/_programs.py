"""The adversarial programs: templates that embed any rule, whatever its signature.

Each `Context` turns a `Signature` (one drawn input of the rule, a second one,
the primal's output) into a `Plan`: the program's inputs, its random weights
and ``program(ops, consts, *inputs)``, written once against `Ops` so the same
code runs under NumPy (the ground truth), the tape and JAX. A context that
does not fit the rule's signature raises `NotApplicable` with the reason the
report shows.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from typing import Any, Callable, NamedTuple

import numpy as np

from gradguard.checker.contexts._ops import LossWeights, Ops
from gradguard.checker.specs import RuleSpec, bounds_of, structure_of, without_constant_outputs
from gradguard.engines.values import differentiable
from gradguard.checker.trees import children, copy_tree, is_leaf, leaves, rebuild, tree_map, with_leaves

__all__ = ["Context", "Plan", "Signature", "NotApplicable", "OutsideDomain", "ValuesDoNotFit", "CONTEXTS", "by_name", "LossWeights", "loss_weights"]


class NotApplicable(Exception):
    """The context does not type-check for this rule's signature; the message says why."""


class OutsideDomain(NotApplicable):
    """The context fits the rule's shapes, but would pass one argument's array where another argument's
    declared domain does not hold it, and no draw can fit (the declared domains share no array)."""


class ValuesDoNotFit(OutsideDomain):
    """As `OutsideDomain` for these drawn values only: other draws of the same shapes may fit."""


@dataclass
class Signature:
    """What a context may assume about a rule: one input (and a second one), and the primal's output."""

    rule: RuleSpec
    args: tuple[Any, ...]
    args2: tuple[Any, ...] | None
    output: Any
    # Per argument, the range its draws took (`_inputs.drawn_ranges`): what is known of a domain the spec does not
    # declare. None: nothing is known beyond the declarations.
    ranges: dict[int, tuple[float, float]] | None = None
    # Per array argument, the shapes its draws took (`_inputs.drawn_shapes`): the shapes its spec is known to make.
    # None: only the drawn input's own shapes are known.
    shapes: dict[int, frozenset[tuple[int, ...]]] | None = None

    @property
    def diff(self) -> list[int]:
        """Argument positions a program differentiates (float/complex values not declared nondiff)."""
        return [i for i, a in enumerate(self.args) if i not in self.rule.nondiff and differentiable(a)]

    @property
    def arrays(self) -> list[int]:
        """Differentiable positions holding an array with at least one axis."""
        return [i for i in self.diff if isinstance(self.args[i], np.ndarray) and self.args[i].ndim >= 1]

    def inputs(self, args: tuple[Any, ...] | None = None) -> tuple[Any, ...]:
        args = self.args if args is None else args
        return tuple(copy_tree(args[i]) for i in self.diff)

    def assemble(self, values: dict[int, Any], drawn: tuple[Any, ...] | None = None) -> tuple[Any, ...]:
        """The rule's arguments: ``values`` at their positions, fresh copies of the drawn ones (``drawn``, by
        default the first draw) elsewhere."""
        drawn = self.args if drawn is None else drawn
        return tuple(values[i] if i in values else copy_tree(a) for i, a in enumerate(drawn))

    def weighed(self, output: Any) -> Any:
        """``output`` with the positions the rule declares to carry no derivative as None
        (`without_constant_outputs`): weights made from it give them none."""
        return without_constant_outputs(self.rule, output)

    def by_position(self, xs: tuple[Any, ...]) -> dict[int, Any]:
        return dict(zip(self.diff, xs))

    def fixed(self) -> tuple | None:
        """The arguments a program holds fixed (those not differentiated), as a hashable key of their values
        (an array by its shape, dtype and bytes); None where one is neither an array nor hashable."""
        return _value_key(tuple(a for i, a in enumerate(self.args) if i not in self.diff))


def _value_key(value: Any) -> tuple | None:
    if isinstance(value, (tuple, list)):
        parts = tuple(_value_key(v) for v in value)
        return None if any(p is None for p in parts) else (type(value).__name__, parts)
    if isinstance(value, (np.ndarray, np.generic)):
        arr = np.ascontiguousarray(value)
        if arr.dtype.kind not in "biufcSU":
            return None
        return ("array", arr.shape, arr.dtype.str, hashlib.blake2b(arr.tobytes(), digest_size=16).digest())
    try:
        hash(value)
    except TypeError:
        return None
    return (type(value).__qualname__, value, repr(value))  # repr too: 0.0 == -0.0, but they are other constants


@dataclass
class Plan:
    """One context made concrete for one rule: inputs, random weights, and the program."""

    inputs: tuple[Any, ...]
    consts: tuple[Any, ...]
    program: Callable[..., Any]  # program(ops, consts, *inputs) -> real scalar
    key: tuple = ()  # what the program's structure depends on besides shapes (JAX compile cache)
    # Plans with equal ``same`` run the same program (context, structure, the rule's arguments that are not
    # inputs), so a compiled one serves them all; set by `Context.plan`. None: this program object only.
    same: tuple | None = None
    # Engines' state for this program where ``same`` is None (a compiled program), shared by the plans
    # `dataclasses.replace` makes from this one (the same program at other inputs).
    memo: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    # The context's twin: the same program, inputs and weights without the context's hazard. An aliasing context's
    # passes the slots that share memory distinct arrays of the same values (`Ops.distinct`), which engines still
    # differentiate as one; a view context's passes C-ordered copies of its views (`Ops.contiguous`); fan-out's
    # hands the pullback a cotangent buffer of its own. A gradient wrong in both is wrong at this input whatever
    # the context (GG501 and GG502 say so). None for the other contexts.
    twin: Callable[..., Any] | None = None


@dataclass(frozen=True)
class Context:
    name: str
    description: str
    make: Callable[[Signature, np.random.Generator], Plan] = field(repr=False)
    aliasing: bool = False  # a wrong cell here is GG502 (gradients over aliases), elsewhere GG501
    search: bool = True  # where the drawn inputs do not fit, further draws of other shapes may
    views: bool = False  # passes arguments as non-contiguous views of other memory (x[::2], x.T)

    def plan(self, sig: Signature, rng: np.random.Generator) -> Plan:
        plan = self.make(sig, rng)
        fixed = sig.fixed()
        plan.same = None if fixed is None else (self.name, plan.key, tuple(sig.diff), fixed)
        return plan


# -- random weights ---------------------------------------------------------------------------------


def weights_like(value: Any, rng: np.random.Generator) -> Any:
    """Random weights shaped like ``value`` (None for leaves that carry no derivative)."""

    def one(leaf: Any) -> Any:
        inexact = hasattr(leaf, "dtype") and np.dtype(leaf.dtype).kind in "fc"  # NumPy or JAX arrays
        if not (differentiable(leaf) or inexact):
            return None
        shape = np.shape(leaf)
        w = rng.uniform(-1.0, 1.0, size=shape)
        if np.iscomplexobj(leaf):
            w = w + 1j * rng.uniform(-1.0, 1.0, size=shape)
        return w

    return one(value) if is_leaf(value) else tree_map(one, value)


def loss_scale(leaf: Any) -> float:
    """1 for outputs within pi of 0 (the loss is then y + sin(y)/2 exactly), else max|y| / pi: sin then turns
    at most once over the output's range, however large its values. With sin(y) itself an output of 1e8
    turns every 1e-8 of its own scale, and no finite difference of the program resolves it."""
    values = np.abs(np.asarray(leaf))
    finite = values[np.isfinite(values)] if values.size else values
    top = float(np.max(finite)) if finite.size else 0.0
    return max(1.0, float(top / np.pi))  # a Python float: float32 outputs stay float32


BEND_TURN = np.pi / 4  # the most a loss's sin may turn between x and the finite differences' first step


class Fitted(NamedTuple):
    """What :func:`fit_bends` gives: the plan to run, and the program's value at its inputs under plain NumPy
    where the plan is the one it was given (None where the bends were widened, which changes that value, or
    where the program raised): the ground truth's first evaluation, not run twice."""

    plan: Plan
    value: Any = None


def fit_bends(plan: Plan, v: tuple[Any, ...], primal: Callable[..., Any], step: float) -> Fitted:
    """The plan with the scale of each loss's bend widened where moving the inputs by ``step`` along ``v`` (the
    finite differences' coarsest step) moves an output element further than BEND_TURN of it, or the plan
    itself where none does (or the program cannot be run so), with the program's value at x where it is
    the plan itself (:class:`Fitted`).

    `loss_scale` fits the bend to the output's values; an output's derivative can be far larger than its
    values: ``x * exp(y)`` at x = 0, y = 50 is 0, and moves by 5e21 per unit of x. Its bend ``y + s sin(y / s) / 2``
    with s = 1 then turns billions of times over every step finite differences can take, they see only the
    bend's average slope (1, not the 1.5 at x), and a right gradient looks wrong by a third. With ``s``
    widened to the output's movement over the coarsest step, every step resolves the bend; the bend stays
    a bend (its slope 1 + cos(y / s) / 2 still varies across the output's values)."""
    from gradguard.checker.kinks import shifted

    if not _losses(plan.consts):
        return Fitted(plan)  # a program without a bent loss (output-unused): nothing to fit
    seen: dict[int, list[Any]] = {}
    recording = _Recording("numpy", np, primal, seen=seen)
    try:
        value = plan.program(recording, plan.consts, *copy_tree(plan.inputs))
    except Exception:  # noqa: BLE001 - the program fails at x: the ground truth's own run will say so
        return Fitted(plan)
    at_x = {k: list(ys) for k, ys in seen.items()}
    seen.clear()
    try:
        with np.errstate(all="ignore"):
            plan.program(recording, plan.consts, *shifted(plan.inputs, v, step))
    except Exception:  # noqa: BLE001 - the program fails beside x: the finite differences will say so
        return Fitted(plan, value)
    wider: dict[int, LossWeights] = {}
    for k, c in _losses(plan.consts):
        if k in wider or len(at_x.get(k, ())) != len(seen.get(k, ())):
            continue
        widened = _widened(c, at_x[k], seen[k])
        if widened is not None:
            wider[k] = widened
    if not wider:
        return Fitted(plan, value)
    return Fitted(replace(plan, consts=_with_losses(plan.consts, wider)))


@dataclass(frozen=True)
class _Recording(Ops):
    """NumPy's ops that keep each output a loss bends, by the loss's weights (:func:`fit_bends`)."""

    seen: dict = field(default_factory=dict)

    def loss(self, y: Any, c: Any) -> Any:
        if isinstance(c, LossWeights):
            self.seen.setdefault(id(c), []).append(copy_tree(y))
        return super().loss(y, c)


def _losses(consts: Any) -> list[tuple[int, LossWeights]]:
    if isinstance(consts, LossWeights):
        return [(id(consts), consts)]
    if isinstance(consts, (tuple, list)):
        return [found for c in consts for found in _losses(c)]
    if isinstance(consts, dict):
        return [found for c in consts.values() for found in _losses(c)]
    return []


def _with_losses(consts: Any, wider: dict[int, LossWeights]) -> Any:
    if isinstance(consts, LossWeights):
        return wider.get(id(consts), consts)
    if isinstance(consts, (tuple, list, dict)):  # rebuild: a NamedTuple output takes its fields one by one
        return rebuild(consts, (_with_losses(c, wider) for c in children(consts)))
    return consts


def _widened(c: LossWeights, at_x: list[Any], moved: list[Any]) -> LossWeights | None:
    """``c`` with each leaf's scale at least its output's largest movement over BEND_TURN (None: none moves so far)."""
    new, changed = leaves(c.scales), False  # leaves(): a list, [tree] for a leaf
    for y0, y1 in zip(at_x, moved):
        for k, (a, b) in enumerate(zip(leaves(y0), leaves(y1))):
            if k >= len(new) or new[k] is None:
                continue
            with np.errstate(all="ignore"):
                gap = np.abs(np.asarray(b, dtype=np.complex128) - np.asarray(a, dtype=np.complex128))
            gap = gap[np.isfinite(gap)]
            top = float(np.max(gap)) if gap.size else 0.0
            if top > BEND_TURN * new[k]:
                new[k], changed = top / BEND_TURN, True
    if not changed:
        return None
    it = iter(new)
    return LossWeights(c.weights, tree_map(lambda _: next(it), c.scales))


def loss_weights(value: Any, rng: np.random.Generator) -> LossWeights:
    """`weights_like` for a loss (the same random draws), with the scale of each leaf's nonlinearity."""
    weights = weights_like(value, rng)
    scales = tree_map(lambda leaf, w: None if w is None else loss_scale(leaf), value, weights) if not is_leaf(value) \
        else (None if weights is None else loss_scale(value))
    return LossWeights(weights, scales)


# -- the templates ----------------------------------------------------------------------------------


def _output_used(sig: Signature, rng: np.random.Generator) -> Plan:
    c = loss_weights(sig.weighed(sig.output), rng)

    def program(ops: Ops, consts: tuple, *xs: Any) -> Any:
        return ops.loss(ops.call(*sig.assemble(sig.by_position(xs))), consts[0])

    return Plan(sig.inputs(), (c,), program)


def _output_unused(sig: Signature, rng: np.random.Generator) -> Plan:
    cs = tuple(weights_like(sig.args[i], rng) for i in sig.diff)

    def program(ops: Ops, consts: tuple, *xs: Any) -> Any:
        before = sum((ops.inner(c, x) for c, x in zip(consts, xs)), 0.0)  # reads the inputs before the call
        ops.call(*sig.assemble(sig.by_position(xs)))  # its output is never used
        return before

    return Plan(sig.inputs(), cs, program)


def _need_array(sig: Signature, what: str) -> list[int]:
    if not sig.arrays:
        raise NotApplicable(f"the rule has no differentiable array argument for {what}")
    return sig.arrays


def _captured_before(sig: Signature, rng: np.random.Generator) -> Plan:
    held = _need_array(sig, "an earlier operation to capture")
    c = loss_weights(sig.weighed(sig.output), rng)

    def program(ops: Ops, consts: tuple, *xs: Any) -> Any:
        at = sig.by_position(xs)
        captured = sum((ops.square(at[i]) for i in held), 0.0)  # dot(x, x): its pullback holds x by reference
        z = ops.call(*sig.assemble(at))
        return ops.loss(z, consts[0]) + captured

    return Plan(sig.inputs(), (c,), program, key=tuple(held))


def _read_after(sig: Signature, rng: np.random.Generator) -> Plan:
    held = _need_array(sig, "the program to read after the call")
    cs = tuple(weights_like(sig.args[i], rng) for i in held)

    def program(ops: Ops, consts: tuple, *xs: Any) -> Any:
        at = sig.by_position(xs)
        captured = sum((ops.square(at[i]) for i in held), 0.0)
        ops.call(*sig.assemble(at))  # output unused, as in the seed program
        after = sum((ops.inner(c, at[i]) for c, i in zip(consts, held)), 0.0)  # reads the inputs again
        return after + captured

    return Plan(sig.inputs(), cs, program, key=tuple(held))


def _called_twice(sig: Signature, rng: np.random.Generator) -> Plan:
    if sig.args2 is None:
        raise NotApplicable("the argument specs produced only one distinct input")
    n = len(sig.diff)
    second = sig.rule.primal(*copy_tree(sig.args2))  # the second draw may have other shapes than the first
    c1, c2 = loss_weights(sig.weighed(sig.output), rng), loss_weights(sig.weighed(second), rng)

    args2 = sig.args2

    def program(ops: Ops, consts: tuple, *xs: Any) -> Any:
        z1 = ops.call(*sig.assemble(sig.by_position(xs[:n])))
        # The second call is the second draw whole: its arguments that are not differentiated come with it, as
        # the specs drew them together (a posterior drawn as softmax of the log-probabilities beside it).
        z2 = ops.call(*sig.assemble(sig.by_position(xs[n:]), args2))  # may overwrite state the first pullback needs
        return ops.loss(z1, consts[0]) + ops.loss(z2, consts[1])

    fixed2 = _value_key(tuple(a for i, a in enumerate(args2) if i not in sig.diff))
    return Plan(sig.inputs() + sig.inputs(args2), (c1, c2), program, key=(fixed2 if fixed2 is not None else object(),))


def _fan_out(sig: Signature, rng: np.random.Generator) -> Plan:
    weighed = sig.weighed(sig.output)
    c1, c2, c3 = loss_weights(weighed, rng), loss_weights(weighed, rng), weights_like(weighed, rng)

    def fanned(ops: Ops, consts: tuple, xs: tuple[Any, ...], through: Callable[[Any], Any]) -> Any:
        z = through(ops.call(*sig.assemble(sig.by_position(xs))))
        # three consumers of z: their cotangents accumulate into the one the rule's pullback receives
        return ops.loss(z, consts[0]) + ops.loss(z, consts[1]) + ops.linear(z, consts[2])

    def program(ops: Ops, consts: tuple, *xs: Any) -> Any:
        return fanned(ops, consts, xs, lambda z: z)

    def twin(ops: Ops, consts: tuple, *xs: Any) -> Any:
        # the output reaches its consumers through one copy (z * 1), whose pullback hands the rule a cotangent of the
        # same values in a buffer no other consumer shares
        weighed = leaves(consts[2])  # a leaf without a weight reaches no consumer (`Ops.linear`)
        return fanned(ops, consts, xs, lambda z: with_leaves(z, [
            z_k if k >= len(weighed) or weighed[k] is None else ops.distinct(z_k) for k, z_k in enumerate(leaves(z))]))

    return Plan(sig.inputs(), (c1, c2, c3), program, twin=twin)


def _same_pairs(sig: Signature) -> list[tuple[int, int]]:
    pairs = []
    for k, i in enumerate(sig.arrays):
        for j in sig.arrays[k + 1 :]:
            a, b = sig.args[i], sig.args[j]
            if a.shape == b.shape and a.dtype == b.dtype:
                pairs += [(i, j), (j, i)]  # argument i's array in both slots, else argument j's
    if not pairs:
        raise NotApplicable("the rule has no two differentiable array arguments of the same shape and dtype")
    return pairs


def _misfit(sig: Signature, i: int, j: int, transposed: bool) -> tuple[str, bool] | None:
    """Why argument ``i``'s array (transposed, or not) may not be passed as argument ``j`` (its declared domain
    does not hold it), and whether another draw could fit; None where it may. Where argument ``j``'s spec
    declares no range (its own ``elements=``, a ``.map``, one ``args=`` strategy for all arguments), the range
    its draws took stands in for one (`Signature.ranges`): TensorFlow's softmax cross-entropy draws its labels
    as rows summing to 1, and the logits' negative values are no labels."""
    specs = sig.rule.arg_specs
    declared = bool(specs) and max(i, j) < len(specs)
    if declared:
        want, have = structure_of(specs[j]), structure_of(specs[i])
        if want is not None and (want != have or (transposed and want in ("lower", "upper"))):
            return f"argument {j} is declared {want} and argument {i}'s array{' transposed' if transposed else ''} is not", False
    bounds = bounds_of(specs[j]) if declared else None
    what = "declared range"
    if bounds is None:
        bounds, what = (sig.ranges or {}).get(j), "range over its draws"
        if bounds is None:
            return None
    lo, hi = bounds
    x = np.asarray(sig.args[i])
    parts = (x.real, x.imag) if np.iscomplexobj(x) else (x,)
    if all(bool(np.all((part >= lo) & (part <= hi))) for part in parts):
        return None
    own = (bounds_of(specs[i]) if declared else None) or (sig.ranges or {}).get(i)
    return (f"argument {i}'s drawn values lie outside argument {j}'s {what} [{lo:g}, {hi:g}]",
            own is None or (own[0] <= hi and lo <= own[1]))


def _fitting(sig: Signature, pairs: list[tuple[int, int]], transposed: bool) -> tuple[int, int]:
    """The first ``(i, j)`` of ``pairs`` whose argument ``i`` may be passed (transposed) as argument ``j``.

    An aliasing context passes one drawn array in two places; where that array lies outside the other
    argument's declared domain (a concentration declared positive, given a location's negative values), the
    program runs the rule where it was never meant to be right, and a wrong gradient there is no finding."""
    why = []
    for i, j in pairs:
        misfit = _misfit(sig, i, j, transposed)
        if misfit is None:
            return i, j
        why.append(misfit)
    reasons = "; ".join(dict.fromkeys(text for text, _ in why))
    if any(searchable for _, searchable in why):
        raise ValuesDoNotFit(reasons)
    raise OutsideDomain(f"{reasons} (the declared domains share no array, so no draw can fit)")


def _aliased(sig: Signature, rng: np.random.Generator, i: int, j: int, alias: Any) -> Plan:
    """A plan where argument ``j`` is ``alias(argument i)`` and does not move on its own."""
    moving = [p for p in sig.diff if p != j]
    c = loss_weights(sig.weighed(sig.output), rng)

    def aliased(ops: Ops, consts: tuple, xs: tuple[Any, ...], second: Callable[[Any], Any]) -> Any:
        at = dict(zip(moving, xs))
        at[j] = alias(second(at[i]))
        return ops.loss(ops.call(*sig.assemble(at)), consts[0])

    def program(ops: Ops, consts: tuple, *xs: Any) -> Any:
        return aliased(ops, consts, xs, lambda x: x)

    def distinct(ops: Ops, consts: tuple, *xs: Any) -> Any:
        return aliased(ops, consts, xs, ops.distinct)

    return Plan(tuple(copy_tree(sig.args[p]) for p in moving), (c,), program, key=(i, j), twin=distinct)


def _same_array_twice(sig: Signature, rng: np.random.Generator) -> Plan:
    return _aliased(sig, rng, *_fitting(sig, _same_pairs(sig), False), lambda x: x)  # the very same array in both slots


def _transposed_pairs(sig: Signature) -> list[tuple[int, int]]:
    pairs = []
    for i in sig.arrays:
        for j in sig.arrays:
            a, b = sig.args[i], sig.args[j]
            if i != j and a.ndim == 2 and b.shape == a.shape[::-1] and a.dtype == b.dtype:
                pairs.append((i, j))
    if not pairs:
        raise NotApplicable("the rule has no two 2-D array arguments with transposed shapes (for x and x.T)")
    return pairs


def _transposed_alias(sig: Signature, rng: np.random.Generator) -> Plan:
    # x and its transpose, sharing memory
    return _aliased(sig, rng, *_fitting(sig, _transposed_pairs(sig), True), lambda x: x.T)


def _strided_view(sig: Signature, rng: np.random.Generator) -> Plan:
    views = _need_array(sig, "a strided view")
    other = sig.args2 if sig.args2 is not None else sig.args
    inputs = []
    for p in sig.diff:
        if p in views:  # a base twice as long on axis 0; the rule sees every other row
            a = sig.args[p]
            base = np.empty((2 * a.shape[0],) + a.shape[1:], dtype=a.dtype)
            base[::2] = a
            base[1::2] = other[p] if np.shape(other[p]) == a.shape else a  # drawn values either way
            inputs.append(base)
        else:
            inputs.append(copy_tree(sig.args[p]))
    c = loss_weights(sig.weighed(sig.output), rng)

    def strided(ops: Ops, consts: tuple, xs: tuple[Any, ...], through: Callable[[Any], Any]) -> Any:
        at = {p: (through(x[::2]) if p in views else x) for p, x in zip(sig.diff, xs)}
        return ops.loss(ops.call(*sig.assemble(at)), consts[0])

    def program(ops: Ops, consts: tuple, *xs: Any) -> Any:
        return strided(ops, consts, xs, lambda x: x)

    def twin(ops: Ops, consts: tuple, *xs: Any) -> Any:
        return strided(ops, consts, xs, ops.contiguous)

    return Plan(tuple(inputs), (c,), program, key=tuple(views), twin=twin)


def _transposed_view(sig: Signature, rng: np.random.Generator) -> Plan:
    views = [p for p in sig.arrays if sig.args[p].ndim >= 2]
    if not views:
        raise NotApplicable("the rule has no differentiable array argument with 2 or more axes")
    inputs = tuple(np.ascontiguousarray(sig.args[p].T) if p in views else copy_tree(sig.args[p]) for p in sig.diff)
    c = loss_weights(sig.weighed(sig.output), rng)

    def transposed(ops: Ops, consts: tuple, xs: tuple[Any, ...], through: Callable[[Any], Any]) -> Any:
        at = {p: (through(x.T) if p in views else x) for p, x in zip(sig.diff, xs)}  # Fortran-ordered views
        return ops.loss(ops.call(*sig.assemble(at)), consts[0])

    def program(ops: Ops, consts: tuple, *xs: Any) -> Any:
        return transposed(ops, consts, xs, lambda x: x)

    def twin(ops: Ops, consts: tuple, *xs: Any) -> Any:
        return transposed(ops, consts, xs, ops.contiguous)

    return Plan(inputs, (c,), program, key=tuple(views), twin=twin)


def _tied_slot(sig: Signature) -> int:
    for p in sig.arrays:
        a = sig.args[p]
        if a.ndim != 2:
            continue
        if a.shape[0] == a.shape[1]:
            return p
        # A non-square W fits only where its spec makes its transpose's shape too (a primal that merely runs on
        # W.T may read it as another thing: an (n, 2) array of complex numbers as real and imaginary parts) and
        # the rule accepts it there.
        if sig.shapes is None or a.T.shape not in sig.shapes.get(p, frozenset()):
            continue
        try:
            sig.rule.primal(*sig.assemble({p: np.ascontiguousarray(a.T)}))
            return p
        except Exception:  # noqa: BLE001 - the rule does not take W.T there
            continue
    raise NotApplicable("the rule has no 2-D array argument that can also take its transpose (tied weights W, W.T): "
                        "a square one, or one whose spec also draws the transposed shape")


def _tied_weights(sig: Signature, rng: np.random.Generator) -> Plan:
    k = _tied_slot(sig)
    c1 = loss_weights(sig.weighed(sig.output), rng)
    c2 = loss_weights(sig.weighed(_output_on_transpose(sig, k)), rng)

    def tied(ops: Ops, consts: tuple, xs: tuple[Any, ...], transposed: Callable[[Any], Any]) -> Any:
        at = sig.by_position(xs)
        y1 = ops.call(*sig.assemble(at))
        y2 = ops.call(*sig.assemble({**at, k: transposed(at[k])}))  # the same weights, transposed (a decoder's)
        return ops.loss(y1, consts[0]) + ops.loss(y2, consts[1])

    def program(ops: Ops, consts: tuple, *xs: Any) -> Any:
        return tied(ops, consts, xs, lambda w: w.T)

    def distinct(ops: Ops, consts: tuple, *xs: Any) -> Any:
        return tied(ops, consts, xs, lambda w: ops.distinct(w).T)

    return Plan(sig.inputs(), (c1, c2), program, key=(k,), twin=distinct)


def _output_on_transpose(sig: Signature, k: int) -> Any:
    a = sig.args[k]
    if a.shape[0] == a.shape[1]:
        return sig.output
    return sig.rule.primal(*sig.assemble({k: np.ascontiguousarray(a.T)}))


CONTEXTS: tuple[Context, ...] = (
    Context("output-used", "the output goes through y + s sin(y/s)/2 (s = 1 unless the output exceeds pi or a "
            "finite-difference step moves it further) into a random linear functional", _output_used),
    Context("output-unused", "the inputs are read before the call; the rule's output is never used", _output_unused),
    Context("captured-before", "dot(x, x) captures the input before the call; the output is used", _captured_before),
    Context(
        "read-after",
        "dot(x, x) captures the input, the rule's output is unused, the input is read after the call (the seed program)",
        _read_after,
    ),
    Context("called-twice", "the rule is called twice on two inputs; both outputs are used", _called_twice, search=False),
    Context("fan-out", "the output feeds three consumers whose cotangents accumulate", _fan_out),
    Context("same-array-twice", "the same array in two argument slots: rule(x, x)", _same_array_twice, aliasing=True),
    Context("transposed-alias", "an array and its transpose in two slots: rule(x, x.T)", _transposed_alias, aliasing=True),
    Context("strided-view", "non-contiguous strided views as arguments: rule(x[::2])", _strided_view, views=True),
    Context("transposed-view", "Fortran-ordered transposed views as arguments: rule(x.T)", _transposed_view, views=True),
    Context("tied-weights", "tied weights: rule(W) and rule(W.T) in one program", _tied_weights, aliasing=True),
)


def by_name(names: Any) -> tuple[Context, ...]:
    known = {c.name: c for c in CONTEXTS}
    out = []
    for n in names:
        if isinstance(n, Context):
            out.append(n)
        elif n in known:
            out.append(known[n])
        else:
            raise ValueError(f"Got context {n!r}; known contexts are {', '.join(known)}.")
    return tuple(out)
