"""Run the app under a real uvicorn server: in the foreground (``copilot serve``) or in a
background thread (tests, the load script).

    with ServerThread(create_app(settings, service)) as server:
        httpx.get(server.url + "/healthz")

Both bind the listening socket first and record the port actually bound in the app's state
(``app.state.bound_port``, see :func:`bound_port`) before uvicorn starts the app, so that the
app names itself by it (its default replica id) even when it was asked for port 0.
"""

from __future__ import annotations

import logging
import socket
import threading
import time

import uvicorn
from starlette.types import ASGIApp
from uvicorn.server import STARTUP_FAILURE

log = logging.getLogger(__name__)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago on ``host``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def listen_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (0: a free port the OS picks), as uvicorn binds one.

    Raises:
        OSError: the address is in use or cannot be bound.
    """
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def bound_port(app: object) -> int | None:
    """The port the server running ``app`` bound (set by :func:`serve` and :class:`ServerThread`
    before start-up), or None when another server runs it."""
    return getattr(getattr(app, "state", None), "bound_port", None)


def _mark_bound(app: object, port: int) -> None:
    state = getattr(app, "state", None)
    if state is not None:
        state.bound_port = port


#: Seconds a stopping server (SIGTERM, Ctrl-C) waits for the answers in flight before it cancels them.
GRACEFUL_SHUTDOWN_S = 10


def serve(app: ASGIApp, sock: socket.socket, *, root_path: str = "", log_level: str = "info") -> int:
    """Serve ``app`` with uvicorn on ``sock`` (from :func:`listen_socket`) until stopped.

    On SIGTERM or Ctrl-C the answers in flight get :data:`GRACEFUL_SHUTDOWN_S` seconds to finish, then
    are cancelled: a stream that never ends (an endless model server) cannot keep the process alive.

    Returns:
        The process exit status: 0 after a normal shutdown, 3 (uvicorn's) when start-up failed.
    """
    host, port = sock.getsockname()[:2]
    _mark_bound(app, port)
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, root_path=root_path, log_level=log_level,
                                           timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S))
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    return 0 if server.started else STARTUP_FAILURE


class ServerThread:
    """uvicorn serving ``app`` on ``host:port`` in a daemon thread.

    Args:
        app: the ASGI app (its lifespan runs in the server thread).
        host: bind address (loopback by default).
        port: TCP port (default or 0: a free one, bound here at once).
        ready_timeout_s: how long :meth:`start` waits for the server to accept requests.
        log_level: uvicorn's log level.
        root_path: the path prefix a reverse proxy serves the app under (the ASGI ``root_path``,
            as ``copilot serve --root-path`` sets it).
    Raises:
        RuntimeError: from :meth:`start` when the server did not come up in time.
    """

    def __init__(self, app: ASGIApp, host: str = "127.0.0.1", port: int | None = None, ready_timeout_s: float = 120.0,
                 log_level: str = "warning", root_path: str = "") -> None:
        self.host = host
        self.socket = listen_socket(host, port or 0)
        self.port = int(self.socket.getsockname()[1])
        _mark_bound(app, self.port)
        self.ready_timeout_s = ready_timeout_s
        config = uvicorn.Config(app, host=host, port=self.port, log_level=log_level, lifespan="on",
                                timeout_graceful_shutdown=5, root_path=root_path)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.socket]},
                                       name=f"uvicorn-{self.port}", daemon=True)

    @property
    def url(self) -> str:
        """``http://host:port``."""
        return f"http://{self.host}:{self.port}"

    def start(self) -> "ServerThread":
        """Start serving; returns once the server accepts connections (bounded wait)."""
        self.thread.start()
        deadline = time.monotonic() + self.ready_timeout_s
        while not self.server.started:
            if not self.thread.is_alive():
                raise RuntimeError(f"uvicorn on {self.url} exited during start-up")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"uvicorn on {self.url} not ready after {self.ready_timeout_s} s")
            time.sleep(0.05)
        log.info("serving on %s", self.url)
        return self

    def stop(self, timeout_s: float = 15.0) -> None:
        """Ask the server to exit and wait for it (bounded)."""
        self.server.should_exit = True
        if self.thread.is_alive():
            self.thread.join(timeout=timeout_s)
        if self.thread.is_alive():
            self.server.force_exit = True
            self.thread.join(timeout=5)
        self.socket.close()

    def __enter__(self) -> "ServerThread":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
