"""Submitted rule files: read a tar.gz / tar / zip bundle or a JSON map ``{path: text}``, validate
every path and size, and write the files into a fresh folder for the sandbox.

Everything hostile is refused with a 4xx :class:`~service.errors.ServiceError` that names the
member and the fix: absolute paths, ``..``, links, devices, fifos, too many files, too many bytes
(the bundle, one file, or everything unpacked: a decompression bomb stops at the limit).
Nothing is ever extracted by the archive library; each regular file is read with a size cap and
written by us under a validated relative path.
"""

from __future__ import annotations

import io
import re
import stat
import tarfile
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO

from gradguard.service.errors import Invalid, TooLarge

__all__ = ["BundleLimits", "clean_path", "read_bundle", "files_from_json", "materialize"]

# control characters, Windows-reserved ones, and lone surrogates (a JSON "\\ud800" or a tar name that is not UTF-8)
_BAD_CHARS = re.compile(r"[\x00-\x1f\x7f\\:*?\"<>|\ud800-\udfff]")
MAX_DEPTH = 16
FIX_PATHS = "Use relative paths inside the project, with '/' separators and no '..', e.g. 'rules/my_rule.py'."


@dataclass(frozen=True)
class BundleLimits:
    max_bundle_bytes: int = 10 * 2**20
    max_unpacked_bytes: int = 50 * 2**20
    max_files: int = 200
    max_path_length: int = 200

    @classmethod
    def from_settings(cls, settings: object) -> "BundleLimits":
        return cls(**{f: getattr(settings, f) for f in cls.__dataclass_fields__})


def clean_path(path: str, limits: BundleLimits, *, field: str = "bundle") -> str:
    """Return ``path`` normalized (``./a//b.py`` -> ``a/b.py``), or raise :class:`Invalid` naming it."""
    shown = repr(path[:120])
    if not isinstance(path, str) or not path.strip():
        raise Invalid(f"{field}: a file has an empty path.", field=field, fix=FIX_PATHS)
    if len(path) > limits.max_path_length:
        raise Invalid(f"{field}: path {shown}... is {len(path)} characters long; the limit is {limits.max_path_length}.",
                      field=field, fix="Shorten the path.")
    if _BAD_CHARS.search(path):
        raise Invalid(f"{field}: path {shown} contains a control character, a lone surrogate (not UTF-8), a backslash "
                      "or one of : * ? \" < > |.",
                      field=field, fix=FIX_PATHS)
    if path.startswith("/"):
        raise Invalid(f"{field}: path {shown} is absolute.", field=field, fix=FIX_PATHS)
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise Invalid(f"{field}: path {shown} contains '..', which would leave the bundle folder.",
                      field=field, fix=FIX_PATHS)
    if not parts:
        raise Invalid(f"{field}: path {shown} names no file.", field=field, fix=FIX_PATHS)
    if len(parts) > MAX_DEPTH:
        raise Invalid(f"{field}: path {shown} is {len(parts)} folders deep; the limit is {MAX_DEPTH}.",
                      field=field, fix="Flatten the folder layout.")
    return str(PurePosixPath(*parts))


class _Collector:
    """Accumulate files while enforcing the count and byte limits."""

    def __init__(self, limits: BundleLimits, field: str) -> None:
        self.limits, self.field = limits, field
        self.files: dict[str, bytes] = {}
        self.folders: set[str] = set()
        self.total = 0

    def add(self, raw_path: str, size: int, read: Callable[[int], bytes]) -> None:
        """Add one file of declared ``size``; ``read(n)`` returns at most ``n`` bytes of it."""
        path = clean_path(raw_path, self.limits, field=self.field)
        if path in self.files:
            raise Invalid(f"{self.field}: path {path!r} appears twice.", field=self.field,
                          fix="Put each file in the bundle once.")
        parents = [str(p) for p in PurePosixPath(path).parents][:-1]  # "a/b/c.py" -> "a/b", "a"
        clash = path if path in self.folders else next((p for p in parents if p in self.files), None)
        if clash is not None:
            raise Invalid(f"{self.field}: {clash!r} is both a file and a folder in the bundle.", field=self.field,
                          fix="Rename the file or the folder so that no path is both.")
        if len(self.files) >= self.limits.max_files:
            raise Invalid(f"{self.field}: more than {self.limits.max_files} files.", field=self.field,
                          fix="Submit only the rule modules and what they import (GRADGUARD_MAX_FILES on the server).")
        budget = self.limits.max_unpacked_bytes - self.total
        if size > budget:
            raise TooLarge(f"{self.field}: unpacked files exceed {self.limits.max_unpacked_bytes} bytes (at {path!r}).",
                           field=self.field, fix="Leave data files and build outputs out of the bundle.")
        data = read(budget + 1)
        if len(data) > budget:
            raise TooLarge(f"{self.field}: unpacked files exceed {self.limits.max_unpacked_bytes} bytes (at {path!r}).",
                           field=self.field, fix="Leave data files and build outputs out of the bundle.")
        self.total += len(data)
        self.files[path] = data
        self.folders.update(parents)

    def result(self) -> dict[str, bytes]:
        if not any(p.endswith(".py") for p in self.files):
            raise Invalid(f"{self.field}: holds no .py file, so there are no rules to check.", field=self.field,
                          fix="Include the Python modules that define your rules.")
        return dict(self.files)


def read_bundle(fileobj: IO[bytes], limits: BundleLimits, *, field: str = "bundle") -> dict[str, bytes]:
    """Read a tar(.gz/.bz2/.xz) or zip archive into ``{path: bytes}``, refusing anything hostile."""
    fileobj.seek(0, io.SEEK_END)
    size = fileobj.tell()
    fileobj.seek(0)
    if size > limits.max_bundle_bytes:
        raise TooLarge(f"{field}: {size} bytes; the limit is {limits.max_bundle_bytes}.", field=field,
                       fix="Submit only the rule modules, or raise GRADGUARD_MAX_BUNDLE_BYTES on the server.")
    head = fileobj.read(4)
    fileobj.seek(0)
    collector = _Collector(limits, field)
    if head.startswith(b"PK\x03\x04") or head.startswith(b"PK\x05\x06"):
        _read_zip(fileobj, collector)
    else:
        _read_tar(fileobj, collector)
    return collector.result()


def _read_tar(fileobj: IO[bytes], collector: _Collector) -> None:
    field = collector.field
    try:
        with tarfile.open(fileobj=fileobj, mode="r:*") as archive:
            for member in archive:
                if member.isdir():
                    clean_path(member.name, collector.limits, field=field)
                    continue
                if not member.isreg():
                    kind = ("a symbolic link" if member.issym() else "a hard link" if member.islnk() else
                            "a device" if member.ischr() or member.isblk() else
                            "a fifo" if member.isfifo() else "not a regular file")
                    raise Invalid(f"{field}: member {member.name!r} is {kind}; bundles hold regular files only.",
                                  field=field, fix="Replace links with the files they point to (tar --dereference).")
                extracted = archive.extractfile(member)
                assert extracted is not None
                collector.add(member.name, member.size, extracted.read)
    except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
        raise Invalid(f"{field}: not a readable tar, tar.gz or zip archive ({exc}).", field=field,
                      fix="Upload a .tar.gz or .zip made with tar/zip, or send JSON {\"files\": {path: text}}.") from exc


def _read_zip(fileobj: IO[bytes], collector: _Collector) -> None:
    field = collector.field
    try:
        with zipfile.ZipFile(fileobj) as archive:
            for info in archive.infolist():
                mode = info.external_attr >> 16
                if info.is_dir():
                    clean_path(info.filename, collector.limits, field=field)
                    continue
                if stat.S_IFMT(mode) and not stat.S_ISREG(mode):
                    kind = "a symbolic link" if stat.S_ISLNK(mode) else "not a regular file"
                    raise Invalid(f"{field}: member {info.filename!r} is {kind}; bundles hold regular files only.",
                                  field=field, fix="Replace links with the files they point to (zip without -y).")
                with archive.open(info) as member:
                    collector.add(info.filename, info.file_size, member.read)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError, ValueError, NotImplementedError) as exc:
        raise Invalid(f"{field}: not a readable zip archive ({exc}).", field=field,
                      fix="Upload a .zip or .tar.gz made with zip/tar.") from exc


def files_from_json(files: Mapping[str, str], limits: BundleLimits, *, field: str = "files") -> dict[str, bytes]:
    """Validate a JSON map ``{path: text}`` the same way as an archive."""
    if not isinstance(files, Mapping) or not files:
        raise Invalid(f"{field}: expected a non-empty object mapping paths to file contents.", field=field,
                      fix='Send {"files": {"rules.py": "...source..."}}.')
    collector = _Collector(limits, field)
    for path, text in files.items():
        if not isinstance(text, str):
            raise Invalid(f"{field}: the value for {path!r} is {type(text).__name__}, not text.", field=field,
                          fix="Send each file's content as a string.")
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise Invalid(f"{field}: the content of {path!r} holds a lone surrogate at character {exc.start}, "
                          "which is not text.", field=field,
                          fix="Send each file as valid UTF-8 text; escape only whole surrogate pairs in JSON.") from None
        collector.add(path, len(data), lambda n, d=data: d[:n])
    return collector.result()


def materialize(files: Mapping[str, bytes], dest: Path) -> Path:
    """Write validated ``files`` under ``dest`` (which must exist and be empty); return ``dest``."""
    root = dest.resolve()
    for path, data in files.items():
        target = (root / path).resolve()
        if root not in target.parents:  # defence in depth: paths were validated on the way in
            raise Invalid(f"bundle: path {path!r} leaves the bundle folder.", field="bundle", fix=FIX_PATHS)
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "xb") as out:
            out.write(data)
    return dest
