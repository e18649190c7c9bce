"""Loading JAX lazily, float64, device selection and the environment for reports.

Nothing here imports JAX at module import; :func:`load` does, once, the first
time an engine function runs. Loading enables ``jax_enable_x64`` (gradguard
compares gradients in float64) and registers the JAX predicate with
`gradguard.engines.within_gradient`.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import numpy as np

from gradguard.engines._within import register_within_gradient
from gradguard.engines.errors import PlatformUnavailable
from gradguard.engines.jax_engine._relay import install_log_filter
from gradguard.engines.jax_engine._tracers import is_jax_differentiation_tracer

__all__ = ["load", "cotangent_like", "cotangent_for", "configure", "environment", "use_compilation_cache", "share_gpu_memory", "DEVICES"]

DEVICES = ("cpu", "gpu")
# JAX takes 75% of a GPU's memory when its GPU backend starts, in every process that loads it, even one that
# computes on the CPU: the second process on the GPU then fails to start its backend ("no GPU") or runs out
# of memory mid-check. gradguard's arrays are small and its processes many (one per job), so each takes
# device memory as it needs it.
GPU_MEMORY_SHARING = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}

_lock = threading.Lock()
_loaded = False


def share_gpu_memory() -> None:
    """Let the processes on one GPU share it (:data:`GPU_MEMORY_SHARING`), unless the user chose otherwise.

    Read by JAX when its GPU backend starts: call it before anything computes with JAX (worker processes
    inherit it). A backend started earlier in the process keeps what it took."""
    for name, value in GPU_MEMORY_SHARING.items():
        os.environ.setdefault(name, value)


def load() -> Any:
    """Import JAX (once), enable float64 and register the within-gradient predicate; return the `jax` module."""
    global _loaded
    share_gpu_memory()
    import jax

    if not _loaded:
        with _lock:
            if not _loaded:
                jax.config.update("jax_enable_x64", True)
                register_within_gradient(is_jax_differentiation_tracer)
                install_log_filter()
                _loaded = True
    return jax


def configure(device: str = "cpu") -> dict[str, Any]:
    """Enable float64 and place JAX computations on ``device`` ("cpu" or "gpu"); return :func:`environment`.

    Raises `PlatformUnavailable` when a GPU is asked for and JAX sees none.
    """
    if device not in DEVICES:
        raise ValueError(f"Got device={device!r}, but device must be one of {DEVICES}.")
    jax = load()
    try:
        devices = jax.devices(device)
    except (RuntimeError, AssertionError):  # AssertionError: no backend started at all (JAX_PLATFORMS=cuda, no GPU)
        devices = []
    if not devices:
        try:
            seen = ", ".join(sorted({d.platform for d in jax.devices()})) or "none"
        except (RuntimeError, AssertionError):
            seen = "none"
        raise PlatformUnavailable(
            f"{device.upper()} requested but JAX sees no {device.upper()} here (devices: {seen}). "
            f"{_backend_failure(jax, device)}Run on a GPU worker or use --device cpu."
        )
    jax.config.update("jax_default_device", devices[0])
    return environment()


def _backend_failure(jax: Any, device: str) -> str:
    """Why JAX's backend for ``device`` did not start, when JAX recorded it (a CUDA plugin is installed but
    its backend failed: out of device memory, a driver mismatch), as a sentence; else ""."""
    try:
        from jax._src import xla_bridge  # JAX keeps the errors of backends that failed to start here

        errors = dict(getattr(xla_bridge, "_backend_errors", {}) or {})
    except Exception:  # noqa: BLE001 - a JAX without that record: say nothing more
        return ""
    platforms = ("cuda", "rocm", "gpu") if device == "gpu" else (device,)
    for platform, error in errors.items():
        if platform in platforms:
            first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            return f"JAX's {platform} backend is installed but did not start: {first[:300]}. "
    return ""


def use_compilation_cache(folder: str | os.PathLike[str] | None) -> str | None:
    """Keep every compiled program in ``folder`` (JAX's persistent compilation cache), so that a later
    process loads it instead of compiling again; returns the folder in force (None: none).

    A folder the user gave JAX itself (``JAX_COMPILATION_CACHE_DIR``) wins. JAX caches only programs that
    took a second or more to compile by default; gradguard's are small and many, so every one is kept.
    The cache is trusted code: never point it at a folder others can write (the service's sandboxed
    runs do not use one, for that reason).
    """
    jax = load()
    current = jax.config.jax_compilation_cache_dir
    if current or folder is None:
        return current or None
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError:
        return None  # a read-only place: compile as before
    jax.config.update("jax_compilation_cache_dir", os.fspath(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    return os.fspath(folder)


def environment() -> dict[str, Any]:
    """Versions, device and precision in force, for reports: {"jax", "jaxlib", "device", "x64"}."""
    jax = load()
    import jaxlib

    device = jax.config.jax_default_device or jax.devices()[0]
    return {
        "jax": jax.__version__,
        "jaxlib": getattr(jaxlib, "__version__", "unknown"),
        "device": f"{device.platform} ({device.device_kind})",
        "x64": bool(jax.config.jax_enable_x64),
    }


def cotangent_like(ct: Any, out: Any) -> Any:
    """``ct`` in the pytree structure of ``out``, where the two hold the same number of leaves but other containers:
    a custom_vjp whose function returns a NamedTuple (``jnp.linalg.eigh``'s ``EighResult``) while its fwd returns a
    plain tuple hands the checker tuple cotangents, and ``jax.vjp`` of the function itself wants an ``EighResult``
    ("pytree structure error"). Anything else is returned as it is (``jax.vjp`` then says what does not fit)."""
    jax = load()
    want = jax.tree_util.tree_structure(out)
    flat, got = jax.tree_util.tree_flatten(ct)
    if got != want and want.num_leaves == len(flat):
        return jax.tree_util.tree_unflatten(want, flat)
    return ct


def cotangent_for(ct: Any, out: Any) -> Any:
    """``ct`` as ``jax.vjp`` of a function returning ``out`` takes it: in ``out``'s structure (`cotangent_like`) and
    each leaf as a JAX array of its output leaf's dtype."""
    jax = load()

    def cast(c: Any, o: Any) -> Any:
        return jax.numpy.asarray(c, dtype=o.dtype if hasattr(o, "dtype") else np.asarray(o).dtype)

    return jax.tree_util.tree_map(cast, cotangent_like(ct, out), out)
