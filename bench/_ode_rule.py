"""JAX's own ODE solver as a rule to check: `jax.experimental.ode._odeint`, the `jax.custom_vjp` underneath
`jax.experimental.ode.odeint` (adaptive Dormand-Prince steps in a `lax.while_loop` inside a `lax.scan`; its
bwd integrates the adjoint system backwards). Every eager call of such a solver traces and compiles its loops
again, which is what made a module of real JAX rules with an ODE solver slow to check (issue 14).
``python bench/jax_speed.py --compiles`` checks it.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from hypothesis import strategies as st
from jax.experimental.ode import _odeint

from gradguard import arrays, constant, floats, jax_rule


def forced_decay(y, t, k):
    """dy/dt = -k y + sin(t)."""
    return -k * y + jnp.sin(t)


# increasing times from 0, each step between 0.1 and 1
times = st.lists(st.floats(0.1, 1.0), min_size=2, max_size=2).map(lambda steps: np.cumsum([0.0, *steps]))

# _odeint(func, rtol, atol, mxstep, hmax, y0, ts, *args), nondiff_argnums=(0, 1, 2, 3, 4) as odeint passes them
odeint_rule = jax_rule(_odeint, constant(forced_decay), constant(1.4e-8), constant(1.4e-8), constant(np.inf),
                       constant(np.inf), arrays(shape=(2,), min_value=-2.0, max_value=2.0), times, floats(0.5, 2.0),
                       name="odeint_rule")
