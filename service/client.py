"""A client of the gradguard API, for CI: bundle rule files, submit a run, wait for its verdict.

    client = Client("https://gradguard.example.org", token="ggp_...")
    accepted = client.submit("my-project", make_bundle(["rules/"]), RunRequest(branch="main"))
    run = client.wait(accepted["id"])
    report = client.report(accepted["id"])

Errors (what `gradguard submit` turns into exit codes)::

    ClientError                 base
    ├── Rejected        4xx: the server refused the request (token, project, bundle); exit 2
    └── ServerFailure   5xx or the network, after retries; exit 3

Transient failures (connection refused or reset, timeouts, 429, 502, 503, 504) are retried
with exponential backoff and jitter, honouring ``Retry-After``. A submission is retried only
when the request cannot have reached the server or the server said so (429/503), so a retry
never queues the same run twice.
"""

from __future__ import annotations

import io
import os
import random
import tarfile
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

__all__ = [
    "Client",
    "ClientError",
    "Rejected",
    "ServerFailure",
    "RunRequest",
    "make_bundle",
    "bundle_paths",
    "FINAL",
]

FINAL = ("passed", "failed", "error")
API = "/api/v1"
_RETRY_STATUS = (429, 502, 503, 504)
_SKIP_DIRS = {"__pycache__", ".git", ".hg", ".svn", ".tox", ".venv", "venv", "node_modules", ".mypy_cache"}


class ClientError(Exception):
    """Something went wrong talking to the server; ``fix`` says what to do about it."""

    def __init__(self, message: str, *, fix: str | None = None, status: int | None = None) -> None:
        super().__init__(message)
        self.message, self.fix, self.status = message, fix, status

    def __str__(self) -> str:
        return self.message + (f"\n  fix: {self.fix}" if self.fix else "")


class Rejected(ClientError):
    """The server answered 4xx: the request itself is wrong (token, project, bundle, options)."""


class ServerFailure(ClientError):
    """The server answered 5xx or could not be reached, after every retry."""


@dataclass
class RunRequest:
    """What is recorded with a run and how it is checked (the API's ``RunOptions``)."""

    commit: str | None = None
    branch: str = "main"
    pull_request: int | None = None
    device: str = "cpu"
    select: list[str] | None = None
    ignore: list[str] | None = None
    seed: int = 0
    max_examples: int | None = None
    rule_timeout_s: float | None = None

    def fields(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


def bundle_paths(paths: Iterable[str | Path], root: str | Path | None = None) -> dict[str, Path]:
    """Map archive names to files: each file as given, each folder's ``.py`` files recursively.

    Names are relative to ``root`` (the working directory by default, which on GitHub Actions is the
    repository), so findings and annotations point at the paths the repository uses.
    """
    base = Path(root or os.getcwd()).resolve()
    found: dict[str, Path] = {}

    def name_of(path: Path) -> str:
        resolved = path.resolve()
        try:
            return resolved.relative_to(base).as_posix()
        except ValueError:
            return resolved.name

    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise FileNotFoundError(f"Got path {str(raw)!r}, which does not exist. Pass rule modules (.py) or folders of them.")
        if path.is_dir():
            for child in sorted(path.rglob("*.py")):
                if any(part in _SKIP_DIRS or part.startswith(".") for part in child.relative_to(path).parts[:-1]):
                    continue
                if child.is_file():
                    found[name_of(child)] = child
        else:
            found[name_of(path)] = path
    if not found:
        raise FileNotFoundError(f"Found no .py files in {[str(p) for p in paths]}. Pass rule modules or folders of them.")
    return found


def make_bundle(paths: Iterable[str | Path], root: str | Path | None = None) -> bytes:
    """A tar.gz of the rule files (regular files only; links are followed, never stored)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, path in bundle_paths(paths, root).items():
            data = path.read_bytes()
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


class Client:
    """The gradguard API over HTTP, with retries and clear errors."""

    def __init__(
        self,
        server: str,
        token: str | None = None,
        *,
        timeout_s: float = 30.0,
        retries: int = 5,
        backoff_s: float = 1.0,
        max_backoff_s: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
        log: Callable[[str], None] | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if not server.startswith(("http://", "https://")):
            raise ValueError(f"Got server={server!r}; use a URL like https://gradguard.example.org")
        self.server = server.rstrip("/")
        self.retries, self.backoff_s, self.max_backoff_s = retries, backoff_s, max_backoff_s
        self._sleep, self._log = sleep, log or (lambda _msg: None)
        headers = {"User-Agent": "gradguard-submit/0.1", "Accept": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._http = httpx.Client(base_url=self.server, headers=headers, timeout=timeout_s, transport=transport)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- URLs of the pages people look at ---------------------------------------------------------
    def run_page(self, run_id: int) -> str:
        return f"{self.server}/runs/{run_id}"

    def badge(self, project: str, branch: str) -> str:
        return f"{self.server}/badge/{project}.svg?branch={quote(branch, safe='')}"

    # -- API --------------------------------------------------------------------------------------
    def submit(self, project: str, bundle: bytes, request: RunRequest) -> dict[str, Any]:
        """Queue a run of ``bundle``; returns the API's answer (``id``, ``status``, ``urls``)."""
        data = {k: (",".join(v) if isinstance(v, list) else str(v)) for k, v in request.fields().items()}
        files = {"bundle": ("rules.tar.gz", bundle, "application/gzip")}
        response = self._request("POST", f"{API}/projects/{project}/runs", idempotent=False, data=data, files=files)
        return response.json()

    def run(self, run_id: int) -> dict[str, Any]:
        return self._request("GET", f"{API}/runs/{run_id}").json()

    def report(self, run_id: int) -> dict[str, Any]:
        return self._request("GET", f"{API}/runs/{run_id}/report").json()

    def wait(
        self,
        run_id: int,
        *,
        timeout_s: float = 1800.0,
        poll_s: float = 0.5,
        max_poll_s: float = 5.0,
        on_status: Callable[[dict[str, Any]], None] | None = None,
    ) -> dict[str, Any]:
        """Poll the run until it is passed, failed or error; polls back off from ``poll_s`` to ``max_poll_s``."""
        deadline = time.monotonic() + timeout_s
        seen = None
        while True:
            run = self.run(run_id)
            if run.get("status") != seen:
                seen = run.get("status")
                if on_status:
                    on_status(run)
            if run.get("status") in FINAL:
                return run
            if time.monotonic() >= deadline:
                raise ServerFailure(
                    f"run {run_id} is still {seen} after {timeout_s:g} s.",
                    fix=f"Look at {self.run_page(run_id)}; raise --timeout, or check that the server has workers for this device.",
                )
            self._sleep(poll_s)
            poll_s = min(max_poll_s, poll_s * 1.3)

    # -- plumbing ---------------------------------------------------------------------------------
    def _request(self, method: str, url: str, *, idempotent: bool = True, **kwargs: Any) -> httpx.Response:
        attempt = 0
        while True:
            attempt += 1
            try:
                response = self._http.request(method, url, **kwargs)
            except httpx.TransportError as exc:
                retryable = idempotent or isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout))
                what = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                if not retryable or attempt > self.retries:
                    raise ServerFailure(
                        f"could not reach {self.server} ({what}) after {attempt} attempt(s).",
                        fix="Check --server and that the server is up (GET /healthz); the request was retried with backoff.",
                    ) from exc
                self._retry_later(attempt, None, f"{method} {url}: {what}")
                continue
            if response.status_code in _RETRY_STATUS and (idempotent or response.status_code in (429, 503)):
                if attempt <= self.retries:
                    self._retry_later(attempt, response, f"{method} {url}: HTTP {response.status_code}")
                    continue
            if response.status_code >= 400:
                raise self._error(response, attempt)
            return response

    def _retry_later(self, attempt: int, response: httpx.Response | None, why: str) -> None:
        delay = min(self.max_backoff_s, self.backoff_s * 2 ** (attempt - 1)) * (0.75 + random.random() / 2)
        retry_after = response.headers.get("Retry-After") if response is not None else None
        if retry_after and retry_after.strip().isdigit():
            delay = min(self.max_backoff_s * 4, float(retry_after))
        self._log(f"gradguard: {why}; retrying in {delay:.1f} s (attempt {attempt + 1} of {self.retries + 1})")
        self._sleep(delay)

    def _error(self, response: httpx.Response, attempt: int) -> ClientError:
        message, fix = f"HTTP {response.status_code}", None
        try:
            detail = response.json().get("detail")
        except ValueError:
            detail = response.text[:300] or None
        if isinstance(detail, dict):
            message, fix = detail.get("message") or message, detail.get("fix")
        elif detail:
            message = str(detail)
        where = f"{response.request.method} {response.request.url.path}"
        if response.status_code >= 500:
            return ServerFailure(f"the server failed on {where} after {attempt} attempt(s): {message}", fix=fix,
                                 status=response.status_code)
        if response.status_code in (401, 403):  # the client speaks to CLI users: its options, not HTTP headers
            fix = ("Pass the project's submit token with --token or $GRADGUARD_TOKEN (the token shown when the "
                   "project was created; in CI, store it as a secret).")
        return Rejected(f"the server refused {where} (HTTP {response.status_code}): {message}", fix=fix,
                        status=response.status_code)
