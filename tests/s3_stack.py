"""An S3-compatible server for the tests: moto's server mode (`python -m moto.server`, what s3fs's own
test suite runs against; installed from the registry with the test extra) on a free loopback port.

The server runs in its own process, started with a session of its own and stopped by pid, with what
it started, even when the tests fail (tests/prefect_stack.py's stop_tree). Clients find it only the
standard way: ``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID`` and ``AWS_SECRET_ACCESS_KEY`` in the
environment (:meth:`S3Server.env`), never in a URL. Its request log (werkzeug's access log, one line
per request) is what :meth:`S3Server.requests` reads back.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from tests.prefect_stack import ROOT, describe, free_port, stop_tree

_REQUEST = re.compile(r'"([A-Z]+) (\S+) HTTP/[\d.]+" (\d{3})')


class S3Server:
    def __init__(self, tmp: Path):
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.log = tmp / "moto.log"
        self.proc: subprocess.Popen | None = None

    def env(self) -> dict[str, str]:
        """What a client of this server needs in its environment (a dummy key pair: moto checks none)."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": "pearl-test",
                "AWS_SECRET_ACCESS_KEY": "pearl-test-secret", "AWS_DEFAULT_REGION": "us-east-1",
                "AWS_EC2_METADATA_DISABLED": "true"}

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                                         cwd=ROOT, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"moto server did not start:\n{self.log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.2)

    def stop(self) -> list[str]:
        """Stop the server by pid (its process group and descendants); what survived, described."""
        if self.proc is None:
            return []
        import psutil

        try:
            left = [psutil.Process(self.proc.pid)]
        except psutil.NoSuchProcess:
            left = []
        stop_tree([self.proc])
        return describe([p for p in left if p.is_running() and p.status() != psutil.STATUS_ZOMBIE])

    def requests(self) -> list[tuple[str, str, int]]:
        """(method, path with query, status) of every request the server logged, in order."""
        text = self.log.read_text(errors="replace")
        return [(m[1], m[2], int(m[3])) for m in _REQUEST.finditer(text)]

    def bucket(self) -> str:
        """A new, empty bucket's name."""
        import fsspec

        name = f"pearl-{uuid.uuid4().hex[:20]}"
        fsspec.filesystem("s3").mkdir(name)
        return name


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """moto's server on loopback for the session, the environment pointing every S3 client at it."""
    server = S3Server(tmp_path_factory.mktemp("s3"))
    with pytest.MonkeyPatch.context() as mp:
        for k, v in server.env().items():
            mp.setenv(k, v)
        import s3fs

        s3fs.S3FileSystem.clear_instance_cache()  # instances made before took the environment they saw
        server.start()
        try:
            yield server
        finally:
            left = server.stop()
            s3fs.S3FileSystem.clear_instance_cache()
    assert not left, f"moto server left running: {left}"


@pytest.fixture
def s3_root(s3_server) -> str:
    """A storage root in a bucket of its own on the session's S3 server."""
    return f"s3://{s3_server.bucket()}/pearl"


def subprocess_env() -> dict[str, str]:
    """This process's environment (the S3 server's settings included) for a Python child."""
    return {**os.environ, "PYTHONUNBUFFERED": "1"}


class IgnoringProxy:
    """An S3 endpoint that ignores conditional writes: a proxy to the server that drops ``If-None-Match``
    from every request (as a store without them does), in a thread of the test process."""

    def __init__(self, target: str):
        import http.client
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        from urllib.parse import urlsplit

        host, port = urlsplit(target).hostname, urlsplit(target).port

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # answers botocore's "Expect: 100-continue" before it sends a body

            def forward(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("if-none-match", "expect")}
                conn = http.client.HTTPConnection(host, port, timeout=30)
                try:
                    conn.request(self.command, self.path, body=body, headers=headers)
                    r = conn.getresponse()
                    data = r.read()
                finally:
                    conn.close()
                self.send_response(r.status)
                for k, v in r.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length", "server", "date"):
                        self.send_header(k, v)
                self.send_header("Content-Length", r.getheader("Content-Length", "0") if self.command == "HEAD"
                                 else str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = forward

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)
