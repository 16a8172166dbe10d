"""One chDB session behind a lock: runs a statement with its database, settings and parameters."""
import dataclasses
import os
import re
import tempfile
import threading

from chdb import session

_CODE = re.compile(r"Code: (\d+)\. DB::Exception: ")
_INSERT_WITH_FORMAT = re.compile(r"^\s*(INSERT\s+INTO\s+.+?)\s+FORMAT\s+(\w+)\s*;?\s*$", re.IGNORECASE | re.DOTALL)
_TRAILING_FORMAT = re.compile(r"\bFORMAT\s+(\w+)\s*;?\s*$", re.IGNORECASE)
_SETTING_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


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


class Engine:
    def __init__(self, data_dir: str):
        os.makedirs(data_dir, exist_ok=True)
        self._session = session.Session(data_dir)
        self._lock = threading.Lock()
        self._spool = tempfile.mkdtemp(prefix="chdb-server-")
        self._database = None  # what the session has now: requests change only what differs
        self._settings: dict[str, str] = {}
        self.version = self._run("SELECT version()", "TabSeparated").bytes().decode().strip()
        self.timezone = self._run("SELECT timezone()", "TabSeparated").bytes().decode().strip()

    def close(self):
        with self._lock:
            self._session.close()

    def _run(self, sql, fmt, params=None):
        try:
            return self._session.query(sql, fmt, params=params)
        except Exception as exc:  # chDB raises RuntimeError/ChdbError with ClickHouse's text
            raise _error(exc) from None

    def execute(self, sql: str, *, data: bytes = b"", database: str = "default", fmt: str = "TabSeparated",
                settings: dict | None = None, params: dict | None = None) -> Result:
        """Runs one statement to its end. `data` is the INSERT's payload when the SQL came in the URL."""
        settings = settings or {}
        for name in settings:
            if not _SETTING_NAME.match(name):
                raise ClickHouseError(115, f"Code: 115. DB::Exception: Unknown setting '{name}'. (UNKNOWN_SETTING)")
        found = _TRAILING_FORMAT.search(sql[-512:])  # only the end can hold it; a state may make sql 20 MB long
        out_format = found.group(1) if found else fmt
        with self._lock:
            spool = None
            try:
                if data:
                    insert = _INSERT_WITH_FORMAT.match(sql)
                    if insert:
                        spool = os.path.join(self._spool, "body")
                        with open(spool, "wb") as f:
                            f.write(data)
                        sql = f"{insert.group(1)} FROM INFILE '{spool}' FORMAT {insert.group(2)}"
                    else:
                        sql = sql + "\n" + data.decode()
                self._switch(database, settings)
                if re.match(r"\s*USE\b", sql, re.IGNORECASE):
                    self._database = None  # a client's own USE: forget what we know of the session
                res = self._run(sql, out_format, params)
                return Result(res.bytes(), out_format, res.rows_read(), res.bytes_read(),
                              res.rows_written(), res.bytes_written(), int(res.elapsed() * 1e9))
            finally:
                if spool:
                    os.unlink(spool)

    def _switch(self, database: str, settings: dict):
        """Makes the session's database and settings this request's; only what differs is changed."""
        if database != self._database:
            self._database = None
            self._run(f"USE `{database.replace('`', '``')}`", "TabSeparated")
            self._database = database
        for name in [n for n in self._settings if n not in settings]:
            self._run(f"SET {name} = DEFAULT", "TabSeparated")
            del self._settings[name]
        for name, value in settings.items():
            if self._settings.get(name) != value:
                self._settings.pop(name, None)
                self._run(f"SET {name} = {_literal(value)}", "TabSeparated")
                self._settings[name] = value
