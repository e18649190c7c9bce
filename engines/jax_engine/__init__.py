"""The JAX engine: adapters between NumPy rrules and `jax.custom_vjp`, reference derivatives, transforms.

    to_custom_vjp(rrule)              NumPy rrule -> JAX function (grad, jit, vmap through pure_callback)
    rrule_from_custom_vjp(f)          jax.custom_vjp -> NumPy rrule (fwd/bwd compiled, NumPy in and out)
    rrule_from_custom_jvp(f)          jax.custom_jvp -> NumPy rrule (pullback: JAX's transpose of the jvp)
    jvp_of(f, args, tangents)         jax.jvp as NumPy (the forward checks of a custom_jvp)
    primal_of_custom_vjp(f)           the undecorated, JAX-traceable primal of a custom_vjp
    reference_vjp(primal, args, ct)   jax.vjp of a jax.numpy primal (GG203's reference)
    second_order_vjp(f, args, ct, v)  d/dt of the pullback along v, jvp of vjp (GG204)
    second_order_vjp_reverse(...)     the same by reverse over reverse, where forward mode raises
    run_under(f, args, transform=)    value or gradient under none/jit/grad/jit_grad/vmap (GG601, GG602)
    run_traced(f, args, transform=)   run_under's jit/jit_grad traced once and run with NumPy, no compilation (GG203)
    configure(device=), environment() float64, device placement, versions for reports
    Compiled(fun)(args, fixed=...)    a JAX function on concrete values, compiled per key, eager where jit differs
    use_compilation_cache(folder)     JAX's persistent compilation cache in folder (later processes load, not compile)

Importing this package does not import JAX; the first call of any function
above does (and enables ``jax_enable_x64``). `is_jax_differentiation_tracer`
never imports JAX and can be registered with `gradguard.engines.within_gradient` at
any time.
"""

from gradguard.engines.jax_engine._compiled import Compiled
from gradguard.engines.jax_engine._from_jvp import CustomJvpParts, custom_jvp_parts, is_custom_jvp, jvp_of, rrule_from_custom_jvp
from gradguard.engines.jax_engine._from_jax import CustomVjpParts, custom_vjp_parts, primal_of_custom_vjp, rrule_from_custom_vjp
from gradguard.engines.jax_engine._reference import reference_vjp, second_order_vjp, second_order_vjp_reverse
from gradguard.engines.jax_engine._relay import relaying
from gradguard.engines.jax_engine._runtime import DEVICES, configure, environment, use_compilation_cache
from gradguard.engines.jax_engine._to_jax import AdaptedRule, to_custom_vjp
from gradguard.engines.jax_engine._tracers import is_jax_differentiation_tracer
from gradguard.engines.jax_engine._transforms import TRANSFORMS, NotByNumpy, cache_info, clear_cache, run_traced, run_under

__all__ = [
    "to_custom_vjp",
    "Compiled",
    "AdaptedRule",
    "rrule_from_custom_vjp",
    "primal_of_custom_vjp",
    "custom_vjp_parts",
    "rrule_from_custom_jvp",
    "custom_jvp_parts",
    "CustomJvpParts",
    "is_custom_jvp",
    "jvp_of",
    "CustomVjpParts",
    "reference_vjp",
    "second_order_vjp",
    "second_order_vjp_reverse",
    "run_under",
    "run_traced",
    "NotByNumpy",
    "TRANSFORMS",
    "cache_info",
    "clear_cache",
    "relaying",
    "configure",
    "environment",
    "use_compilation_cache",
    "DEVICES",
    "is_jax_differentiation_tracer",
]
