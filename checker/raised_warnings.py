"""Python warnings raised while a rule is checked: kept with its result instead of printed.

A rule is called hundreds of times while it is checked, and the checks enter and leave ``warnings.catch_warnings``
blocks between calls, which resets Python's memory of the warnings already shown: a rule whose code warned
("inputs will be cast to float16") printed the same warning 112 times for one rule of 20 examples, and a library
module of such rules buried its report under thousands of lines. While a rule is checked the warnings that Python's
filters let through are collected instead, one entry per distinct category, message and place, and the report lists
them once (``gradguard check -v``; the default output says how many rules raised any). They are not findings: the
code the checks called raised them, and nothing in them was judged.
"""

from __future__ import annotations

import os
import warnings
from contextlib import contextmanager
from typing import Any, Iterator

__all__ = ["MAX_DISTINCT", "collected"]

MAX_DISTINCT = 20  # distinct warnings kept per rule (the report says how many more there were)
_MESSAGE_CHARS = 500


def _place(filename: str, lineno: int, root: str | None) -> str:
    """``filename:lineno``, relative to ``root`` where the file is under it, else from the package folder on."""
    path = filename
    if root is not None:
        try:
            rel = os.path.relpath(filename, root)
        except ValueError:
            rel = ".."
        if not rel.startswith(".."):
            path = rel
    if path == filename and os.path.isabs(filename):
        parts = filename.replace(os.sep, "/").split("/")
        marks = [k for k, part in enumerate(parts) if part in ("site-packages", "dist-packages")]
        path = "/".join(parts[marks[-1] + 1:]) if marks else "/".join(parts[-2:])
    return f"{path}:{lineno}"


def _text(message: Any) -> str:
    text = " ".join(str(message).split())
    return text if len(text) <= _MESSAGE_CHARS else text[:_MESSAGE_CHARS - 3] + "..."


@contextmanager
def collected(into: list[dict[str, str]], root: str | None = None) -> Iterator[None]:
    """Within the block, warnings go into ``into`` (``{"category", "message", "where"}``, each distinct one once, at
    most ``MAX_DISTINCT`` of them, then one entry counting the others) instead of to standard error. Python's
    filters still decide which warnings are raised at all (DeprecationWarnings of other modules stay ignored)."""
    seen: set[tuple[str, str, str]] = set()
    more = [0]

    def show(message: Any, category: type[Warning], filename: str, lineno: int, file: Any = None,
             line: Any = None) -> None:
        key = (category.__name__, _text(message), _place(filename, lineno, root))
        if key in seen:
            return
        if len(seen) < MAX_DISTINCT:
            seen.add(key)
            into.append({"category": key[0], "message": key[1], "where": key[2]})
        else:
            more[0] += 1

    with warnings.catch_warnings():
        warnings.showwarning = show
        try:
            yield
        finally:
            if more[0]:
                into.append({"category": "", "where": "",
                             "message": f"{more[0]} more distinct warning(s) were raised and not kept"})
