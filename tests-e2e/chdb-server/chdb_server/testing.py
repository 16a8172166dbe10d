"""Runs the local servers as child processes for tests: start, stop, restart on the same data and port."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.parse
import urllib.request


class _Child:
    """A `python -m MODULE` that prints what a client needs, one line each, once it is ready."""

    module = ""

    def __init__(self, data_dir: str):
        self.data_dir = data_dir
        self.port = 0  # a restart keeps the port the first start got
        self._process: subprocess.Popen | None = None

    def _arguments(self) -> list[str]:
        raise NotImplementedError

    def _start(self, lines: int, env: dict | None = None) -> list[str]:
        # CHDB_SERVER_PYTHON: a Python with chdb installed, for a caller whose own Python has only this package
        python = os.environ.get("CHDB_SERVER_PYTHON") or sys.executable
        self._process = subprocess.Popen([python, "-m", self.module, *self._arguments()], env=env, text=True,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        ready = [self._process.stdout.readline().strip() for _ in range(lines)]
        if not all(ready):
            self._process.kill()
            raise RuntimeError(f"{self.module} did not start: {self._process.stderr.read()}")
        self.port = int(ready[0].rsplit(":", 1)[1])
        return ready

    def stop(self):
        if self._process is not None:
            self._process.terminate()
            self._process.wait(timeout=30)
            self._process = None


class LocalZooKeeper(_Child):
    """An Apache ZooKeeper; `config` is a ClickHouse config file that gives an engine KeeperMap tables on it."""

    module = "chdb_server.zookeeper"

    def __init__(self, data_dir: str):
        super().__init__(data_dir)
        self.address: str | None = None
        self.config: str | None = None

    def _arguments(self):
        return ["--port", str(self.port), "--data", self.data_dir]

    def start(self) -> str:
        self.address, self.config = self._start(2)
        return self.address


class LocalClickHouse(_Child):
    module = "chdb_server"

    def __init__(self, data_dir: str, *, user: str = "default", password: str = "", tls: bool = False,
                 config: str | None = None):
        super().__init__(data_dir)
        self.user = user
        self.password = password
        self.tls = tls
        self.config = config
        self.url: str | None = None
        self.certificate: str | None = None

    def _arguments(self):
        return ["--port", str(self.port), "--data", self.data_dir, "--user", self.user,
                *(["--tls"] if self.tls else []), *(["--config", self.config] if self.config else [])]

    def start(self) -> str:
        self.url = self._start(1, dict(os.environ, CHDB_SERVER_PASSWORD=self.password))[0]
        if self.tls:
            self.certificate = self._process.stderr.readline().split("certificate: ", 1)[1].strip()
        return self.url

    @property
    def url_with_credentials(self) -> str:
        """The form CLICKHOUSE_URL takes: scheme://user:password@host:port."""
        user, password = (urllib.parse.quote(v, safe="") for v in (self.user, self.password))
        return self.url.replace("://", f"://{user}:{password}@", 1)

    def restart(self) -> str:
        self.stop()
        return self.start()

    def faults(self, **spec):
        """fail_next=N, fail_code=C, drop_next=N, lose_answer_next=N, lose_answer_matching=RE, fail_matching=RE,
        latency_ms=MS: see chdb_server.server.Faults."""
        request = urllib.request.Request(self.url + "/__faults__", data=json.dumps(spec).encode(), method="POST")
        urllib.request.urlopen(request, timeout=10).read()

    def stats(self) -> dict:
        """most_in_flight: the most statements that ran at once since the server started; statements: how many ran;
        last_statements: the first words of the last 50."""
        return json.loads(urllib.request.urlopen(self.url + "/__stats__", timeout=10).read())


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

    def execute(self, sql: str) -> str:
        """A statement run directly on the server; its answer."""
        request = urllib.request.Request(self.http_url + "/", data=sql.encode(), headers={
            "X-ClickHouse-User": self.user, "X-ClickHouse-Key": self.password})
        return urllib.request.urlopen(request, timeout=30).read().decode()

    def select(self, sql: str) -> list[dict]:
        """The rows of a query, each a dict (FORMAT JSONEachRow is added)."""
        return [json.loads(line) for line in self.execute(sql + " FORMAT JSONEachRow").splitlines()]

    def state_uri(self, database: str = "default") -> str:
        user = urllib.parse.quote(self.user, safe="")
        password = urllib.parse.quote(self.password, safe="")
        return f"clickhouse://{user}:{password}@{self.host}:{self.port}/{database}"
