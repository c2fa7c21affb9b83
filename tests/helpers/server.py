"""A local HTTP server on 127.0.0.1 serving a folder, for the download tests."""
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

SERVER_LIFETIME_S = 180  # the server stops by itself after this, whatever happens


class _Handler(BaseHTTPRequestHandler):
    """GET <prefix>/<path under the served root>. Prefixes: /bucket (plain),
    /truncated (announces the full length, sends half), /slow (sends in
    small pieces with pauses, after the server's ``gate``, if set, opens), /portal (a login page for any
    path, with status 200: typed text/html under /portal/typed, else untyped)."""

    def do_GET(self):  # noqa: N802
        server = self.server
        mode, _, rest = self.path.lstrip("/").partition("/")
        path = server.root / rest
        with server.lock:
            server.requests.append(self.path)
        if mode == "portal":  # a captive portal: a login page, status 200, for any path
            page = (
                b"<!DOCTYPE html>\n<html><head><title>Sign in</title></head><body>Log in to the Wi-Fi</body></html>\n"
            )
            self.send_response(200)
            self.send_header(
                "Content-Type", "text/html; charset=utf-8" if "typed" in rest else "application/octet-stream"
            )
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)
            return
        if mode not in ("bucket", "truncated", "slow") or not path.is_file():
            self.send_error(404)
            return
        body = path.read_bytes()
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if mode == "truncated" and path.suffix == ".hdf5":
            self.wfile.write(body[: len(body) // 2])
            self.close_connection = True
            return
        if mode == "slow":
            self._wait_for_gate(server)
            step = max(1, len(body) // 10)
            for start in range(0, len(body), step):
                self.wfile.write(body[start : start + step])
                self.wfile.flush()
                time.sleep(0.1)
            return
        self.wfile.write(body)

    @staticmethod
    def _wait_for_gate(server):
        """Hold the response until ``server.gate()`` is true (at most the
        server's lifetime): a test opens it when its clients are all in."""
        gate = getattr(server, "gate", None)
        deadline = time.monotonic() + SERVER_LIFETIME_S
        while gate is not None and not gate() and time.monotonic() < deadline:
            time.sleep(0.01)

    def log_message(self, *args):
        pass


class Server:
    def __init__(self, root: Path):
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.httpd.root = root
        self.httpd.requests = []
        self.httpd.lock = threading.Lock()
        self.httpd.gate = None
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.timer = threading.Timer(SERVER_LIFETIME_S, self.stop)
        self.timer.daemon = True
        self.stopped = False

    def start(self):
        self.thread.start()
        self.timer.start()
        return self

    def stop(self):
        if not self.stopped:
            self.stopped = True
            self.timer.cancel()
            self.httpd.shutdown()
            self.httpd.server_close()
            self.thread.join(timeout=10)

    def hold_until(self, gate):
        """``/slow`` responses wait until ``gate()`` is true."""
        self.httpd.gate = gate

    @property
    def requests(self):
        return list(self.httpd.requests)
