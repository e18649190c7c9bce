"""The program that runs inside the sandbox: isolate, check one bundle, write the report.

    python -s -P -B _sandbox_main.py --plan JSON --report-fd 3 BUNDLE [--select GG1 ...] [--seed 0]

:mod:`gradguard.service.sandbox` starts it as a script (not ``-m gradguard.service...``), so the
service's own package is never importable in here: only ``checker`` and
``engines`` are on the path. It imports the standard library alone until the
plan is applied, then imports :mod:`gradguard.checker`, calls ``gradguard.checker.check(bundle,
...)`` and streams its results to the file descriptor the parent gave it (a pipe the parent
reads with a size cap), one JSON object a line, each as soon as it exists:

    {"rules": ["name", ...]}        the rules found, in the order they will be checked
    {"rule": {...}}                 one finished rule's result, as soon as it is checked
    {"report": {...}}               the rest of the report (all but its rules), last

So a run stopped by a limit still leaves the parent every finished rule's verdict, and the
names of the ones it never finished. ``--rule-timeout S`` bounds each rule's time, ``--rule-memory MB``
how much each rule may grow the memory (0: none).

The plan (JSON) says what is left to do in here:

- ``isolate`` (namespaces level only; bubblewrap does this itself): unshare
  the mount, network, IPC, UTS and PID namespaces, fork the PID namespace's
  init, which builds a new root on a tmpfs from read-only binds,
  ``pivot_root``s into it and forks the checker.
- ``limits``: rlimits to set first (here rather than in a ``preexec_fn``,
  which is unsafe in a supervisor that has threads).
- ``uid``/``gid``: when started as root, drop to this unprivileged id (one per
  run, so the kernel's RLIMIT_NPROC counts this run's processes alone);
  still root after that (no id to drop to): drop every capability instead.
- ``loopback_down``, ``cwd``, ``supervisor`` (the parent's pid: when it dies,
  so does the run).
- ``seccomp``: a BPF program (base64) installed last, after ``no_new_privs``: no new
  namespaces, mounts, ptrace or keyrings for anything the run does
  (:mod:`gradguard.service.sandbox._seccomp` builds it).

Exit status: 0 a report was written, 3 the checker itself failed (traceback
on stderr), 4 the isolation could not be set up, 6 a rule stuck in native code
past its time limit stopped the checker (its name on stderr's last line), 128+N the
checker was killed by signal N (namespaces level, like bubblewrap).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import sys
import traceback

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 1, 4, 24, 38
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}  # system call numbers

_libc = ctypes.CDLL(None, use_errno=True)


def _sys(name: str, *args: object) -> None:
    if getattr(_libc, name)(*args) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{name}{args!r}: {os.strerror(err)}")


def _mount(src: str | None, dst: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = lambda s: None if s is None else s.encode()  # noqa: E731
    _sys("mount", enc(src), enc(dst), enc(fstype), ctypes.c_ulong(flags), enc(data))


def _locked_flags(path: str) -> int:
    """Flags a bind of ``path`` must keep when remounted (the kernel locks them in a user namespace)."""
    f = os.statvfs(path).f_flag
    return (MS_NOEXEC if f & os.ST_NOEXEC else 0) | (MS_NOSUID if f & os.ST_NOSUID else 0) | (
        MS_NODEV if f & os.ST_NODEV else 0
    )


def _bind(src: str, root: str, dst: str, *, writable: bool = False) -> None:
    target = root + dst
    if os.path.isdir(src):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        open(target, "a").close()
    _mount(src, target, None, MS_BIND | MS_REC)
    flags = MS_BIND | MS_REMOUNT | MS_NOSUID | _locked_flags(src)
    if not writable:
        flags |= MS_RDONLY | MS_NODEV
    _mount(None, target, None, flags)


def _unshare() -> None:
    """Namespaces level, first step: new mount, network, IPC, UTS and PID namespaces (and a user
    namespace where we are not root, in which we become root)."""
    rootless = os.geteuid() != 0
    uid, gid = os.geteuid(), os.getegid()
    flags = CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWPID
    _sys("unshare", flags | (CLONE_NEWUSER if rootless else 0))
    if rootless:  # be root inside the new user namespace, nobody more outside
        with open("/proc/self/setgroups", "w") as f:
            f.write("deny")
        with open("/proc/self/uid_map", "w") as f:
            f.write(f"0 {uid} 1")
        with open("/proc/self/gid_map", "w") as f:
            f.write(f"0 {gid} 1")


def _build_root(spec: dict) -> None:
    """Namespaces level, in the PID namespace's init: the new root, what bubblewrap would build.

    /proc is mounted before pivot_root: in a user namespace the kernel only
    allows a new procfs while a full one is still visible in the mount namespace.
    """
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    root = spec["root"]
    _mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
    os.makedirs(root + "/tmp")  # first: an installation under /tmp (a CI venv) is bound inside it
    _mount("tmpfs", root + "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"mode=1777,size={spec['tmpfs_mb']}m")
    for src, dst in spec["binds"]:
        _bind(src, root, dst)
    for dev in spec["devices"]:
        _bind(dev, root, dev, writable=True)
    if spec.get("sys"):
        _bind("/sys", root, "/sys")  # the GPU driver reads its topology there
    for target, dst in spec["symlinks"]:
        os.symlink(target, root + dst)
    os.makedirs(root + "/proc", exist_ok=True)
    _mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    os.makedirs(root + "/.oldroot")
    _sys("syscall", ctypes.c_long(_PIVOT_ROOT[os.uname().machine]), root.encode(), (root + "/.oldroot").encode())
    os.chdir("/")
    _sys("umount2", b"/.oldroot", MNT_DETACH)
    os.rmdir("/.oldroot")
    _mount(None, "/", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    _sys("sethostname", b"sandbox", 7)


def _become_pid1(report_fd: int, spec: dict) -> None:
    """Fork the PID namespace's init, which forks the checker and reaps orphans, as bubblewrap's does.

    This process waits outside the namespace and passes the checker's status
    on (128+N for a signal). When init ends, the kernel kills everything left
    in the namespace; when this process dies, init dies (parent-death signal).
    """
    pid = os.fork()
    if pid != 0:
        os.close(report_fd)
        _exit_like(_wait_for(pid))
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    _build_root(spec)
    checker_pid = os.fork()
    if checker_pid == 0:  # pid 2: the checker
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        return
    os.close(report_fd)
    while True:  # pid 1: reap every orphan until the checker ends
        pid, status = os.waitpid(-1, 0)
        if pid == checker_pid:
            _exit_like(status)


def _wait_for(pid: int) -> int:
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda s, _f: os.kill(pid, signal.SIGKILL))
    return os.waitpid(pid, 0)[1]


def _exit_like(status: int) -> None:
    os._exit(128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))


def _drop(uid: int, gid: int) -> None:
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    _libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)  # setuid cleared it; /proc/self must stay ours
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # and this one too


def _drop_capabilities() -> None:
    """Still uid 0 (no uid of its own): keep the uid, lose every capability, for good."""
    for cap in range(64):
        _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)  # fails past the last capability: fine
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this thread
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable x 2: all empty
    _sys("capset", header, data)


def _set_limits(limits: dict) -> None:
    import resource

    for name, value in limits.items():
        resource.setrlimit(getattr(resource, name), (value, value if name != "RLIMIT_CPU" else value + 1))


def _loopback_down() -> None:
    """bubblewrap brings up ``lo`` in the new network namespace: remove its address and take it down.

    Down alone is not enough: 127.0.0.1 stays a local address and a connect
    waits for its timeout instead of failing at once.
    """
    import fcntl
    import socket
    import struct

    siocgifflags, siocsifflags, siocsifaddr = 0x8913, 0x8914, 0x8916
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        flags = struct.unpack("16sH", fcntl.ioctl(s, siocgifflags, struct.pack("16sH14x", b"lo", 0))[:18])[1]
        fcntl.ioctl(s, siocsifaddr, struct.pack("16sH2s4s8x", b"lo", socket.AF_INET, b"", bytes(4)))
        fcntl.ioctl(s, siocsifflags, struct.pack("16sH14x", b"lo", flags & ~0x1))  # IFF_UP


def apply_plan(plan: dict, report_fd: int) -> None:
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # the supervisor dies: so do we
    if plan.get("supervisor") and os.getppid() != plan["supervisor"]:
        os._exit(4)  # it died before we could ask
    _set_limits(plan.get("limits", {}))
    if plan.get("cpus") and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, plan["cpus"])  # threads and children inherit it; pools size themselves by it
    if plan.get("isolate"):
        _unshare()
        _become_pid1(report_fd, plan["isolate"])
        sys.path_importer_cache.clear()  # the new root has folders the old one lacked
    if plan.get("loopback_down"):
        _loopback_down()
    if plan.get("uid") is not None and os.geteuid() == 0:
        _drop(plan["uid"], plan["gid"])
    if os.geteuid() == 0:
        _drop_capabilities()
    _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    os.umask(0o077)
    if plan.get("cwd"):
        os.chdir(plan["cwd"])
    if plan.get("seccomp"):
        _install_seccomp(plan["seccomp"])


def _install_seccomp(program_b64: str) -> None:
    """Install the BPF filter for this process and everything it starts (needs no_new_privs first)."""
    import base64

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    program = base64.b64decode(program_b64)
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = SockFprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    _sys("prctl", PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0)


def probe(port: int) -> dict:
    """What the isolation in force actually prevents; the parent uses it to pick the level."""
    import socket

    facts: dict[str, object] = {"uid": os.getuid()}
    try:  # the parent listens there
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            facts["host_loopback"] = True
    except OSError:
        facts["host_loopback"] = False
    try:
        with open(os.path.join(os.environ.get("TMPDIR", "/tmp"), "probe"), "w") as f:
            f.write("x")
        facts["tmp_writable"] = True
    except OSError:
        facts["tmp_writable"] = False
    facts["root_writable"] = os.access("/", os.W_OK)
    # the seccomp filter: no new user namespace, no ptrace (both EPERM; without it: ESRCH, not traced)
    denied = []
    for call in (lambda: _libc.unshare(CLONE_NEWUSER), lambda: _libc.ptrace(2, os.getppid(), None, None)):
        ctypes.set_errno(0)
        denied.append(call() == -1 and ctypes.get_errno() == 1)
    facts["seccomp"] = all(denied)
    from gradguard import checker  # noqa: F401 - the installation must be visible

    facts["checker"] = True
    return facts


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="_sandbox_main")
    parser.add_argument("bundle")
    parser.add_argument("--plan", default="{}")
    parser.add_argument("--report-fd", type=int, required=True)
    parser.add_argument("--origin", default=None, help="the bundle's path outside (a label for ps)")
    parser.add_argument("--select", action="append", default=None)
    parser.add_argument("--ignore", action="append", default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-examples", type=int, default=None)
    parser.add_argument("--rule-timeout", type=float, default=0.0, help="seconds per rule; 0: none")
    parser.add_argument("--rule-memory", type=int, default=0, help="MB each rule may grow the memory; 0: none")
    parser.add_argument("--probe", type=int, default=None, metavar="PORT")
    return parser.parse_args(argv)


def _check(args: argparse.Namespace, send) -> None:  # type: ignore[no-untyped-def]
    from dataclasses import asdict

    from gradguard import checker
    from gradguard.checker.loader import collect

    rules, failures = collect(args.bundle)
    send({"rules": [rule.name for rule in rules]})

    def stuck(rule, reason: str) -> None:  # type: ignore[no-untyped-def]
        """A rule stuck in native code past its time limit ends this process (checker._deadline): the reason on
        stderr, whose last line the parent gives as the run's (the rule "not finished", the later ones "not
        checked", each naming it)."""
        sys.stderr.write(f"{reason}\nstopped by rule {rule.name}, stuck in native code past its time limit\n")
        sys.stderr.flush()

    from gradguard.checker.per_rule import STUCK_HOOKS

    STUCK_HOOKS.append(stuck)
    report = checker.check(rules, select=args.select, ignore=args.ignore, seed=args.seed,
                           max_examples=args.max_examples, rule_timeout_s=args.rule_timeout or None,
                           memory_limit_mb=args.rule_memory or None,
                           progress=lambda result, _i, _n: send({"rule": asdict(result)}))
    report.load_errors[:0] = failures
    whole = report.to_dict()
    del whole["rules"]  # sent one by one above: the stream carries each rule once
    send({"report": whole})


def _sender(fd: int):  # type: ignore[no-untyped-def]
    """``send(obj)``: one JSON line to the report pipe, written whole, only by this process."""
    me = os.getpid()

    def send(obj: object) -> None:
        if os.getpid() != me:  # a process a rule forked has nothing to report
            return
        data = (json.dumps(obj, default=str) + "\n").encode()
        while data:
            data = data[os.write(fd, data):]

    return send


def main(argv: list[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    os.set_inheritable(args.report_fd, False)  # nothing a rule execs gets the report channel
    try:
        apply_plan(json.loads(args.plan), args.report_fd)
    except Exception:  # noqa: BLE001
        traceback.print_exc()
        return 4
    me = os.getpid()
    try:
        if args.probe is not None:
            text = json.dumps(probe(args.probe))
            with os.fdopen(args.report_fd, "wb", closefd=True) as out:
                out.write(text.encode())
        else:
            _check(args, _sender(args.report_fd))
    except BaseException:  # noqa: BLE001 - the parent reports the last line
        if os.getpid() != me:  # a process a rule forked: it has no report to give
            os._exit(0)
        traceback.print_exc()
        return 3
    if os.getpid() != me:
        os._exit(0)
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: threads a rule started must not keep us alive.
    os._exit(code)
