"""A loopback HTTP server (127.0.0.1, a thread; the `server` fixture, shut down after each test) that
serves files from memory, counts the requests and can cut a reply short (an interrupted transfer)."""

import http.server
import threading
from pathlib import Path

import pytest


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), Handler)
        self.files = {}      # path -> bytes
        self.truncate = {}   # path -> how many more replies end early
        self.hits = {}       # path -> requests seen

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's naming)
        srv = self.server
        srv.hits[self.path] = srv.hits.get(self.path, 0) + 1
        body = srv.files.get(self.path)
        if body is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if srv.truncate.get(self.path, 0) > 0:
            srv.truncate[self.path] -= 1
            self.wfile.write(body[: len(body) // 2])  # then the connection closes: an interrupted transfer
            self.close_connection = True
            return
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    """A running Server; a test module uses it by importing it (`from helpers.http_server import server`)."""
    srv = Server()
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(5)


def serve(server, path, prefix="/base"):
    """Serve the file at `path` as <prefix>/<its name>; returns the URL of the folder."""
    server.files[f"{prefix}/{Path(path).name}"] = Path(path).read_bytes()
    return server.url + prefix
