"""Run the app under a real uvicorn server in a background thread (tests, the load script).

    with ServerThread(create_app(settings, service)) as server:
        httpx.get(server.url + "/healthz")
"""

from __future__ import annotations

import logging
import socket
import threading
import time

import uvicorn

log = logging.getLogger(__name__)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago on ``host``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class ServerThread:
    """uvicorn serving ``app`` on ``host:port`` in a daemon thread.

    Args:
        app: the ASGI app (its lifespan runs in the server thread).
        host: bind address (loopback by default).
        port: TCP port (default: a free one).
        ready_timeout_s: how long :meth:`start` waits for the server to accept requests.
        log_level: uvicorn's log level.
        root_path: the path prefix a reverse proxy serves the app under (the ASGI ``root_path``,
            as ``copilot serve --root-path`` sets it).
    Raises:
        RuntimeError: from :meth:`start` when the server did not come up in time.
    """

    def __init__(self, app, host: str = "127.0.0.1", port: int | None = None, ready_timeout_s: float = 120.0,
                 log_level: str = "warning", root_path: str = "") -> None:
        self.host = host
        self.port = port or free_port(host)
        self.ready_timeout_s = ready_timeout_s
        config = uvicorn.Config(app, host=host, port=self.port, log_level=log_level, lifespan="on",
                                timeout_graceful_shutdown=5, root_path=root_path)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name=f"uvicorn-{self.port}", daemon=True)

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
        self.thread.join(timeout=timeout_s)
        if self.thread.is_alive():
            self.server.force_exit = True
            self.thread.join(timeout=5)

    def __enter__(self) -> "ServerThread":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
