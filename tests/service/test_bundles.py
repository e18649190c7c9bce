"""Hostile and malformed bundles are refused with a 4xx error naming the member and the fix."""

from __future__ import annotations

import io
import json
import stat
import tarfile
import zipfile
from pathlib import Path

import pytest

from gradguard.service.bundles import BundleLimits, clean_path, files_from_json, materialize, read_bundle
from gradguard.service.errors import Invalid, TooLarge

LIMITS = BundleLimits(max_bundle_bytes=2**20, max_unpacked_bytes=4 * 2**20, max_files=10, max_path_length=100)
RULE = b"x = 1\n"


def tar_bundle(members: list[tarfile.TarInfo | tuple[str, bytes]], mode: str = "w:gz") -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode) as archive:
        for member in members:
            if isinstance(member, tuple):
                info = tarfile.TarInfo(member[0])
                info.size = len(member[1])
                archive.addfile(info, io.BytesIO(member[1]))
            else:
                archive.addfile(member)
    buf.seek(0)
    return buf


def special(name: str, kind: bytes, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    return info


def test_good_tar_gz_zip_and_json_read_the_same_files() -> None:
    files = {"rules.py": RULE, "pkg/helper.py": b"y = 2\n"}
    assert read_bundle(tar_bundle(list(files.items())), LIMITS) == files
    assert read_bundle(tar_bundle(list(files.items()), mode="w"), LIMITS) == files
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    assert read_bundle(buf, LIMITS) == files
    assert files_from_json({k: v.decode() for k, v in files.items()}, LIMITS) == files


@pytest.mark.parametrize("path, words", [
    ("../evil.py", "'..'"),
    ("ok/../../evil.py", "'..'"),
    ("/etc/cron.d/evil.py", "absolute"),
    ("a\\b.py", "backslash"),
    ("x" * 150 + ".py", "characters long"),
    ("/".join(["d"] * 20) + "/a.py", "folders deep"),
])
def test_bad_paths_are_refused_naming_the_path(path: str, words: str) -> None:
    with pytest.raises(Invalid) as info:
        read_bundle(tar_bundle([("rules.py", RULE), (path, RULE)]), LIMITS)
    assert words in info.value.message and info.value.field == "bundle" and info.value.fix
    with pytest.raises(Invalid):
        files_from_json({"rules.py": "x", path: "y"}, LIMITS)


@pytest.mark.parametrize("member, kind", [
    (special("link.py", tarfile.SYMTYPE, "/etc/shadow"), "symbolic link"),
    (special("hard.py", tarfile.LNKTYPE, "rules.py"), "hard link"),
    (special("dev", tarfile.CHRTYPE), "device"),
    (special("fifo", tarfile.FIFOTYPE), "a fifo"),
])
def test_links_and_devices_are_refused(member: tarfile.TarInfo, kind: str) -> None:
    with pytest.raises(Invalid) as info:
        read_bundle(tar_bundle([("rules.py", RULE), member]), LIMITS)
    assert kind in info.value.message and repr(member.name) in info.value.message


def test_zip_symlink_is_refused() -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        archive.writestr("rules.py", RULE)
        link = zipfile.ZipInfo("secret.py")
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        archive.writestr(link, "/etc/shadow")
    with pytest.raises(Invalid, match="symbolic link"):
        read_bundle(buf, LIMITS)


def test_too_many_files() -> None:
    with pytest.raises(Invalid, match="more than 10 files"):
        read_bundle(tar_bundle([(f"m{i}.py", RULE) for i in range(11)]), LIMITS)


def test_decompression_bomb_stops_at_the_unpacked_limit() -> None:
    bomb = tar_bundle([("rules.py", RULE), ("zeros.bin", b"\0" * (5 * 2**20))])
    assert len(bomb.getvalue()) < LIMITS.max_bundle_bytes  # small on the wire
    with pytest.raises(TooLarge, match="unpacked files exceed"):
        read_bundle(bomb, LIMITS)


def test_oversized_bundle_is_refused_before_unpacking() -> None:
    with pytest.raises(TooLarge, match="the limit is 1048576"):
        read_bundle(io.BytesIO(b"\0" * (2**20 + 1)), LIMITS)


def test_garbage_and_empty_bundles() -> None:
    with pytest.raises(Invalid, match="not a readable"):
        read_bundle(io.BytesIO(b"this is not an archive" * 100), LIMITS)
    with pytest.raises(Invalid, match="no .py file"):
        read_bundle(tar_bundle([("README.txt", b"hi")]), LIMITS)
    with pytest.raises(Invalid, match="appears twice"):
        read_bundle(tar_bundle([("rules.py", RULE), ("./rules.py", RULE)]), LIMITS)
    with pytest.raises(Invalid, match="non-empty object"):
        files_from_json({}, LIMITS)
    with pytest.raises(Invalid, match="not text"):
        files_from_json(json.loads('{"rules.py": 3}'), LIMITS)


def test_clean_path_normalizes() -> None:
    assert clean_path("./pkg//rules.py", LIMITS) == "pkg/rules.py"


def test_materialize_writes_only_under_the_folder(tmp_path: Path) -> None:
    materialize({"rules.py": RULE, "pkg/a.py": b"a"}, tmp_path)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.py")) == ["pkg/a.py", "rules.py"]
    with pytest.raises(Invalid):
        materialize({"../x.py": b""}, tmp_path / "pkg")
