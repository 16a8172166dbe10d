"""The ClickHouse engine (chDB) behind the HTTP server: a pool of sessions on one data path, one per statement in
flight, so that statements run at the same time as on a real server."""
import collections
import dataclasses
import os
import re
import tempfile
import threading
import uuid
import xml.etree.ElementTree as ElementTree

from chdb import session

from .statement import Statement

_CODE = re.compile(r"Code: (\d+)\. DB::Exception: ")
_SETTING_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# A client's own USE or SET changes the session it ran on in ways the pool does not track: that session is closed.
_CHANGES_SESSION = re.compile(rb"\s*(USE|SET)\b", re.IGNORECASE)


class ClickHouseError(Exception):
    """An error the way ClickHouse reports it: a numeric code and `Code: N. DB::Exception: …`."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


@dataclasses.dataclass
class Result:
    data: bytes
    format: str
    read_rows: int
    read_bytes: int
    written_rows: int
    written_bytes: int
    elapsed_ns: int


def _error(exc: Exception) -> ClickHouseError:
    text = str(exc)
    # chDB sometimes wraps the same exception twice: keep the innermost statement.
    matches = list(_CODE.finditer(text))
    if not matches:
        return ClickHouseError(1001, f"Code: 1001. DB::Exception: {text}. (STD_EXCEPTION)")
    inner = matches[-1]
    message = text[inner.start():]
    message = re.sub(r"\s*\(version [^)]*\)\.?", "", message).strip()
    return ClickHouseError(int(inner.group(1)), message)


def _literal(value: str) -> str:
    if re.fullmatch(r"-?\d+(\.\d+)?", value):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


class _Session:
    """A chDB session set up once for one database and one set of settings, and only ever used with those.

    Changing a chDB session's settings opens a new Keeper session each time (and leaves the old one to expire), so a
    session is never switched from one request's settings to another's: requests with the same database and settings
    share pooled sessions, and the pool closes the least recently used ones beyond MAX_IDLE."""

    def __init__(self, path: str, database: str, settings: dict):
        self._chdb = session.Session(path)
        self.key = _key(database, settings)
        try:
            self.run(f"USE `{database.replace('`', '``')}`", "TabSeparated")
            for name, value in settings.items():
                self.run(f"SET {name} = {_literal(value)}", "TabSeparated")
        except ClickHouseError:
            self.close()
            raise

    def close(self):
        self._chdb.close()

    def run(self, sql: str, fmt: str, params=None):
        try:
            return self._chdb.query(sql, fmt, params=params)
        except Exception as exc:  # chDB raises RuntimeError/ChdbError with ClickHouse's text
            raise _error(exc) from None


def _key(database: str, settings: dict):
    return database, tuple(sorted(settings.items()))


def _own_config(config: str, data_dir: str) -> str:
    """The config with a Keeper sessions path of this server's own, written into its data directory.

    A ClickHouse server registers its Keeper session under `<sessions_path>/<zookeeper name>/<server UUID>` and ends
    the session of anyone else registered there. chDB has no server UUID (all zeros), so two chDB servers on one
    ZooKeeper would end each other's sessions over and over ("Session was killed", then "Connection loss")."""
    tree = ElementTree.parse(config)
    zookeeper = tree.getroot().find("zookeeper")
    if zookeeper is not None and zookeeper.find("sessions_path") is None:
        ElementTree.SubElement(zookeeper, "sessions_path").text = f"/clickhouse/sessions/chdb-{uuid.uuid4()}"
    own = os.path.join(data_dir, "engine-config.xml")
    tree.write(own)
    return own


class Engine:
    MAX_IDLE = 64

    def __init__(self, data_dir: str, config: str | None = None):
        os.makedirs(data_dir, exist_ok=True)
        self._path = f"file:{data_dir}?config-file={_own_config(config, data_dir)}" if config else data_dir
        self._idle: list[_Session] = []  # least recently used first
        self._lock = threading.Lock()  # guards the pool, never held while a statement runs
        self._spool = os.path.join(data_dir, "insert-spool")  # INSERT data on its way to the engine
        os.makedirs(self._spool, exist_ok=True)
        self.most_in_flight = 0
        self.sessions_opened = 0
        self.statements = 0  # every statement run, counted: what a client's command costs in round trips
        self.last_statements: collections.deque[str] = collections.deque(maxlen=50)  # their first words
        self._in_flight = 0
        probe = self._take("default", {})
        self.version = probe.run("SELECT version()", "TabSeparated").bytes().decode().strip()
        self.timezone = probe.run("SELECT timezone()", "TabSeparated").bytes().decode().strip()
        self._give_back(probe)

    def close(self):
        with self._lock:
            for s in self._idle:
                s.close()
            self._idle.clear()

    def _take(self, database: str, settings: dict) -> _Session:
        key = _key(database, settings)
        with self._lock:
            for i in range(len(self._idle) - 1, -1, -1):
                if self._idle[i].key == key:
                    return self._idle.pop(i)
            self.sessions_opened += 1
        return _Session(self._path, database, settings)  # ~1 ms once the engine is up

    def _give_back(self, s: _Session):
        with self._lock:
            self._idle.append(s)
            surplus = self._idle[:-self.MAX_IDLE]
            del self._idle[:-self.MAX_IDLE]
        for old in surplus:
            old.close()

    def execute(self, body: bytes, *, database: str = "default", fmt: str = "TabSeparated",
                settings: dict | None = None, params: dict | None = None) -> Result:
        """Runs one request's statement (query text, then an INSERT's data, as a real server reads a body)."""
        settings = settings or {}
        for name in settings:
            if not _SETTING_NAME.match(name):
                raise ClickHouseError(115, f"Code: 115. DB::Exception: Unknown setting '{name}'. (UNKNOWN_SETTING)")
        statement = Statement.parse(body)
        second = statement.second_statement_at
        if second is not None:
            raise ClickHouseError(62, f"Code: 62. DB::Exception: Syntax error (Multi-statements are not allowed): "
                                      f"failed at position {second + 1}: {statement.text[second:second + 30]!r}. "
                                      f"(SYNTAX_ERROR)")
        query_settings = None
        if statement.data is not None:
            # An INSERT's settings go into its own SETTINGS clause, not into the session: each state INSERT has a
            # deduplication token of its own, and a session per token would open a chDB session per INSERT.
            query_settings = {name: _literal(value) for name, value in settings.items()}
            settings = {}
        s = self._take(database, settings)
        keep = not _CHANGES_SESSION.match(body)
        spool = None
        with self._lock:
            self._in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self._in_flight)
            self.statements += 1
            self.last_statements.append(" ".join(statement.text[:120].split()))
        try:
            if statement.data is not None:
                fd, spool = tempfile.mkstemp(dir=self._spool)
                with os.fdopen(fd, "wb") as f:
                    f.write(statement.data)
            res = s.run(statement.sql(infile=spool, settings=query_settings), statement.output_format or fmt, params)
            return Result(res.bytes(), statement.output_format or fmt, res.rows_read(), res.bytes_read(),
                          res.rows_written(), res.bytes_written(), int(res.elapsed() * 1e9))
        finally:
            with self._lock:
                self._in_flight -= 1
            if keep:
                self._give_back(s)
            else:
                s.close()
            if spool:
                os.unlink(spool)
