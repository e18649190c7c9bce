"""The seccomp filter every run gets: no new namespaces, no mounts, no ptrace, no kernel keyrings.

The supervisor builds the BPF program once with libseccomp (its own Python bindings where the system
has them, else ``pyseccomp``, a ctypes binding with the same API) and hands it to the entry program in
its plan; the entry program installs it last, after its own isolation and ``no_new_privs``, so nothing
the submission runs can undo it. Denied calls fail with EPERM; ``clone3`` fails with ENOSYS, so the C
library falls back to ``clone``, whose namespace flags the filter can see.
"""

from __future__ import annotations

import base64
import errno
import functools
import tempfile

__all__ = ["program", "DENIED", "NAMESPACE_FLAGS", "Unavailable"]

DENIED = (
    # namespaces
    "unshare", "setns",
    # mounts and the root
    "mount", "umount", "umount2", "pivot_root", "chroot", "open_tree", "move_mount", "fsopen", "fsconfig",
    "fsmount", "fspick", "mount_setattr",
    # other processes' memory
    "ptrace", "process_vm_readv", "process_vm_writev",
    # kernel keyrings
    "keyctl", "add_key", "request_key",
)
NAMESPACE_FLAGS = {  # clone(2) flags that make a new namespace
    "CLONE_NEWNS": 0x00020000, "CLONE_NEWCGROUP": 0x02000000, "CLONE_NEWUTS": 0x04000000,
    "CLONE_NEWIPC": 0x08000000, "CLONE_NEWUSER": 0x10000000, "CLONE_NEWPID": 0x20000000,
    "CLONE_NEWNET": 0x40000000,  # (CLONE_NEWTIME works through unshare and clone3 only)
}


class Unavailable(RuntimeError):
    """libseccomp or its Python binding is missing: the sandbox's level probe fails, the level drops and
    the configured floor refuses runs (never a silent downgrade)."""


def _binding():  # type: ignore[no-untyped-def]
    try:
        import seccomp  # libseccomp's own bindings (e.g. Debian's python3-seccomp)
    except ImportError:
        try:
            import pyseccomp as seccomp
        except (ImportError, OSError) as exc:  # OSError: the binding is there, libseccomp.so is not
            raise Unavailable(f"no libseccomp binding ({exc}); install the 'pyseccomp' package and libseccomp2") from exc
    return seccomp


@functools.lru_cache(maxsize=1)
def program() -> str:
    """The BPF program, base64-encoded for the plan. Raises :class:`Unavailable`."""
    sc = _binding()
    deny = sc.ERRNO(errno.EPERM)
    f = sc.SyscallFilter(defaction=sc.ALLOW)
    for name in DENIED:
        try:
            f.add_rule(deny, name)
        except (ValueError, RuntimeError, OSError):  # a call this architecture does not have
            continue
    for flag in NAMESPACE_FLAGS.values():
        f.add_rule(deny, "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    try:
        f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")  # its flags live in memory the filter cannot read
    except (ValueError, RuntimeError, OSError):
        pass
    with tempfile.TemporaryFile() as out:
        f.export_bpf(out)
        out.seek(0)
        return base64.b64encode(out.read()).decode()
