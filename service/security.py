"""Tokens: generated with ``secrets``, stored as SHA-256 hex digests, compared in constant time."""

from __future__ import annotations

import hashlib
import hmac
import secrets

__all__ = ["new_token", "new_read_token", "hash_token", "token_matches", "TOKEN_PREFIX", "READ_TOKEN_PREFIX"]

TOKEN_PREFIX = "ggp_"  # project submit tokens start with this, so secret scanners can spot them
READ_TOKEN_PREFIX = "ggr_"  # read-only tokens (pages, badges) start with this


def new_token() -> str:
    """A fresh project submit token (256 bits of entropy)."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def new_read_token() -> str:
    """A fresh read-only token: opens a private project's pages, badges and API reads, never a submission."""
    return READ_TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    """The stored form of a token. A plain hash is enough: tokens are random, not passwords."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def token_matches(token: str | None, token_hash: str | None) -> bool:
    return bool(token and token_hash) and hmac.compare_digest(hash_token(token or ""), token_hash or "")
