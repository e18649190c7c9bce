"""What a sandboxed run sees, and the command line that builds that view.

Inside the sandbox (bubblewrap and namespaces levels)::

    /usr, /bin, /lib...      the system, read-only
    <sys.prefix>, <site>     the Python installation, read-only, at the same paths
    /opt/gradguard/lib       gradguard/ with its __init__.py, checker/ and engines/ only, read-only (PYTHONPATH)
    /opt/gradguard/main.py   the entry program (service/_sandbox_main.py)
    /bundle                  a private copy of the bundle, read-only; the cwd
    /tmp                     a private tmpfs of Limits.tmpfs_mb (HOME, TMPDIR)
    /etc                     ld.so files, localtime, a passwd/group naming the run's user
    /dev, /proc              minimal devices; the run's own PID namespace

Not there: the rest of /etc (``shadow``), the project's checkout or
``service/`` and ``web/`` source, the database file, settings, any secret.
At the rlimits level nothing is hidden; the run reads the staged copies
through their host paths.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import shutil
import site
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path

LIB = "/opt/gradguard/lib"
MAIN = "/opt/gradguard/main.py"
BUNDLE = "/bundle"
TMP = "/tmp"
_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_ETC = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime")
_DEVICES_GPU = ("/dev/nvidia*", "/dev/nvidia-caps/*", "/dev/dri/*")


def main_script() -> str:
    return str(Path(__file__).resolve().parent.parent / "_sandbox_main.py")


def packages() -> dict[str, str]:
    """The source folders the checker needs, ``gradguard.checker`` and ``gradguard.engines``:
    name -> host path (editable or installed)."""
    out = {}
    for name in ("checker", "engines"):
        spec = importlib.util.find_spec(f"gradguard.{name}")
        if spec is None or not spec.submodule_search_locations:
            raise RuntimeError(f"the sandbox needs the 'gradguard.{name}' package, which this installation lacks")
        out[name] = str(Path(list(spec.submodule_search_locations)[0]).resolve())
    return out


def public_init() -> str:
    """Host path of ``gradguard/__init__.py`` (the public API the run's ``import gradguard`` reads)."""
    spec = importlib.util.find_spec("gradguard")
    if spec is None or spec.origin is None:
        raise RuntimeError("the sandbox needs the 'gradguard' package, which this installation lacks")
    return str(Path(spec.origin).resolve())


def installation() -> list[str]:
    """Folders of the Python installation, outermost only, as named and as resolved
    (a venv's ``bin/python`` must keep its own path to find its ``pyvenv.cfg``)."""
    candidates = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, *site.getsitepackages()]
    candidates.append(str(Path(sys.executable).resolve().parent.parent))
    paths = {q for p in candidates if os.path.isdir(p) for q in (os.path.abspath(p), os.path.realpath(p))}
    out: list[str] = []
    for p in sorted(paths):
        if any(p == q or p.startswith(q.rstrip("/") + "/") for q in (*out, "/usr")):
            continue
        out.append(p)
    return out


@dataclass
class Stage:
    """A host folder (0755) holding what the run reads: the bundle copy and a tiny /etc."""

    root: Path
    uid: int | None
    gid: int | None
    bundle: Path = field(init=False)
    lib: Path = field(init=False)

    def __post_init__(self) -> None:
        os.chmod(self.root, 0o755)
        self.bundle = self.root / "bundle"
        self.lib = self.root / "lib"
        (self.root / "etc").mkdir()
        uid = 0 if self.uid is None else self.uid
        gid = 0 if self.gid is None else self.gid
        (self.root / "etc/passwd").write_text(f"sandbox:x:{uid}:{gid}:sandbox:{TMP}:/bin/sh\n")
        (self.root / "etc/group").write_text(f"sandbox:x:{gid}:\n")
        for p in ("etc", "etc/passwd", "etc/group"):  # whatever the caller's umask
            os.chmod(self.root / p, 0o755 if p == "etc" else 0o644)
        (self.root / "newroot").mkdir()  # namespaces level: mount point of the new root
        # rlimits level: the packages through links, as the other levels see them
        (self.lib / "gradguard").mkdir(parents=True)
        (self.lib / "gradguard/__init__.py").symlink_to(public_init())
        for name, path in packages().items():
            (self.lib / "gradguard" / name).symlink_to(path)

    def copy_bundle(self, src: Path) -> None:
        """A private snapshot of the regular files and folders: the run never sees (or can change)
        the caller's folder. Links and special files are left out: followed here, as root, a link
        would copy what it points at into the sandbox."""
        self.bundle.mkdir()
        os.chmod(self.bundle, 0o755)
        for dirpath, dirnames, filenames in os.walk(src):
            rel = Path(dirpath).relative_to(src)
            for name in dirnames:
                if stat.S_ISDIR(os.lstat(os.path.join(dirpath, name)).st_mode):
                    (self.bundle / rel / name).mkdir()
                    os.chmod(self.bundle / rel / name, 0o755)
            for name in filenames:
                path = os.path.join(dirpath, name)
                if stat.S_ISREG(os.lstat(path).st_mode):
                    shutil.copyfile(path, self.bundle / rel / name, follow_symlinks=False)
                    os.chmod(self.bundle / rel / name, 0o444)


def _system_entries() -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(binds, symlinks) for the system folders, following merged-/usr links."""
    binds, links = [], []
    for p in _SYSTEM:
        if os.path.islink(p):
            links.append((os.readlink(p), p))
        elif os.path.isdir(p):
            binds.append((p, p))
    return binds, links


def binds(stage: Stage) -> list[tuple[str, str]]:
    """Read-only binds (host, inside), system first."""
    out, _ = _system_entries()
    out += [(os.path.realpath(p), p) for p in installation()]
    out += [(p, p) for p in _ETC if os.path.exists(p)]
    out += [(str(stage.root / "etc/passwd"), "/etc/passwd"), (str(stage.root / "etc/group"), "/etc/group")]
    out += [(public_init(), f"{LIB}/gradguard/__init__.py")]
    out += [(path, f"{LIB}/gradguard/{name}") for name, path in packages().items()]
    out += [(main_script(), MAIN), (str(stage.bundle), BUNDLE)]
    return out


def _parents(paths: list[str]) -> list[str]:
    """Folders to create before binding ``paths``: ancestors not inside another bind, shallow first."""
    inside = lambda p, q: p == q or p.startswith(q.rstrip("/") + "/")  # noqa: E731
    out = set()
    for p in paths:
        for parent in list(Path(p).parents)[:-1]:
            d = str(parent)
            if not any(inside(d, q) for q in paths if q != p and q != d) and d not in paths:
                out.add(d)
    return sorted(out, key=lambda d: (d.count("/"), d))


def devices(device: str) -> list[str]:
    if device == "cpu":
        return []
    return sorted(p for pattern in _DEVICES_GPU for p in glob.glob(pattern) if not os.path.isdir(p))


def bwrap_argv(stage: Stage, device: str, tmpfs_mb: int, *, size_flag: bool = True) -> list[str]:
    argv = ["bwrap", "--die-with-parent", "--new-session", "--unshare-ipc", "--unshare-pid", "--unshare-net"]
    argv += ["--unshare-uts", "--unshare-cgroup-try", "--hostname", "sandbox"]
    if os.geteuid() == 0:
        argv += ["--cap-drop", "ALL"]
        if stage.uid is not None:  # the entry program needs these until it drops to the run's uid
            argv += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_NET_ADMIN"]
    else:
        argv += ["--unshare-user"]
    _, links = _system_entries()
    mounts = binds(stage)
    argv += ["--perms", "1777"]  # first: an installation under /tmp (a CI venv) is bound inside it
    if size_flag:
        argv += ["--size", str(tmpfs_mb * 2**20)]
    argv += ["--tmpfs", TMP]
    for d in _parents([dst for _, dst in mounts] + [TMP]):  # bwrap would make them 0700
        if d != TMP and not d.startswith(TMP + "/"):
            argv += ["--perms", "0755", "--dir", d]
    for src, dst in mounts:
        argv += ["--ro-bind", src, dst]
    for target, dst in links:
        argv += ["--symlink", target, dst]
    argv += ["--dev", "/dev", "--proc", "/proc"]
    for dev in devices(device):
        argv += ["--dev-bind", dev, dev]
    if device != "cpu" and os.path.isdir("/sys"):
        argv += ["--ro-bind", "/sys", "/sys"]  # the GPU driver reads its topology there
    argv += ["--remount-ro", "/", "--chdir", BUNDLE, "--"]
    return argv


def namespaces_spec(stage: Stage, device: str, tmpfs_mb: int) -> dict:
    _, links = _system_entries()
    return {
        "root": str(stage.root / "newroot"),
        "binds": binds(stage),
        "symlinks": links,
        "devices": ["/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", *devices(device)],
        "sys": device != "cpu",
        "tmpfs_mb": tmpfs_mb,
    }
