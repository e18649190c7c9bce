"""Tries what the seccomp filter denies: new namespaces (unshare, clone with namespace flags), mounts,
ptrace of another process, the kernel's keyrings."""

import ctypes
import json
import os
import platform
import sys

from gradguard.checker import arrays, rrule

libc = ctypes.CDLL(None, use_errno=True)
NEW = {"user": 0x10000000, "mount": 0x00020000, "net": 0x40000000, "pid": 0x20000000, "uts": 0x04000000,
       "ipc": 0x08000000, "cgroup": 0x02000000}
SYSCALLS = {"x86_64": {"add_key": 248, "keyctl": 250, "clone": 56}, "aarch64": {"add_key": 217, "keyctl": 219, "clone": 220}}


def _result(value):
    err = ctypes.get_errno()
    return "allowed" if value != -1 else os.strerror(err)


def _try(call):
    ctypes.set_errno(0)
    return _result(call())


numbers = SYSCALLS[platform.machine()]
facts = {"observer": "seccomp"}
for name, flag in NEW.items():
    facts[f"unshare_{name}"] = _try(lambda: libc.unshare(flag))
    # a raw clone(2) with the flag: the child would exit at once, if it were ever made
    facts[f"clone_{name}"] = _try(lambda: libc.syscall(numbers["clone"], flag | 17, None, None, None, None))
facts["mount"] = _try(lambda: libc.mount(b"none", b"/tmp", b"tmpfs", 0, None))
facts["umount"] = _try(lambda: libc.umount2(b"/", 2))
facts["ptrace"] = _try(lambda: libc.ptrace(16, os.getppid(), None, None))  # PTRACE_ATTACH
facts["add_key"] = _try(lambda: libc.syscall(numbers["add_key"], b"user", b"gg", b"x", 1, -2))
facts["keyctl"] = _try(lambda: libc.syscall(numbers["keyctl"], 0, -2, 0))  # KEYCTL_GET_KEYRING_ID
facts["fork_still_works"] = "yes"
pid = os.fork()
if pid == 0:
    os._exit(0)
os.waitpid(pid, 0)
print("GG-FACTS " + json.dumps(facts), file=sys.stderr)


def neg(x):
    return -x


@rrule(neg, arrays(shape=(2,)))
def neg_rrule(x):
    return neg(x), lambda ybar: (None if ybar is None else -ybar,)
