"""Tries the service's own back ends: PostgreSQL and Redis on the host's loopback (TCP) and
PostgreSQL's unix socket, speaking their protocols when a connection opens."""

import json
import socket
import sys
from pathlib import Path

from gradguard.checker import arrays, rrule

params = json.loads((Path(__file__).parent / "params.json").read_text())


def _talk(family, address, hello):
    try:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.settimeout(2)
            s.connect(address)
            s.sendall(hello)
            return "answered: " + s.recv(64).decode("latin-1")
    except OSError as e:
        return f"{type(e).__name__}: {e}"


# PostgreSQL's SSLRequest and Redis's PING: each answers at once when reached
SSL_REQUEST = (8).to_bytes(4, "big") + (80877103).to_bytes(4, "big")
facts = {
    "observer": "services",
    "postgres_tcp": _talk(socket.AF_INET, ("127.0.0.1", params["postgres_port"]), SSL_REQUEST),
    "redis_tcp": _talk(socket.AF_INET, ("127.0.0.1", params["redis_port"]), b"PING\r\n"),
    "postgres_unix": {path: _talk(socket.AF_UNIX, path, SSL_REQUEST) for path in params["unix_sockets"]},
}
print("GG-FACTS " + json.dumps(facts), file=sys.stderr)


def neg(x):
    return -x


@rrule(neg, arrays(shape=(2,)))
def neg_rrule(x):
    return neg(x), lambda ybar: (None if ybar is None else -ybar,)
