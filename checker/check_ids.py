"""Check ids as options name them (``select=``, ``ignore=``, a rule's own ``ignore=``): parsed without the catalogue,
so that the rule declarations, which every check module imports, can read them too."""

from __future__ import annotations

import re
from typing import Any

__all__ = ["split_check_ids"]

_ID = re.compile(r"GG[0-9]{0,3}")


def split_check_ids(option: str, value: Any, error: type[Exception], *, form: bool = True) -> list[str]:
    """The check ids or prefixes of ``option`` (a string, comma-separated or not, or a sequence of them), upper-cased,
    without repeats; ``error`` (the caller's: a usage or a spec error) naming an entry that is not a string, or with
    ``form``, not of the form GG followed by up to three digits. Whether each matches a registered check is the
    caller's to ask (one that asks at once passes ``form=False`` and names the closest ids instead)."""
    if value is None:
        return []
    items = [value] if isinstance(value, str) else value
    try:
        items = list(items)
    except TypeError:
        raise error(f"Got {option}={value!r}, but {option} must be a check id or prefix, or a list of them "
                    f"({option}=[\"GG201\", \"GG501\"]).") from None
    out: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise error(f"Got {item!r} in {option}=, but each entry must be a check id or prefix such as 'GG201'.")
        for part in item.split(","):
            part = part.strip().upper()
            if not part:
                continue
            if form and not _ID.fullmatch(part):
                raise error(f"Got {option}={part!r}, but a check id or prefix is GG followed by up to three digits, "
                            "such as 'GG201' or 'GG5'.")
            if part not in out:
                out.append(part)
    return out
