"""Access logs never hold a token: the only URL that may carry one is a private badge's
``?token=<read-only token>``, and this filter replaces every query value whose (decoded) name holds
"token" with ``[redacted]`` before uvicorn's access log writes the line.
"""

from __future__ import annotations

import logging
from urllib.parse import parse_qsl, urlencode

__all__ = ["redact_query", "RedactTokens", "install_access_log_redaction"]

REDACTED = "[redacted]"


def redact_query(path: str) -> str:
    """``path`` (with its query) with the values of token-like parameters replaced."""
    base, sep, query = path.partition("?")
    if not sep:
        return path
    pairs = parse_qsl(query, keep_blank_values=True)
    if not any("token" in name.lower() for name, _ in pairs) and "token" not in query.lower():
        return path
    return base + "?" + urlencode([(n, REDACTED if "token" in n.lower() else v) for n, v in pairs], safe="[]")


class RedactTokens(logging.Filter):
    """For uvicorn's access logger, whose records carry (client, method, path with query, version, status)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str):
            record.args = (*args[:2], redact_query(args[2]), *args[3:])
        return True


def install_access_log_redaction() -> None:
    """Attach :class:`RedactTokens` to uvicorn's access logger, once per process."""
    logger = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, RedactTokens) for f in logger.filters):
        logger.addFilter(RedactTokens())
