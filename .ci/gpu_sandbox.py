"""The service's sandbox on a GPU: examples/jax_rules.py checked in a sandboxed run with device "gpu" (what a
`gradguard worker --queue gpu` does) and with device "cpu", under the service's default limits. Exit status 0
when both runs end ok with the same verdicts and finding ids and the GPU run's JAX ran on the GPU.

    python .ci/gpu_sandbox.py        # from .ci/gpu; needs the service's dependencies (pydantic, pyseccomp)
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gradguard.service.sandbox import Limits, run_check, sandbox_level  # noqa: E402

# GRADGUARD_RUN_WALL_S, _CPU_S and _MEMORY_MB's defaults (README): what a GPU worker gives a run unless told
DEFAULT_LIMITS = Limits(wall_s=120, cpu_s=120, memory_mb=2048)


def main() -> int:
    bundle = Path(tempfile.mkdtemp()) / "bundle"
    bundle.mkdir()
    shutil.copy(ROOT / "examples" / "jax_rules.py", bundle / "jax_rules.py")
    print(f"sandbox level here: {sandbox_level()}")
    seen = {}
    for device in ("gpu", "cpu"):
        start = time.monotonic()
        # the weakest level is allowed: what is checked here is the GPU inside the sandbox, not its strength
        out = run_check(bundle, device=device, min_level="rlimits", limits=DEFAULT_LIMITS)
        report = out.report or {}
        rules = {r["name"]: (r["verdict"], sorted({f["check_id"] for f in r["findings"]}),
                             (r.get("error") or {}).get("message", "")[:300]) for r in report.get("rules", [])}
        env_device = (report.get("environment") or {}).get("device")
        print(f"{device}: ok={out.ok} reason={out.reason} level={out.level} device={env_device} "
              f"{time.monotonic() - start:.1f} s")
        for name, verdict in rules.items():
            print(f"    {name}: {verdict}")
        if not out.ok:
            print("    stderr tail:", out.stderr_tail[-3000:])
        seen[device] = (out.ok, env_device, rules)
    gpu, cpu = seen["gpu"], seen["cpu"]
    good = gpu[0] and cpu[0] and gpu[2] == cpu[2] and len(gpu[2]) == 7 and str(gpu[1]).startswith(("gpu", "cuda"))
    print("same verdicts on both devices" if good else "DIFFERENT or failed")
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
