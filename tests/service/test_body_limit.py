"""A 200 MB upload is refused early, on a real server, without the server reading it."""

from __future__ import annotations

import socket

import pytest

from gradguard.service.app import create_app

from service_support import LIVE_TIMEOUT_S, LiveServer  # type: ignore[import-not-found]

BIG = 200 * 2**20
LIMIT = 2**20


@pytest.fixture
def server(make_settings, migrated):  # type: ignore[no-untyped-def]
    app = create_app(make_settings(database_url=migrated, max_bundle_bytes=LIMIT, max_unpacked_bytes=LIMIT))
    with LiveServer(app) as live:
        yield live


@pytest.fixture
def token(server, admin_headers) -> str:  # type: ignore[no-untyped-def]
    import httpx

    return httpx.post(f"{server.url}/api/v1/projects", json={"slug": "p"}, headers=admin_headers,
                      timeout=LIVE_TIMEOUT_S).json()["token"]


def _request_head(token: str, extra: str) -> bytes:
    return (f"POST /api/v1/projects/p/runs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: multipart/form-data; boundary=XyZ\r\nConnection: close\r\n{extra}\r\n").encode()


PART = (b'--XyZ\r\nContent-Disposition: form-data; name="bundle"; filename="b.tgz"\r\n'
        b"Content-Type: application/octet-stream\r\n\r\n")


def _read_response(sock: socket.socket) -> bytes:
    """What the server sent; a server that hangs up on unread bytes resets the connection after answering."""
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    return data


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_declared_200_mb_body_is_refused_before_reading(server, token) -> None:  # type: ignore[no-untyped-def]
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        # Only the headers: the declared length alone must get the answer, without a byte of the body
        # (sending part of it would leave unread bytes, and the server's hang-up could then reset the
        # connection before its answer is read).
        sock.sendall(_request_head(token, f"Content-Length: {BIG}\r\n"))
        response = _read_response(sock)
    assert response.startswith(b"HTTP/1.1 413"), response[:200]
    assert b'"field":"bundle"' in response.replace(b" ", b"") and b"the limit is" in response


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_streamed_200_mb_body_is_cut_off_at_the_limit(server, token) -> None:  # type: ignore[no-untyped-def]
    sent = 0
    chunk = b"\0" * 65536
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(_request_head(token, "Transfer-Encoding: chunked\r\n"))
        sock.sendall(b"%x\r\n%s\r\n" % (len(PART), PART))
        try:
            while sent < BIG:
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                sent += len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server hung up: what we want
        response = _read_response(sock)
    assert response.startswith(b"HTTP/1.1 413"), response[:200]
    assert sent < BIG / 4, f"the client pushed {sent} bytes before being stopped"
