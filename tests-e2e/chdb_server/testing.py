"""Runs the server as a child process for tests: start, stop, restart on the same data, fault switches."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class LocalClickHouse:
    def __init__(self, data_dir: str, *, user: str = "default", password: str = "", tls: bool = False):
        self.data_dir = data_dir
        self.user = user
        self.password = password
        self.tls = tls
        self.url: str | None = None
        self.port = 0
        self.certificate: str | None = None
        self._process: subprocess.Popen | None = None

    def start(self) -> str:
        command = [sys.executable, "-m", "chdb_server", "--port", str(self.port), "--data", self.data_dir,
                   "--user", self.user]
        if self.tls:
            command.append("--tls")
        env = dict(os.environ, CHDB_SERVER_PASSWORD=self.password,
                   PYTHONPATH=HERE + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self._process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
        line = self._process.stdout.readline().strip()
        if not line.startswith("http"):
            raise RuntimeError(f"chdb_server did not start: {self._process.stderr.read()}")
        self.url = line
        self.port = int(line.rsplit(":", 1)[1])  # a restart keeps the port
        if self.tls:
            self.certificate = self._process.stderr.readline().split("certificate: ", 1)[1].strip()
        return line

    def stop(self):
        if self._process is not None:
            self._process.terminate()
            self._process.wait(timeout=30)
            self._process = None

    def restart(self) -> str:
        self.stop()
        return self.start()

    def faults(self, **spec):
        """fail_next=N, fail_code=C, drop_next=N, latency_ms=MS: see chdb_server.server.Faults."""
        request = urllib.request.Request(self.url + "/__faults__", data=json.dumps(spec).encode(), method="POST")
        urllib.request.urlopen(request, timeout=10).read()


class Endpoint:
    """Where a ClickHouse answers, with its credentials."""

    def __init__(self, url: str):
        parts = urllib.parse.urlsplit(url)
        self.secure = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (8443 if self.secure else 8123)
        self.user = urllib.parse.unquote(parts.username or "default")
        self.password = urllib.parse.unquote(parts.password or "")
        self.http_url = f"{parts.scheme}://{self.host}:{self.port}"

    def state_uri(self, database: str = "default") -> str:
        user = urllib.parse.quote(self.user, safe="")
        password = urllib.parse.quote(self.password, safe="")
        return f"clickhouse://{user}:{password}@{self.host}:{self.port}/{database}"
