"""ClickHouse's HTTP interface (the parts real drivers use) in front of an Engine."""
import base64
import email
import email.policy
import gzip
import hmac
import json
import re
import threading
import time
import uuid
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlsplit

import lz4.frame
from backports import zstd  # clickhouse-connect's dependency

from . import blocks
from .engine import ClickHouseError, Engine

# URL parameters the HTTP handler itself reads; every other one is a ClickHouse setting.
HANDLER_PARAMS = {
    "query", "database", "default_format", "user", "password", "query_id", "session_id", "session_timeout",
    "session_check", "compress", "decompress", "buffer_size", "wait_end_of_query", "quota_key", "stacktrace",
    "role", "client_protocol_version", "close_session", "default_session_timeout",
}

# Status codes the real server gives (src/Server/HTTP/exceptionCodeToHTTPStatus.cpp), for the codes seen here.
_STATUS = {194: 401, 192: 403, 193: 403, 516: 403, 497: 403, 62: 400, 6: 400, 27: 400, 36: 400, 53: 400,
           117: 400, 60: 404, 46: 404, 47: 404, 50: 404, 56: 404, 81: 404, 115: 404, 73: 404, 48: 501,
           159: 408, 209: 503}
_ERROR_NAMES = {497: "ACCESS_DENIED", 516: "AUTHENTICATION_FAILED", 210: "NETWORK_ERROR", 242: "TABLE_IS_READ_ONLY", 999: "KEEPER_EXCEPTION",
                159: "TIMEOUT_EXCEEDED", 209: "SOCKET_TIMEOUT", 3: "UNEXPECTED_END_OF_FILE"}


class Faults:
    """Switches for reliability tests, set through POST /__faults__ with a JSON object. The next queries: fail_next
    fail with fail_code; drop_next lose their connection before they run; lose_answer_next run, then lose their
    connection before the answer (as when a network or proxy fails after the server got the query); with
    lose_answer_matching (a regular expression), only the next queries it finds in count for lose_answer_next. Every
    query that fail_matching (a regular expression, "" for none) finds in fails with fail_code, e.g. a statement the
    user may not run."""

    def __init__(self):
        self._lock = threading.Lock()
        self.fail_next = 0
        self.fail_code = 210
        self.drop_next = 0
        self.lose_answer_next = 0
        self.lose_answer_matching = ""
        self.fail_matching = ""
        self.latency_ms = 0

    def update(self, spec: dict):
        with self._lock:
            self.fail_next = int(spec.get("fail_next", self.fail_next))
            self.fail_code = int(spec.get("fail_code", self.fail_code))
            self.drop_next = int(spec.get("drop_next", self.drop_next))
            self.lose_answer_next = int(spec.get("lose_answer_next", self.lose_answer_next))
            self.fail_matching = str(spec.get("fail_matching", self.fail_matching))
            self.lose_answer_matching = str(spec.get("lose_answer_matching", self.lose_answer_matching))
            self.latency_ms = int(spec.get("latency_ms", self.latency_ms))

    def refusal(self, query: str) -> int | None:
        """The code a query fails with because fail_matching finds in it, else None."""
        with self._lock:
            return self.fail_code if self.fail_matching and re.search(self.fail_matching, query) else None

    def loses_answer(self, query: str) -> bool:
        """Whether this query, which lose_answer_matching finds in, is one of the next lose_answer_next."""
        with self._lock:
            if self.lose_answer_next > 0 and self.lose_answer_matching and re.search(self.lose_answer_matching, query):
                self.lose_answer_next -= 1
                return True
            return False

    def take(self):
        """What to do to the next query: None, "drop", "lose_answer" or an error code."""
        with self._lock:
            if self.drop_next > 0:
                self.drop_next -= 1
                return "drop"
            if self.lose_answer_next > 0 and not self.lose_answer_matching:
                self.lose_answer_next -= 1
                return "lose_answer"
            if self.fail_next > 0:
                self.fail_next -= 1
                return self.fail_code
            return None


# HTTP Content-Encodings: of request bodies, and of answers to `enable_http_compression=1` as a real server chooses
# them from Accept-Encoding.
_DECODERS = {"gzip": gzip.decompress, "deflate": zlib.decompress, "lz4": lz4.frame.decompress, "zstd": zstd.decompress}
_ENCODERS = {"gzip": gzip.compress, "deflate": zlib.compress, "lz4": lz4.frame.compress, "zstd": zstd.compress}


def _decode_body(raw: bytes, encoding: str) -> bytes:
    encoding = (encoding or "").strip().lower()
    if encoding in ("", "identity"):
        return raw
    if encoding not in _DECODERS:
        raise ClickHouseError(1001, f"Code: 1001. DB::Exception: Unknown Content-Encoding '{encoding}'. (STD_EXCEPTION)")
    return _DECODERS[encoding](raw)


def _accepted_encoding(accept: str) -> str | None:
    for item in accept.split(","):
        name = item.split(";")[0].strip().lower()
        if name in _ENCODERS:
            return name
    return None


def _form_fields(body: bytes, content_type: str) -> dict[str, str]:
    """The text fields of a multipart/form-data body: a real server takes `query` and `param_*` from them as from the
    URL (clickhouse-connect sends parameters over ~4 KB so). Files there are external tables, which this server lacks."""
    message = email.message_from_bytes(b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + body,
                                       policy=email.policy.HTTP)
    fields = {}
    for part in message.iter_parts():
        if part.get_filename() is not None:
            raise ClickHouseError(48, "Code: 48. DB::Exception: External tables are not supported by this test "
                                      "server. (NOT_IMPLEMENTED)")
        fields[part.get_param("name", header="content-disposition")] = part.get_payload(decode=True).decode()
    return fields


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "chdb-server"
    # Headers and body go out in separate writes: without this, Nagle plus the client's delayed ACK stall each
    # keep-alive answer by ~40 ms.
    disable_nagle_algorithm = True

    def log_message(self, format, *args):  # quiet: tests read stderr only on failure
        pass

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send(self, status: int, body: bytes, headers: dict):
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _credentials(self, params: dict):
        auth = self.headers.get("Authorization", "")
        if auth.startswith("Basic "):
            user, _, password = base64.b64decode(auth[6:]).decode().partition(":")
            return user, password
        if "X-ClickHouse-User" in self.headers:
            return self.headers["X-ClickHouse-User"], self.headers.get("X-ClickHouse-Key", "")
        return params.get("user", "default"), params.get("password", "")

    def do_GET(self):
        self._handle(b"")

    def do_POST(self):
        self._handle(self._read_body())

    def _handle(self, body: bytes):
        with self.server.stats_lock:
            self.server.longest_uri = max(self.server.longest_uri, len(self.path))
        if len(self.path) > self.server.max_uri_size:
            # As a real server past http_max_uri_size: 400, no ClickHouse error code; the body was read, so the client
            # gets this answer rather than a broken pipe.
            self.close_connection = True
            return self._send(400, f"Bad Request: the URI is longer than http_max_uri_size "
                                   f"({self.server.max_uri_size} bytes here)\n".encode(), {"Connection": "close"})
        url = urlsplit(self.path)
        params = dict(parse_qsl(url.query, keep_blank_values=True))
        if url.path == "/__faults__":
            self.server.faults.update(json.loads(body or b"{}"))
            return self._send(200, b"Ok.\n", {})
        if url.path == "/__stats__":
            engine = self.server.engine
            stats = {"most_in_flight": engine.most_in_flight, "sessions_opened": engine.sessions_opened,
                     "statements": engine.statements, "last_statements": list(engine.last_statements),
                     "longest_uri": self.server.longest_uri}
            return self._send(200, json.dumps(stats).encode(), {"Content-Type": "application/json"})
        if url.path in ("/ping",) or (url.path == "/" and "query" not in params and not body):
            return self._send(200, b"Ok.\n", {"Content-Type": "text/html; charset=UTF-8"})
        query_id = params.get("query_id") or str(uuid.uuid4())
        headers = {"X-ClickHouse-Query-Id": query_id, "X-ClickHouse-Timezone": self.server.engine.timezone,
                   "X-ClickHouse-Server-Display-Name": "chdb-server"}
        try:
            content_type = self.headers.get("Content-Type", "")
            if content_type.lower().startswith("multipart/form-data"):
                params.update(_form_fields(body, content_type))
                body = b""
            self._authenticate(params)
            fault = self.server.faults.take()
            if self.server.faults.latency_ms:
                time.sleep(self.server.faults.latency_ms / 1000)
            if fault == "drop":
                self.close_connection = True
                self.connection.shutdown(2)
                return
            if fault is not None and fault != "lose_answer":
                name = _ERROR_NAMES.get(fault, "INJECTED_FAULT")
                raise ClickHouseError(fault, f"Code: {fault}. DB::Exception: Injected fault. ({name})")
            self._query(params, body, headers, answer=fault != "lose_answer")
        except ClickHouseError as err:
            text = f"{err.message} (version {self.server.engine.version})\n".encode()
            headers["X-ClickHouse-Exception-Code"] = str(err.code)
            headers["Content-Type"] = "text/plain; charset=UTF-8"
            self._send(_STATUS.get(err.code, 500), text, headers)

    def _authenticate(self, params: dict):
        user, password = self._credentials(params)
        expected_user, expected_password = self.server.user, self.server.password
        if user != expected_user or not hmac.compare_digest(password.encode(), expected_password.encode()):
            raise ClickHouseError(516, f"Code: 516. DB::Exception: {user}: Authentication failed: password is "
                                       "incorrect, or there is no user with such name. (AUTHENTICATION_FAILED)")

    def _query(self, params: dict, body: bytes, headers: dict, answer: bool = True):
        if params.get("decompress") == "1":
            body = blocks.decompress(body)
        else:
            body = _decode_body(body, self.headers.get("Content-Encoding"))
        if "query" in params:  # as a real server: the parameter, a line break, then the body
            body = params["query"].encode() + b"\n" + body
        text = body.decode("utf-8", "replace")
        answer = answer and not self.server.faults.loses_answer(text)
        refused = self.server.faults.refusal(text)
        if refused is not None:
            raise ClickHouseError(refused, f"Code: {refused}. DB::Exception: Injected fault. "
                                           f"({_ERROR_NAMES.get(refused, 'INJECTED_FAULT')})")
        database = self.headers.get("X-ClickHouse-Database") or params.get("database") or "default"
        fmt = self.headers.get("X-ClickHouse-Format") or params.get("default_format") or "TabSeparated"
        settings = {k: v for k, v in params.items() if k not in HANDLER_PARAMS and not k.startswith("param_")}
        query_params = {k[6:]: v for k, v in params.items() if k.startswith("param_")}
        result = self.server.engine.execute(body, database=database, fmt=fmt, settings=settings, params=query_params)
        if not answer:
            self.close_connection = True
            self.connection.shutdown(2)
            return
        payload = result.data
        if params.get("compress") == "1":
            payload = blocks.compress(payload)
        elif params.get("enable_http_compression") == "1":
            encoding = _accepted_encoding(self.headers.get("Accept-Encoding", ""))
            if encoding:
                payload = _ENCODERS[encoding](payload)
                headers["Content-Encoding"] = encoding
        summary = {"read_rows": str(result.read_rows), "read_bytes": str(result.read_bytes),
                   "written_rows": str(result.written_rows), "written_bytes": str(result.written_bytes),
                   "total_rows_to_read": str(result.read_rows), "result_rows": str(result.written_rows or result.read_rows),
                   "result_bytes": str(result.written_bytes or len(result.data)),
                   "elapsed_ns": str(result.elapsed_ns)}
        headers.update({"X-ClickHouse-Format": result.format, "X-ClickHouse-Summary": json.dumps(summary),
                        "Content-Type": "application/octet-stream" if params.get("compress") == "1"
                        else "text/plain; charset=UTF-8"})
        self._send(200, payload, headers)


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64  # the listen backlog: the default 5 resets connections when 16 clients connect at once

    def __init__(self, address, engine: Engine, user: str, password: str, max_uri_size: int = 16384):
        super().__init__(address, Handler)
        self.max_uri_size = max_uri_size
        self.longest_uri = 0
        self.stats_lock = threading.Lock()
        self.engine = engine
        self.user = user
        self.password = password
        self.faults = Faults()
