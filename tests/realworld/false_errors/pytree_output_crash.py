"""A correct custom_vjp that gradguard cannot declare (issue 12, defect class 4, and "Bad input").

Corpus rule: pytree_point_rule, the pytree example of JAX's custom-derivatives notebook
(docs/notebooks/Custom_derivative_rules_for_Python_code.md): a NamedTuple argument and a dict output.
`jax.custom_vjp` accepts it; gradguard stops the rule with "the output ... holds dict" (verdict error),
so a rule written exactly as JAX documents it gets no verdict. Issue 12 asks that every signature
`jax.custom_vjp` accepts be declarable.
"""

from collections import namedtuple

import jax.numpy as jnp
from hypothesis import strategies as st
from jax import custom_vjp

from _common import reproduce
from gradguard import arrays, jax_rule

Point = namedtuple("Point", ["x", "y"])


@custom_vjp
def f(pt):
    x, y = pt.x, pt.y
    return {"a": x**2, "b": (jnp.sin(x), jnp.cos(y))}


def f_fwd(pt):
    return f(pt), pt


def f_bwd(pt, g):
    a_bar, (b0_bar, b1_bar) = g["a"], g["b"]
    x_bar = 2 * pt.x * a_bar + jnp.cos(pt.x) * b0_bar
    y_bar = -jnp.sin(pt.y) * b1_bar
    return (Point(x_bar, y_bar),)


f.defvjp(f_fwd, f_bwd)
point_rule = jax_rule(f, st.builds(Point, arrays(shape=(2,)), arrays(shape=(2,))), name="point_rule")

if __name__ == "__main__":
    reproduce(point_rule, None, seeds=range(1))
