"""The Jinja2 environment of the pages: autoescaping on everywhere, a few filters, static URLs.

Static files get a content hash in their query string, so they can be cached for a year and a new
release is fetched at once.
"""

from __future__ import annotations

import hashlib
import re
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any

from fastapi.templating import Jinja2Templates
from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup, escape

from gradguard.service.reports import stored_summary

__all__ = ["templates", "STATIC_DIR", "static_url"]

HERE = Path(__file__).parent
STATIC_DIR = HERE / "static"


@lru_cache(maxsize=None)
def _digest(name: str) -> str:
    return hashlib.sha256((STATIC_DIR / name).read_bytes()).hexdigest()[:12]


def static_url(name: str) -> str:
    return f"/static/{name}?v={_digest(name)}"


def _aware(value: datetime) -> datetime:
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value


def iso(value: datetime | None) -> str:
    return _aware(value).isoformat() if value else ""


def human(value: datetime | None) -> str:
    return _aware(value).strftime("%Y-%m-%d %H:%M UTC") if value else ""


_CODE = re.compile(r"``(.+?)``|`([^`]+)`")


def inline_code(text: str | None) -> Markup:
    """Escape ``text``, then show its ``literal`` and `literal` spans (reST and Markdown style) as code."""
    escaped = str(escape(text or ""))
    return Markup(_CODE.sub(lambda m: f"<code>{m.group(1) or m.group(2)}</code>", escaped))


def _environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(enabled_extensions=("html", "svg"), default=True),
        trim_blocks=True,
        lstrip_blocks=True,
        auto_reload=False,
    )
    env.filters["iso"] = iso
    env.filters["human"] = human
    env.filters["code"] = inline_code
    env.filters["checked_summary"] = stored_summary  # a run's stored summary, or None if it is malformed
    env.globals["static"] = static_url
    return env


def _templates() -> Jinja2Templates:
    return Jinja2Templates(env=_environment())


templates: Any = _templates()
