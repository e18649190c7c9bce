"""GG204 for NumPy rules: the tape differentiates the rule's own rrule and pullback, against finite differences.

A program that differentiates a gradient (a Hessian-vector product, a gradient penalty, a meta-gradient)
differentiates the pullback itself. The tape runs the rrule and the pullback on traced arrays (ordinary
NumPy code records its operations through NumPy's dispatch protocols, see
`gradguard.engines.tape.pullback_derivative`) and takes the derivative of ``<w, pullback at x (ybar)>``

* with respect to the input, along a random direction ``u``, against finite differences of the pullback
  at ``x + t u`` (a residual cut off from the input shows here);
* with respect to the cotangent, along a random ``c``, against finite differences of the pullback at
  ``ybar + s c`` (a pullback whose use of ``ybar`` is linear in value but not in what it traces: a scale read
  out of the trace, shows here).

What the tape cannot run (a NumPy function it has no rule for, a method traced arrays lack, a rule that
converts its own input to a plain array before computing anything) skips the check with the reason; it
is never an error. Registered under GG204 in numeric_jax.py, which hands NumPy rules here.
"""

from __future__ import annotations

import functools
import math
import warnings
from typing import Any, Callable, Iterable

import numpy as np

from gradguard.checker import tolerances
from gradguard.checker.case import Case, is_finite_tree
from gradguard.checker.checks.registry import Problem, Skip
from gradguard.checker.inputs import show_apart
from gradguard.checker.kinks import STAIR_SLACK, contracted, finer_steps_admit, shifted, staircase, stairs_blur, unit_vector
from gradguard.checker.trees import abs_inner, copy_tree, inner, leaves, with_leaves
from gradguard.engines import fd

__all__ = ["numpy_second_order", "fd_directional", "fd_settled", "kinked", "kinked_where_not_finite", "pullback_at"]

_UNTRACEABLE = "gg204_tape_untraceable"  # RuleSpec.run_state key: why the tape cannot run this rule (found once)

FIX = (
    "A program that differentiates this pullback (second order) sees only what the rrule and the pullback "
    "compute with NumPy operations from the input and the cotangent themselves: compute residuals from the "
    "input, not from a copy read out as a plain value (np.array, np.asarray, float(), a preallocated plain "
    "buffer), and use ybar only through operations on ybar itself."
)


def numpy_second_order(case: Case) -> Iterable[Problem]:
    """GG204 for one drawn input of a NumPy rule (see the module docstring)."""
    from gradguard.engines.tape import pullback_derivative

    rule = case.rule
    if not case.diff_positions:
        raise Skip("the rule has no differentiable argument")
    if rule.mutates:
        raise Skip("the rule mutates an argument; the tape's second order runs rules on traced arrays, which it does not write into")
    if _UNTRACEABLE in rule.run_state:
        raise Skip(rule.run_state[_UNTRACEABLE])
    if any(np.iscomplexobj(case.args[i]) for i in case.diff_positions):
        raise Skip("complex arguments: the tape's second order covers real arguments (GG205 judges conjugation)")
    # The input's first call and first pullback, which the other checks of this input share (its cotangent drawn
    # once): this check's own forward call, draw and pullback gave nothing they do not.
    pulled, first = case.first_tangents()
    y, ybar = pulled.call.output, pulled.ybar
    if not is_finite_tree([first[i] for i in case.diff_positions]) or any(np.iscomplexobj(t) for t in leaves(y)):
        return  # GG206 judges non-finite tangents; complex outputs are GG205's
    u = case.direction("direction")
    w = case.direction("covector")
    c = case.cotangent_like(y, "cotangent direction")
    at_ybar = inner(w, first)
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            d = pullback_derivative(rule.rrule, case.fresh(), leaves(copy_tree(ybar)), w, diff=case.diff_positions,
                                    rebuild=lambda ls: with_leaves(ybar, ls), plain=(y, first))
    except Exception as exc:  # noqa: BLE001 - TraceError, a method Tracked lacks...: the tape's limit, not the rule's bug
        reason = (f"the tape cannot run {rule.name} on traced arrays, so its second order is not checked: "
                  f"{_tape_failure(exc)}")
        rule.run_state[_UNTRACEABLE] = reason
        raise Skip(reason) from None
    if d.diverged:
        # The rule took another path on traced arrays (a bare except around an operation the tape has no rule for, a
        # type test): the tape differentiated another function than the one the rule computes.
        raise Skip(f"{rule.name} computes other values on the tape's traced arrays than on plain ones ({d.diverged}), "
                   "so what the tape differentiates is not its second order, and it is not checked")
    forward = [e for e in d.escapes if e.phase == "forward"]
    pulled = [e for e in d.escapes if e.phase == "pullback"]
    if not d.output_traced and forward:
        reason = (f"the output of {rule.name} is read out of the trace ({_sites(forward)}), so the tape cannot "
                  "differentiate through it and its second order is not checked")
        rule.run_state[_UNTRACEABLE] = reason
        raise Skip(reason)
    if d.untraced_tangents and pulled:
        reason = (f"the pullback of {rule.name} returns its tangent for argument {d.untraced_tangents[0]} read out "
                  f"of the trace ({_sites(pulled)}), so the tape cannot differentiate through it and its second "
                  "order is not checked")
        rule.run_state[_UNTRACEABLE] = reason
        raise Skip(reason)
    if not is_finite_tree(list(d.wrt_args) + list(d.wrt_cotangent)):
        return  # a NaN in the tape's derivative (e.g. the untaken branch of a where): GG206's family, not a value to compare
    problem = _input_part(case, ybar, u, w, d)
    if problem is None and not any(e.slot in d.cotangent_slots.values() for e in d.escapes):
        problem = _cotangent_part(case, ybar, c, w, d, at_ybar)
    if problem is None:
        return
    own = set(d.argument_slots.values()) | set(d.cotangent_slots.values())
    converted = [e for e in d.escapes if e.slot in own]
    if converted:
        # np.asarray(x) on its own input or cotangent (pints' log-priors: the input-normalising idiom) is the array
        # itself in NumPy: the code computes from x, but no engine tracing NumPy's dispatch follows it, and what the
        # tape derives past it is not the rule's second order. As for a rule that converts its input before
        # computing anything (above): the tape's limit, not an error. Where the two derivatives agree, the read did
        # not matter there (np.asarray(grad).dtype); once they disagree, it did, and their agreement at the rule's
        # earlier inputs (a TensorSlow graph at zeros, where both are 0) established nothing: the check is skipped
        # for the whole rule. A copy of a computed value (a residual) stays the error it is.
        reason = (f"{rule.name} reads its own input or cotangent as a plain array ({_sites(converted)}): NumPy "
                  "hands back the array itself, but no engine that traces NumPy code through its dispatch follows "
                  "it, so the tape's derivative past it is not the rule's second order, and it is not checked")
        rule.run_state[_UNTRACEABLE] = reason
        raise Skip(reason, rule_wide=True)
    yield problem


def _tape_failure(exc: Exception) -> str:
    """What stopped the tape, in the rule's terms: a table looked up by an argument's type (tangent's, autograd's
    own VJP tables) fails with the tape's own array class as the missing key, which says nothing to the rule's
    author."""
    from gradguard.engines.tape._tape import Tracked

    if isinstance(exc, KeyError) and exc.args and isinstance(exc.args[0], type) and issubclass(exc.args[0], Tracked):
        return ("KeyError on a traced array's type: the rule looks up a table by type(x), and a traced array is not "
                "an np.ndarray")
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}"


def _sites(escapes: list[Any]) -> str:
    seen = dict.fromkeys(f"{e.how} at {e.site}" if e.site else e.how for e in escapes)
    return "; ".join(seen)


def fd_directional(f: Any, args: tuple[Any, ...], along: tuple[Any, ...], w: tuple[Any, ...], *,
                   confirm: bool = False, levels: int | None = None, first: fd.Derivative | None = None) -> fd.Derivative | None:
    """d/dt <w, f(args + t along)> by finite differences (None where they fail or are not finite); with
    ``confirm``, by `fd.confirmed`: tables at 32-fold finer steps until two agree, so that steps which reach
    across a singularity (a pole of the pullback nearer than the first table's steps) cannot claim a value
    (``first``: this function's earlier answer with the same ``levels``, not computed again).
    ``levels``: the depth of the Richardson table (`fd.directional`'s default when None)."""
    estimate = functools.partial(fd.confirmed, first=first) if confirm else fd.directional
    depth = {} if levels is None else {"levels": levels}
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            d = estimate(f, args, along, w, complex_step=False, **depth)
    except (ValueError, ArithmeticError, TypeError):
        return None
    if not (np.all(np.isfinite(d.value)) and math.isfinite(d.error)):
        return None
    return d


def fd_settled(f: Any, args: tuple[Any, ...], along: tuple[Any, ...], w: tuple[Any, ...],
               agrees: Any, settles: Any = None) -> fd.Derivative | None:
    """The finite difference to judge a claim by: the first table where it ``agrees`` with the claim (no error
    to report either way), else the confirmed one. One table's error estimate can be fooled where its
    steps reach across a pole (log's pullback g / x at x = 1e-3 and steps of 1.8e-2 gave 15240.7 +- 48158
    where the derivative is -1000002); a disagreement is only reported once finer tables bear it out.

    Arguments larger than `fd.LARGE_INPUT` elements get a shallow table first (`fd.budget`: each level is
    two calls of the rule and its pullback); where it does not agree, the judgement is made exactly as for
    small arguments, from the full table and then the confirmed one. Smaller arguments get one too where the
    caller passes ``settles`` (`tolerances.settles`: agreement its error estimate cannot have bought), and it
    stands only where that holds."""
    shallow = fd.budget(args).get("levels")
    if shallow is not None:
        cheap = fd_directional(f, args, along, w, levels=shallow)
        if cheap is not None and agrees(cheap):
            return cheap
    elif settles is not None:  # fd.quick's table: small arguments, whose budget is the full one
        cheap = fd_directional(f, args, along, w, **fd.quick(args))
        if cheap is not None and settles(cheap):
            return cheap
    first = fd_directional(f, args, along, w)
    if first is not None and agrees(first):
        return first
    return fd_directional(f, args, along, w, confirm=True, first=first)


JUMP_GROWTH = 5.0  # kinked: central slopes growing this much per tenfold finer step are a jump's (10 exactly)
NOISE_MARGIN = 4.0  # kinked: a kink's second difference at a step exceeds the rounding floor by this much
KINK_SHRINK = 0.5  # kinked: a kink's second difference at a tenfold finer step is at most this share of it (0.1 exactly)
# kinked: a value at 0 that both sides leave this share of the values behind, at every step, is apart from them (a
# removable jump, a pole symmetric about 0); rounding, even through float32, stays far below it
APART = 1e-3


def kinked(f: Any, args: tuple[Any, ...], along: tuple[Any, ...], w: tuple[Any, ...]) -> bool:
    """Whether ``t -> <w, f(args + t along)>`` has a kink or a jump at 0: its one-sided slopes differ, and the
    difference does not shrink with the step (it would, like the step, for a smooth function), from one step to
    the next ten times finer, at the first two steps or at the next two (a second kink a few steps away adds to
    the first step's difference only: timm's hard mish at x = 1.6e-300, its kink, beside x = 1e-5); or its
    central slopes grow tenfold at each of those steps, a jump whose value at 0 is the middle of its sides (the
    gradient x/|x| of a norm, 0 at 0: both one-sided slopes are the jump over the step, equal, and as large as
    the step is small). The pullback has no derivative there to compare; finite differences only average the
    two sides.

    Rounding is told from a kink by the second difference ``|g(s) + g(-s) - 2 g(0)|``: a kink's shrinks tenfold
    with the step, rounding's does not, so a step's counts only where it exceeds the second difference at a step
    a thousand times finer than the first (the floor) by NOISE_MARGIN, and where it is at most KINK_SHRINK of the
    coarser step's. A gradient computed through float32 in a float64 rule (soft-DTW's NumPy backward on a float32
    copy of its table) rounds at 1e-7 of its value, and without the floor every input read as kinked, which excused
    any second order (GG705 missed a backward with no graph); one floor can fall where the rounding errors nearly
    cancel, and xformers' SwiGLU, whose backward takes silu' through float32, showed second differences of 5.8e-8,
    3.2e-8 and 1.4e-7 at steps 2.6e-6, 2.6e-7 and 2.6e-8 against a floor of 2.8e-8: read as a kink, it excused a
    double backward of -2.93 where plain autograd and finite differences give 9.31."""

    def g(t: float) -> float:
        return inner(w, f(*_moved(args, along, t)))

    h = _probe_step(args, along)
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            g0 = g(0.0)
            steps = (h, h / 10, h / 100)
            sides = [(g(s), g(-s)) for s in steps]
            fine = h / 1000
            floor = abs(g(fine) + g(-fine) - 2 * g0)
    except Exception:  # noqa: BLE001 - the pullback refuses a nearby point: no evidence of smoothness either
        return True
    gap = [abs((ahead - g0) / s - (g0 - behind) / s) for s, (ahead, behind) in zip(steps, sides)]
    central = [abs(ahead - behind) / (2 * s) for s, (ahead, behind) in zip(steps, sides)]
    if not all(math.isfinite(x) for x in gap + central + [floor]):
        return True
    if central[0] > 0 and all(central[k + 1] > JUMP_GROWTH * central[k] for k in (0, 1)):
        return True
    if _apart(g0, sides):
        return True
    slope = central[0]
    second = [g_ * s for g_, s in zip(gap, steps)]  # |g(s) + g(-s) - 2 g(0)| at each step
    return any(gap[k] > 1e-3 * slope + 1e-6 and gap[k + 1] > 0.5 * gap[k] and second[k + 1] <= KINK_SHRINK * second[k]
               and second[k + 1] > NOISE_MARGIN * floor for k in (0, 1))



def _apart(g0: float, sides: list[tuple[float, float]]) -> bool:
    """Whether the value at 0 stands apart from its sides at every step: ``|g(+-s) - g(0)|`` does not shrink as the
    step does (a smooth function's shrinks like the step) and is at least APART of the values at that step. A
    reciprocal's gradient, defined as 0 at 0 (torch_linalg_ext's Reciprocal), is -1/(s u)^2 on either side: its
    central slopes are 0 and its one-sided gaps grow, so neither the jump test above nor the kink test below saw that
    the function has no value to be differentiated at 0, and GG705 read finite differences' exact 0 as a second
    derivative that PyTorch's NaN there contradicted."""
    away = [max(abs(ahead - g0), abs(behind - g0)) for ahead, behind in sides]
    sizes = [max(abs(g0), abs(ahead), abs(behind)) for ahead, behind in sides]
    return (all(far > APART * size for far, size in zip(away, sizes))
            and all(away[k + 1] >= 0.5 * away[k] for k in range(len(away) - 1)))


JUMP_PROBES = 8  # kinked_where_not_finite: at most this many input elements probed


def kinked_where_not_finite(pulled_ones: Any, args: tuple[Any, ...], u: tuple[Any, ...], every: tuple[Any, ...],
                            where: list[tuple[int, int]]) -> bool:
    """Whether ``pulled_ones``, the pullback for a cotangent of ones read with ``every``, a covector of ones (every
    output and entry weighted: an engine's NaN in a second order comes from every such entry whatever the check's
    cotangent and covector weigh it by, and a covector that weighs the jumping entry by 0 hid the jump: kymatio's
    modulus at seed 2), kinks or jumps at ``args`` (:func:`kinked`) along ``u`` or along one of the input elements
    ``where`` ((argument, flat element) pairs where the engine's derivative is not finite; the first JUMP_PROBES).
    ``u`` may leave those elements still: kymatio's modulus at a zero row of x, which u does not move, where PyTorch
    multiplies the row's infinite second derivative by u's 0 and gives NaN for the whole product; along the row
    the gradient jumps (slopes 100, 1e4, 1e6 at steps 1e-2 to 1e-6), along u it is smooth (980.264). Where it does,
    the rule has no second derivative at x for the NaN to be wrong about."""
    alongs = [u] + [tuple(unit_vector(args[i], k) if j == i else None for j in range(len(args)))
                    for i, k in where[:JUMP_PROBES]]
    for along in alongs:
        try:
            if kinked(pulled_ones, copy_tree(args), along, every):
                return True
        except Exception:  # noqa: BLE001 - the pullback cannot be taken beside x: nothing established
            continue
    return False

JUMP_KEPT = 0.5  # jumps_at_x: a second difference that keeps this share of itself at a 1000-fold finer step
# ... and is at least this many times the finer second differences a tenth of the coarse step away on either side
# (at x alone: a function whose values are noisy at that scale has such second differences everywhere)
JUMP_ALONE = 10.0


def jumps_at_x(f: Any, args: tuple[Any, ...], along: tuple[Any, ...],
               noise_explains: Callable[[float], bool] | None = None) -> bool:
    """Whether some output element of ``f`` jumps at ``args`` itself along ``along``: its second difference
    ``|f(x + s u) + f(x - s u) - 2 f(x)|`` keeps half its size or more from one step to one a thousand times
    finer, far above the element's rounding (a smooth element's shrinks a millionfold, a kink's a thousandfold).
    Element by element, with no covector: a jump in elements the covector does not read still makes the function
    discontinuous at ``x``, where it has no derivative to judge.

    LAPACK's singular vectors of ``[[1.307481, 4.5e-42], [-1.4e-219, 1.756214]]`` have other signs than those of
    every matrix around it (the exact diagonal one included): an SVD's pullback there is another function than at
    every neighbour, and its derivative at ``x`` (JAX's, -113.434, in the signs at ``x``) differs from the
    derivative finite differences see around it (264.438, in the neighbours' signs), though the covector read only
    entries the signs leave alone. The output jumps there too (the second row of Vh is [-1, 0] at ``x`` and
    [1, 0] around it), and where the cotangent reads only it the pullback's values agree at ``x`` while its
    derivatives do not (4.96421 by JAX, 19.426 around): callers ask about both.

    ``noise_explains``: where the caller can say how much noise would explain what it saw (given the sum of the
    largest second differences of the elements, at the finer step, at x and a tenth of the coarse step away on
    either side), a second difference that keeps its size there too is no jump at x alone but noise everywhere
    around x: it counts only where it explains the caller's disagreement. A backward that differentiates by a
    finite difference of its own (sigkernel's, at a step of 1e-9) is noisy at 1e-7 everywhere, and its double
    backward, 1e9 off finite differences of its gradient, was excused as a jump; a disagreement that noise of that
    size over the caller's step could make still is."""
    h = _probe_step(args, along)

    def at(t: float) -> list[np.ndarray]:
        out = []
        for leaf in leaves(f(*_moved(args, along, t))):
            arr = None if leaf is None else np.asarray(leaf)
            out.append(arr.astype(np.complex128 if arr.dtype.kind == "c" else np.float64)
                       if arr is not None and arr.dtype.kind in "fc" else None)
        return out

    def second(t: float, s: float, y: list[Any] | None = None) -> list[Any] | None:
        """Per leaf, the second difference at t with step s (None where the leaf is not a float array)."""
        y = at(t) if y is None else y
        ahead, behind = at(t + s), at(t - s)
        if not len(ahead) == len(behind) == len(y):
            return None
        return [None if a is None or b is None or c is None or a.shape != c.shape or b.shape != c.shape
                else np.abs(a + b - 2 * c) for a, b, c in zip(ahead, behind, y)]

    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            y0 = at(0.0)
            coarse, fine = second(0.0, h, y0), second(0.0, h / 1000, y0)
            if coarse is None or fine is None:
                return False
    except Exception:  # noqa: BLE001 - the function refuses a point beside x: no jump established
        return False
    candidates = []
    for n, (c, wide, narrow) in enumerate(zip(y0, coarse, fine)):
        if c is None or wide is None or narrow is None:
            continue
        eps = float(np.finfo(np.float32 if c.dtype == np.complex64 else c.real.dtype).eps)
        floor = 1000 * 4 * eps * np.abs(c)
        with np.errstate(all="ignore"):
            kept = np.isfinite(wide) & np.isfinite(narrow) & (narrow > floor) & (narrow >= JUMP_KEPT * wide)
        if np.any(kept):
            candidates.append((n, kept, narrow, floor))
    if not candidates:
        return False
    if noise_explains is None:
        return True
    alone = [kept for _, kept, _, _ in candidates]
    noise = [np.where(kept, narrow, 0.0) for _, kept, narrow, _ in candidates]
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for centre in (h / 10, -h / 10):
                around = second(centre, h / 1000)
                if around is None:
                    return True
                for k, (n, kept, narrow, floor) in enumerate(candidates):
                    if around[n] is None or around[n].shape != narrow.shape or not np.all(np.isfinite(around[n])):
                        return True
                    # at x alone: this element's second difference stands far above its neighbours', and the whole
                    # output is smooth there (noise in steps of a quantum often cancels to 0 at one element)
                    smooth = bool(np.all(around[n] <= floor))
                    alone[k] = alone[k] & (narrow > JUMP_ALONE * around[n]) & smooth
                    noise[k] = np.maximum(noise[k], np.where(kept, around[n], 0.0))
    except Exception:  # noqa: BLE001 - the function refuses a point beside x: as before, the jump at x stands
        return True
    if any(np.any(kept) for kept in alone):
        return True
    return noise_explains(float(sum(np.sum(n) for n in noise)))


def _probe_step(args: tuple[Any, ...], along: tuple[Any, ...]) -> float:
    """The first step :func:`kinked` and :func:`jumps_at_x` take along ``along``: 1e-5 of :func:`_unit_step`."""
    return 1e-5 * _unit_step(args, along)


def _unit_step(args: tuple[Any, ...], along: tuple[Any, ...]) -> float:
    """The step along ``along`` that moves some argument by the largest moving argument's size (at least 1): that size
    over the direction's largest element. The moving arguments only: a constant may be anything (a callable a
    checkpoint runs, a module)."""
    size = max([float(np.max(np.abs(a))) for a, v in zip(args, along) if v is not None and np.size(a)] + [1.0])
    reach = max([float(np.max(np.abs(v))) for v in along if v is not None and np.size(v)] + [1e-300])
    return size / reach


def _moved(args: tuple[Any, ...], along: tuple[Any, ...], t: float) -> tuple[Any, ...]:
    """Copies of ``args + t along``: only the moving arguments change, and a Python number stays one; a constant is
    passed as it is (a callable, None or a flag: type(a)(a) raised for them, and the raise read as a kink on every
    input)."""
    return copy_tree(tuple(a if v is None else _step(a, t * np.asarray(v)) for a, v in zip(args, along)))


def discontinuous_at_x(case: Case, pulled: Any, u: tuple[Any, ...], w: tuple[Any, ...] | None = None,
                       lhs: fd.Derivative | None = None, rhs: float | None = None) -> bool:
    """Whether the pullback ``pulled`` (args -> tangents) or the rule's output jumps at ``x`` alone along ``u``
    (:func:`jumps_at_x`): no second order there to judge (LAPACK's signs of singular vectors that flip at ``x``
    and nowhere around it). Given the covector ``w`` and the finite differences ``lhs`` of ``<w, pulled>`` that
    disagree with ``rhs``, a pullback noisy everywhere around ``x`` counts only where its noise, over the
    differences' step (times STAIR_SLACK, Richardson's weights), reaches the disagreement."""
    explains = None
    if w is not None and lhs is not None and rhs is not None and lhs.step > 0:
        weight = max([float(np.max(np.abs(np.asarray(c)))) for c in leaves(w) if c is not None and np.size(c)] + [0.0])
        gap = abs(float(lhs.value) - rhs)

        def explains(noise: float) -> bool:
            return STAIR_SLACK * weight * noise / float(lhs.step) >= gap

    return (jumps_at_x(pulled, case.fresh(), u, explains)
            or jumps_at_x(forward_at(case), case.fresh(), u))


def _step(a: Any, dv: Any) -> Any:
    """``a + dv``, of ``a``'s own type where ``a`` is a Python or NumPy scalar."""
    moved = a + dv
    return type(a)(moved) if isinstance(a, (int, float, complex, np.generic)) and not isinstance(a, bool) else moved


def forward_at(case: Case) -> Any:
    """``args -> the rule's output at args``: the output its pullback belongs to (a jump of it at ``x`` alone, the
    signs of an SVD's vectors there, makes the pullback at ``x`` the derivative of another function than around
    it, though the pullback's own values may not jump)."""
    rule = case.rule

    def output(*a: Any) -> Any:
        return rule.rrule(*a)[0]

    return output


def pullback_at(case: Case, ybar: Any) -> Any:
    """``args -> pullback at args (ybar)``: what GG204's finite differences move along ``u`` (NumPy and JAX
    rules alike)."""
    rule = case.rule

    def pulled(*a: Any) -> Any:
        return rule.rrule(*a)[1](copy_tree(ybar))

    return pulled


def pullback_in_stairs(pulled: Any, args: tuple[Any, ...], u: tuple[Any, ...], w: tuple[Any, ...], lhs: fd.Derivative,
                       rhs: float, tol: tolerances.Tolerance, scale: float) -> bool:
    """Whether ``<w, pulled>`` climbs in stairs along the elements ``u`` moves (`kinks.stairs_blur`) and what they make
    of finite differences at ``lhs``'s step covers the disagreement with ``rhs``: a pullback that reads a forward
    solved to a tolerance (LML's threshold bisected to 1e-4) is flat within each stair, and its finite differences at
    finer steps are one stair's slope (-1.12 where the derivative of the backward is -0.938)."""
    blur = stairs_blur(lambda *a: inner(w, pulled(*a)), args, u, float(lhs.step))
    return blur > 0 and tolerances.close(float(lhs.value), rhs, tol, scale=scale, fd_error=lhs.error + STAIR_SLACK * blur)


ACROSS_STAIRS = (8, 16, 32, 64, 128, 256, 512)  # steps, in stairs of the primal, of `across_primal_stairs`' differences
STAIRS_PROBED = 8  # input elements (those u moves most) probed for stairs in the primal's values


def across_primal_stairs(case: Case, pulled: Any, u: tuple[Any, ...], w: tuple[Any, ...], rhs: float,
                         tol: tolerances.Tolerance, scale: float) -> bool:
    """Whether the rule's primal climbs in stairs along the elements ``u`` moves (`kinks.staircase`: a forward solved
    to a tolerance) and central differences of ``<w, pulled>`` at steps spanning 8 to 512 of its stairs hold
    ``rhs`` between them (the stairs' noise falls as the step grows, the truncation error grows with it). A backward that reads such a forward's output climbs with it but is not flat (it reads
    the input too), so no stairs show in the pullback itself; finite differences at steps finer than a stair read that
    stair's slope: LML's threshold, bisected to 1e-4, gave -1.12 where its derivative of the backward, -0.938, is what
    steps across many stairs give."""
    moved = sorted(((abs(float(m)), i, k) for i, d in enumerate(u) if d is not None and isinstance(case.args[i], np.ndarray)
                    and not np.iscomplexobj(case.args[i]) for k, m in enumerate(np.asarray(d).reshape(-1)) if m != 0),
                   reverse=True)[:STAIRS_PROBED]
    primal = case.rule.primal
    widths = [stairs.width / move for move, i, k in moved
              if (stairs := staircase(lambda *a: primal(*copy_tree(a)), case.fresh(), i, k)) is not None]
    if not widths:
        return False
    args = case.fresh()
    reach = 0.05 * max(1.0, *(float(np.max(np.abs(case.args[i]))) for _, i, _ in moved))
    estimates = []
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for m in ACROSS_STAIRS:
                h = m * float(np.median(widths))  # a typical stair: the widest may belong to an element u barely moves
                if h * max(move for move, _, _ in moved) > reach:
                    break
                up, down = (inner(w, pulled(*shifted(args, u, t))) for t in (h, -h))
                estimates.append((up - down) / (2 * h))
    except Exception:  # noqa: BLE001 - the pullback left its domain: nothing established
        return False
    if len(estimates) < 2 or not all(math.isfinite(e) for e in estimates):
        return False
    lo, hi = min(estimates), max(estimates)
    return lo <= rhs <= hi or any(tolerances.close(e, rhs, tol, scale=scale) for e in estimates)


def _input_part(case: Case, ybar: Any, u: tuple[Any, ...], w: tuple[Any, ...], d: Any) -> Problem | None:
    pulled = pullback_at(case, ybar)
    rhs = inner(u, d.wrt_args)

    def agrees(lhs: fd.Derivative) -> bool:
        return tolerances.close(float(lhs.value), rhs, case.tol, scale=abs_inner(u, d.wrt_args), fd_error=lhs.error)

    def settles(lhs: fd.Derivative) -> bool:
        return tolerances.settles(float(lhs.value), rhs, case.tol, scale=abs_inner(u, d.wrt_args), fd_error=lhs.error)

    lhs = fd_settled(pulled, case.fresh(), u, w, agrees, settles)
    if lhs is None or agrees(lhs):
        return None
    if kinked(pulled, case.fresh(), u, w):
        return None
    if finer_steps_admit(contracted(pulled, w), case.args, u, rhs, case.tol, abs_inner(u, d.wrt_args)):
        return None  # a pole of the pullback near x (log|det| beside a singular matrix): its tables' steps were too coarse
    if discontinuous_at_x(case, pulled, u):
        return None  # the pullback or the output is discontinuous at x (LAPACK's signs of singular vectors flip there)
    if (pullback_in_stairs(pulled, case.fresh(), u, w, lhs, rhs, case.tol, abs_inner(u, d.wrt_args))
            or across_primal_stairs(case, pulled, u, w, rhs, case.tol, abs_inner(u, d.wrt_args))):
        return None
    return _problem(case, "the input", "d/dt <w, pullback at (x + t u)(ybar)>", "a random direction u", lhs, rhs, d)


def _cotangent_part(case: Case, ybar: Any, c: Any, w: tuple[Any, ...], d: Any, at_ybar: float) -> Problem | None:
    rule = case.rule
    nleaves = len(leaves(ybar))
    if any(g is None for g in d.wrt_cotangent):
        return None

    def pulled(*ys: Any) -> Any:
        return rule.rrule(*case.fresh())[1](with_leaves(ybar, list(ys)))

    # A pullback linear in ybar (GG202 judges that) makes a central difference with a unit step exact: two
    # calls instead of a Richardson table. Where it is not affine along c, this part has nothing to add.
    base = leaves(copy_tree(ybar))
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            at_ahead = pulled(*[b + np.asarray(v) for b, v in zip(base, leaves(c))])
            at_behind = pulled(*[b - np.asarray(v) for b, v in zip(base, leaves(c))])
            ahead, behind = inner(w, at_ahead), inner(w, at_behind)
            # Each inner product rounds at eps times the sum of its terms' sizes: where c is 0 on an element whose
            # tangent is huge (exp's y at x = 301 is 1e130), the two cancel and the difference is that rounding.
            terms = abs_inner(w, at_ahead) + abs_inner(w, at_behind)
            eps = max((float(np.finfo(np.asarray(t).dtype).eps) for t in leaves(at_ahead)
                       if t is not None and np.asarray(t).dtype.kind in "fc"), default=float(np.finfo(float).eps))
    except Exception:  # noqa: BLE001 - the pullback raised at a shifted cotangent: other checks report it
        return None
    if not (math.isfinite(ahead) and math.isfinite(behind)):
        return None
    if not tolerances.close(ahead + behind, 2 * at_ybar, case.tol, scale=abs(ahead) + abs(behind)):
        return None  # not affine along c: the pullback is not linear in ybar, which is GG202's finding
    lhs = fd.Derivative((ahead - behind) / 2, 4 * eps * terms, 2, "central", 1.0)
    rhs = inner(leaves(c), d.wrt_cotangent)
    if tolerances.close(float(lhs.value), rhs, case.tol, scale=abs_inner(leaves(c), d.wrt_cotangent), fd_error=lhs.error):
        return None
    if kinked(pulled, tuple(leaves(copy_tree(ybar))), tuple(leaves(c))[:nleaves], w):
        return None
    return _problem(case, "the cotangent", "d/ds <w, pullback(ybar + s c)>", "a random cotangent direction c", lhs, rhs, d)


def _problem(case: Case, wrt: str, quantity: str, along: str, lhs: fd.Derivative, rhs: float, d: Any) -> Problem:
    fd_text, tape_text = show_apart(float(lhs.value), rhs)
    why = ""
    if d.escapes:
        why = (f" Traced values were read as plain ones ({_sites(d.escapes)}); the tape treats what is computed "
               "from such a copy as a constant.")
    return Problem(
        message=(
            f"the second order of {case.rule.name} is wrong with respect to {wrt}: along {along}, {quantity} = "
            f"{fd_text} by finite differences of the pullback, but the tape's derivative of the pullback (the "
            f"rrule and pullback run on traced arrays) gives {tape_text}.{why}"
        ),
        location=wrt,
        expected=fd_text,
        actual=tape_text,
        fix=FIX,
    )
