"""Test the tester on pytree arguments and outputs of JAX rules (a NamedTuple in, a dict out).

`jax.custom_vjp` accepts any pytree; JAX's custom-derivatives notebook passes a ``Point(x, y)`` and returns
a dict holding a tuple. The correct rule must pass every check; its broken twin (one sign slip in the
tangent of ``pt.y``) must fail with the exact message, a counterexample that names the leaves, and a
reproducer that replays the failure.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from collections import namedtuple

import numpy as np
import pytest
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable

from gradguard.checker import arrays, check, jax_rule

jax = pytest.importorskip("jax")
jnp = jax.numpy

Point = namedtuple("Point", ["x", "y"])
POINTS = st.builds(Point, arrays(shape=(2,)), arrays(shape=(2,)))


@pytest.fixture(autouse=True)
def _cpu(monkeypatch):
    monkeypatch.setenv("GRADGUARD_DEVICE", "cpu")


@jax.custom_vjp
def point_fn(pt):
    return {"a": pt.x**2, "b": (jnp.sin(pt.x), jnp.cos(pt.y))}


def _point_fwd(pt):
    return point_fn(pt), pt


def _point_bwd(pt, g):
    a_bar, (b0_bar, b1_bar) = g["a"], g["b"]
    return (Point(2 * pt.x * a_bar + jnp.cos(pt.x) * b0_bar, -jnp.sin(pt.y) * b1_bar),)


point_fn.defvjp(_point_fwd, _point_bwd)
point_rule = jax_rule(point_fn, POINTS, name="point_rule")


@jax.custom_vjp
def point_slip(pt):
    return {"a": pt.x**2, "b": (jnp.sin(pt.x), jnp.cos(pt.y))}


def _slip_bwd(pt, g):
    a_bar, (b0_bar, b1_bar) = g["a"], g["b"]
    return (Point(2 * pt.x * a_bar + jnp.cos(pt.x) * b0_bar, jnp.sin(pt.y) * b1_bar),)  # d cos = -sin


point_slip.defvjp(lambda pt: (point_slip(pt), pt), _slip_bwd)
point_slip_rule = jax_rule(point_slip, POINTS, name="point_slip_rule")


def test_a_namedtuple_input_and_a_dict_output_are_checked_and_a_correct_rule_passes():
    result = check(point_rule, seed=0).rules[0]
    assert result.error is None and result.verdict == "pass", (result.error, [f.message for f in result.findings])
    assert {c["status"] for c in result.safety_matrix["cells"]} == {"right"}
    skipped = {s["id"] for s in result.checks_skipped}
    assert not {"GG201", "GG202", "GG203", "GG204", "GG301", "GG601", "GG602"} & skipped, result.checks_skipped


def test_a_wrong_leaf_of_a_namedtuple_tangent_fails_with_its_leaf_named():
    result = check(point_slip_rule, seed=0, select=["GG201"]).rules[0]
    assert result.error is None and result.verdict == "fail"
    (finding,) = result.findings
    assert re.fullmatch(
        r"the pullback of point_slip_rule disagrees with finite differences of the primal: cotangent for argument "
        r"1 \(pt_y\) at \[\d\]: expected \S+ \(finite differences\), got \S+ \(dot-product test moving argument 1 "
        r"\(pt_y\) alone: <ybar, J v> = \S+ by finite "
        r"differences, <pullback\(ybar\), v> = \S+, \S+ apart where the tolerance allows \S+\)\.",
        finding.message,
    ), finding.message
    assert float(finding.expected) == pytest.approx(-float(finding.actual))  # the sign slip, nothing else
    call = finding.counterexample["call"]
    assert re.fullmatch(r"point_slip\(pt_x=array\(.*\), pt_y=array\(.*\)\)", call), call
    assert re.fullmatch(r"\{'a': array\(.*\), 'b': \(array\(.*\), array\(.*\)\)\}", finding.counterexample["draws"]["cotangent"])


def test_the_reproducer_of_a_pytree_rule_replays_its_failure(tmp_path):
    finding = check(point_slip_rule, seed=0, select=["GG201"]).findings[0]
    script = tmp_path / "repro.py"
    script.write_text(finding.reproducer)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "AssertionError: GG201 pullback disagrees with finite differences: the pullback of point_slip_rule" in proc.stderr


def test_pytree_leaves_flatten_and_rebuild_in_jax_order():
    from gradguard.checker.trees import children, leaves, rebuild, same_structure, tree_map

    tree = {"b": (np.ones(2), 2.0), "a": Point(np.zeros(1), None)}
    assert [np.shape(x) for x in leaves(tree)] == [(1,), (), (2,), ()]  # sorted keys, as jax.tree_util does
    # the same order as jax.tree_util (which drops None: an empty subtree to JAX, a zero tangent here)
    assert [x for x in leaves(tree) if x is not None] == jax.tree_util.tree_leaves(tree)
    doubled = tree_map(lambda x: None if x is None else 2 * x, tree)
    assert list(doubled) == ["b", "a"] and isinstance(doubled["a"], Point) and doubled["b"][1] == 4.0
    assert same_structure(tree, doubled) and not same_structure(tree, {"b": tree["b"], "c": tree["a"]})
    again = rebuild(tree, children(tree))
    assert list(again) == ["b", "a"] and all(x is y for x, y in zip(leaves(again), leaves(tree)))


def test_the_structure_is_read_from_one_seeded_draw_the_same_on_every_call():
    """A rule's declaration reads its pytree arguments' structure from one draw of their specs: the first
    value a seeded search draws, not ``strategy.example()`` (random on every call, about ten times dearer)."""
    from gradguard.checker._hypothesis import first_draw

    spec = st.tuples(arrays(shape=(2,)), st.lists(st.floats(-3, 3), min_size=1, max_size=4))
    drawn = [first_draw(spec) for _ in range(5)]
    assert all(repr(d) == repr(drawn[0]) for d in drawn)
    assert len({repr(spec.example()) for _ in range(20)}) > 1  # what example() would have given instead
    with pytest.raises(Unsatisfiable):
        first_draw(st.integers().filter(lambda _: False))


# -- classes registered with JAX (a flax struct, `jax.tree_util.register_dataclass`) in and out -------------------------
@jax.tree_util.register_dataclass
@dataclasses.dataclass
class Params:
    w: jax.Array
    b: jax.Array


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class Stats:
    mean: jax.Array
    var: jax.Array


PARAMS = st.builds(Params, arrays(shape=(3,), min_value=-2.0, max_value=2.0), arrays(shape=(3,), min_value=-2.0, max_value=2.0))
XS = arrays(shape=(3,), min_value=-2.0, max_value=2.0)


def _stats_of(p, x):
    y = jnp.tanh(p.w * x + p.b)
    return Stats(jnp.mean(y), jnp.var(y))


def _stats_fwd(p, x):
    return _stats_of(p, x), (p, x)


def _stats_bwd(res, g, slip=False):
    p, x = res
    y = jnp.tanh(p.w * x + p.b)
    n = y.shape[0]
    # d mean / dy = 1/n; d var / dy = 2 (y - mean) / n
    ybar = g.mean / n + g.var * 2 * ((y if slip else y - jnp.mean(y))) / n
    d = ybar * (1 - y**2)
    return Params(w=d * x, b=d), d * p.w


registered_stats = jax.custom_vjp(_stats_of)
registered_stats.defvjp(_stats_fwd, _stats_bwd)
registered_stats_rule = jax_rule(registered_stats, PARAMS, XS, name="registered_stats_rule")
registered_stats_slip = jax.custom_vjp(_stats_of)  # the variance's cotangent forgets the mean it is centred on
registered_stats_slip.defvjp(_stats_fwd, lambda res, g: _stats_bwd(res, g, slip=True))
registered_stats_slip_rule = jax_rule(registered_stats_slip, PARAMS, XS, name="registered_stats_slip_rule")


def test_registered_classes_in_and_out_are_checked_leaf_by_leaf_and_a_correct_rule_passes():
    result = check(registered_stats_rule, seed=0).rules[0]
    assert result.error is None and result.verdict == "pass", (result.error, [f.message for f in result.findings])
    assert {c["status"] for c in result.safety_matrix["cells"]} == {"right"}
    skipped = {s["id"] for s in result.checks_skipped}
    assert not {"GG201", "GG202", "GG203", "GG204", "GG301", "GG601", "GG602"} & skipped, result.checks_skipped


def test_a_wrong_tangent_through_a_registered_output_fails_with_the_output_leaves_named():
    result = check(registered_stats_slip_rule, seed=0, select=["GG201"]).rules[0]
    assert result.error is None and result.verdict == "fail", result.error
    finding = result.findings[0]  # (one per argument the slip reaches, as the search tells them apart)
    assert re.fullmatch(
        r"the pullback of registered_stats_slip_rule disagrees with finite differences of the primal: cotangent for "
        r"argument (0|1|2) \((p_w|p_b|x)\) at \[\d\]: expected \S+ \(finite differences\), got \S+ \(dot-product test "
        r"moving argument \1 \(\2\) alone: .*\)\.", finding.message), finding.message
    assert re.fullmatch(r"_stats_of\(p_w=array\(.*\), p_b=array\(.*\), x=array\(.*\)\)",
                        finding.counterexample["call"]), finding.counterexample["call"]
    assert re.fullmatch(r"\{'mean': array\(.*\), 'var': array\(.*\)\}", finding.counterexample["draws"]["cotangent"])


def test_plain_outputs_round_trip_a_registered_node_inside_containers():
    from gradguard.checker.pytree_outputs import plain, restored

    out = (Stats(np.ones(2), np.float64(3.0)), {"k": Stats(np.zeros(1), np.ones(1))}, np.ones(3))
    flat = plain(out)
    assert isinstance(flat, tuple) and flat[0].keys() == {"mean", "var"} and flat[1]["k"].keys() == {"mean", "var"}
    assert flat[2] is out[2]
    back = restored(jax.tree_util.tree_map(lambda a: 2 * a, flat), out)
    assert isinstance(back[0], Stats) and isinstance(back[1]["k"], Stats) and float(back[0].var) == 6.0
    assert restored(None, out) is None
    assert restored({"mean": 1.0}, out[0]) == {"mean": 1.0}  # not the plain structure: handed on as it is


def test_a_registered_argument_compiles_once_for_every_value_of_its_leaves():
    from gradguard.engines.jax_engine import Compiled

    traces = []

    def f(p, x):
        traces.append(1)
        return p.w * x + p.b

    compiled = Compiled(f)
    for k in range(4):
        p = Params(jnp.full(3, float(k)), jnp.ones(3))
        np.testing.assert_allclose(compiled((p, jnp.ones(3))), k + 1.0)
    # one trace for jit and one eager run, which the first compiled result is checked against; keyed by its
    # contents instead, a registered class was traced again for every value
    assert len(traces) == 2 and not compiled.eager_keys


# equinox's partition leaves a None in every static slot of a module's dynamic half (quadax's integrators take one):
# the tangent's None counted as a leaf and the argument's did not, and GG103 called a right tangent the wrong size.
@jax.custom_vjp
def sin_first(triple):
    x, z, _ = triple
    return jnp.sin(x) * z


def _sin_first_bwd(res, g, slip=1.0):
    x, z = res
    return ((g * jnp.cos(x) * z * slip, g * jnp.sin(x), None),)


sin_first.defvjp(lambda t: (sin_first(t), t[:2]), _sin_first_bwd)
sin_first_slip = jax.custom_vjp(sin_first.fun)
sin_first_slip.defvjp(lambda t: (sin_first_slip(t), t[:2]), lambda res, g: _sin_first_bwd(res, g, slip=-1.0))
TRIPLES = arrays(shape=(3,), min_value=-2.0, max_value=2.0).map(lambda x: (x, x[::-1] + 3.0, None))


def test_a_none_inside_a_pytree_argument_is_an_empty_subtree_on_both_sides():
    ok = check(jax_rule(sin_first, TRIPLES, name="sin_first"), select=["GG1", "GG201"]).rules[0]
    assert ok.error is None and ok.findings == [], [f.message for f in ok.findings]
    (f,) = check(jax_rule(sin_first_slip, TRIPLES, name="sin_first_slip"), select=["GG1", "GG201"]).findings
    assert f.check_id == "GG201" and "argument 0 (triple_0)" in f.message, f.message
