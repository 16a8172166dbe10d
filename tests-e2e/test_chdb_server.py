"""The local chDB server speaks ClickHouse's HTTP interface as real clients use it."""
from __future__ import annotations

import base64
import concurrent.futures
import gzip
import json
import os
import pathlib
import ssl
import struct
import subprocess
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
import uuid
from http.client import HTTPConnection

import clickhouse_connect
import pytest

from chdb_server import blocks

REPO = pathlib.Path(__file__).resolve().parent.parent
JAR = REPO / "target" / "meltano-clickhouse-bridge.jar"


def http(url, sql=None, *, params="", headers=None, data=None, context=None):
    body = data if data is not None else (sql.encode() if sql is not None else None)
    request = urllib.request.Request(url + "/" + (("?" + params) if params else ""), data=body, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30, context=context) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


@pytest.fixture
def server(local_clickhouse):
    local_clickhouse.start()
    return local_clickhouse


def test_ping_and_root(server):
    assert urllib.request.urlopen(server.url + "/ping").read() == b"Ok.\n"
    assert urllib.request.urlopen(server.url + "/").read() == b"Ok.\n"


def test_ddl_insert_final_delete_and_headers(server):
    url = server.url
    assert http(url, "CREATE TABLE t (k String, v UInt64) ENGINE = ReplacingMergeTree(v) ORDER BY k")[0] == 200
    status, headers, _ = http(url, "INSERT INTO t VALUES ('a', 1), ('a', 2), ('b', 1)")
    assert status == 200
    assert json.loads(headers["X-ClickHouse-Summary"])["written_rows"] == "3"
    for name in ("X-ClickHouse-Query-Id", "X-ClickHouse-Format", "X-ClickHouse-Timezone",
                 "X-ClickHouse-Server-Display-Name"):
        assert name in headers
    assert http(url, "SELECT k, v FROM t FINAL ORDER BY k")[2] == b"a\t2\nb\t1\n"
    assert http(url, "DELETE FROM t WHERE k = 'a'")[0] == 200
    assert http(url, "SELECT k FROM t FINAL FORMAT JSONEachRow")[2] == b'{"k":"b"}\n'
    # SQL in the URL, data in the body
    status, _, _ = http(url, params="query=" + urllib.parse.quote("INSERT INTO t FORMAT TabSeparated"),
                        data=b"c\t5\n")
    assert status == 200
    assert http(url, params="query=" + urllib.parse.quote("SELECT v FROM t WHERE k = 'c'"))[2] == b"5\n"


def test_formats_and_empty_results_keep_their_header(server):
    status, headers, body = http(server.url, "SELECT 1 AS x WHERE 0",
                                 headers={"X-ClickHouse-Format": "RowBinaryWithNamesAndTypes"})
    assert status == 200 and headers["X-ClickHouse-Format"] == "RowBinaryWithNamesAndTypes"
    assert body == b"\x01\x01x\x05UInt8"
    assert http(server.url, "SELECT 1 AS x", params="default_format=CSV")[2] == b"1\n"
    assert http(server.url, "SELECT 1 AS x FORMAT JSONEachRow", params="default_format=CSV")[2] == b'{"x":1}\n'


def test_errors_carry_the_real_servers_status_code_and_body(server):
    status, headers, body = http(server.url, "SELECT * FROM missing_table")
    assert status == 404 and headers["X-ClickHouse-Exception-Code"] == "60"
    assert body.startswith(b"Code: 60. DB::Exception: ") and b"(UNKNOWN_TABLE)" in body
    status, headers, body = http(server.url, "SELEC 1")
    assert status == 400 and headers["X-ClickHouse-Exception-Code"] == "62"


def test_a_body_of_several_statements_is_refused_and_runs_none(server):
    """As a real server over HTTP: one statement per request (a trailing `;` is fine), so an injection that ends a
    statement and starts another fails here as it would there."""
    name = "multi_" + uuid.uuid4().hex[:8]
    status, headers, body = http(server.url, f"CREATE DATABASE {name}_a; CREATE DATABASE {name}_b")
    assert status == 400 and headers["X-ClickHouse-Exception-Code"] == "62", body
    assert b"Multi-statements are not allowed" in body
    assert http(server.url, f"SELECT count() FROM system.databases WHERE name LIKE '{name}%'")[2] == b"0\n"
    assert http(server.url, "SELECT 'a;b' ; -- a comment after the end")[2] == b"a;b\n"
    status, _, body = http(server.url, "SELECT 1 /* c */ ;")
    assert status == 200 and body == b"1\n"


def test_query_and_parameters_as_multipart_form_fields(server):
    """clickhouse-connect sends parameters over ~4 KB as multipart form data instead of in the URL."""
    value = "x" * 10_000 + "'é"
    client = clickhouse_connect.get_client(host="127.0.0.1", port=server.port, username="default", password="")
    assert client.query("SELECT length({v:String}), rightUTF8({v:String}, 2)", parameters={"v": value}).result_rows == [
        (len(value.encode()), "'é")]
    client.form_encode_query_params = True  # small ones too
    assert client.query("SELECT {n:UInt8} + 1", parameters={"n": 41}).result_rows == [(42,)]


def test_settings_per_query_and_unknown_setting(server):
    assert http(server.url, "SELECT getSetting('max_threads')", params="max_threads=3")[2] == b"3\n"
    assert http(server.url, "SELECT getSetting('max_threads') = 3")[2] == b"0\n"  # only for that query
    status, headers, body = http(server.url, "SELECT 1", params="no_such_setting=1")
    assert status == 404 and headers["X-ClickHouse-Exception-Code"] == "115"
    assert b"UNKNOWN_SETTING" in body


def test_authentication(local_clickhouse):
    local_clickhouse.password = "pa55 word"
    local_clickhouse.start()
    url = local_clickhouse.url
    basic = base64.b64encode(b"default:pa55 word").decode()
    assert http(url, "SELECT 1", headers={"Authorization": "Basic " + basic})[2] == b"1\n"
    assert http(url, "SELECT 1", headers={"X-ClickHouse-User": "default", "X-ClickHouse-Key": "pa55 word"})[2] == b"1\n"
    assert http(url, "SELECT 1", params="user=default&password=pa55%20word")[2] == b"1\n"
    status, headers, body = http(url, "SELECT 1", headers={"X-ClickHouse-User": "default", "X-ClickHouse-Key": "bad"})
    assert status == 403 and headers["X-ClickHouse-Exception-Code"] == "516"
    assert b"AUTHENTICATION_FAILED" in body
    assert http(url, "SELECT 1")[0] == 403


def test_compressed_answers_and_requests(server):
    status, _, body = http(server.url, "SELECT number FROM numbers(100000) FORMAT TabSeparated", params="compress=1")
    assert status == 200
    assert blocks.decompress(body) == "".join(f"{i}\n" for i in range(100000)).encode()
    framed = blocks.compress(b"SELECT 42")
    assert http(server.url, params="decompress=1", data=framed)[2] == b"42\n"


@pytest.mark.parametrize("compress", [False, True])
def test_clickhouse_connect(server, compress):
    client = clickhouse_connect.get_client(host="127.0.0.1", port=server.port, username="default", password="",
                                           compress=compress)
    client.command("CREATE TABLE cc (id UInt32, name String) ENGINE = MergeTree ORDER BY id")
    rows = [[i, f"name {i} 'é\\"] for i in range(5000)]
    client.insert("cc", rows, column_names=["id", "name"])  # Native, in the body after the query
    assert client.query("SELECT id, name FROM cc ORDER BY id").result_rows == [tuple(r) for r in rows]
    assert client.command("SELECT count() FROM cc") == 5000
    assert client.query("SELECT id FROM cc WHERE id > 5000").result_rows == []
    assert client.command("SELECT getSetting('max_threads')", settings={"max_threads": 2}) == 2
    with pytest.raises(Exception, match="UNKNOWN_TABLE"):
        client.query("SELECT * FROM nope")


def test_official_java_driver_with_default_settings(server):
    """The JDBC v2 driver, as shipped in the bridge jar, with no settings changed: DDL, INSERT, FINAL, DELETE, error."""
    assert JAR.exists(), "build the bridge first: ./mvnw package"
    program = pathlib.Path(__file__).parent / "java" / "JdbcRoundTrip.java"
    result = subprocess.run(["java", "-cp", str(JAR), str(program), f"jdbc:clickhouse:{server.url}/default"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().splitlines() == ["created", "inserted 3", "final a=2 b=1", "deleted", "error 60"]


def test_data_survives_a_restart(server):
    http(server.url, "CREATE TABLE kept (x UInt8) ENGINE = MergeTree ORDER BY x")
    http(server.url, "INSERT INTO kept VALUES (7)")
    server.restart()
    assert http(server.url, "SELECT x FROM kept")[2] == b"7\n"


def test_tls(local_clickhouse):
    local_clickhouse.tls = True
    local_clickhouse.start()
    assert local_clickhouse.url.startswith("https://")
    context = ssl.create_default_context(cafile=local_clickhouse.certificate)
    assert http(local_clickhouse.url, "SELECT 1", context=context)[2] == b"1\n"
    with pytest.raises(urllib.error.URLError):
        http(local_clickhouse.url, "SELECT 1")  # untrusted without the certificate


def test_fault_switches(server):
    server.faults(fail_next=2, fail_code=210)
    assert http(server.url, "SELECT 1")[1]["X-ClickHouse-Exception-Code"] == "210"
    assert http(server.url, "SELECT 1")[0] == 500
    assert http(server.url, "SELECT 1")[2] == b"1\n"
    server.faults(drop_next=1)
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        http(server.url, "SELECT 1")
    assert http(server.url, "SELECT 1")[2] == b"1\n"


def test_statements_from_two_clients_run_at_the_same_time(server):
    """Each statement reports when it started, then sleeps 1.5 s: the second started before the first could end."""
    def started():
        return int(http(server.url, "SELECT toUnixTimestamp64Micro(now64(6)), sleep(1.5)")[2].split()[0])

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        first, second = sorted(pool.map(lambda _: started(), range(2)))
    assert second < first + 1_500_000


def test_sixteen_clients_with_mixed_statements_get_their_own_answers(server):
    """Inserts, FINAL selects, per-request databases, settings and parameters from 16 keep-alive clients at once."""
    for d in range(4):
        http(server.url, f"CREATE DATABASE db{d}")
        http(server.url, f"CREATE TABLE db{d}.t (client UInt32, i UInt32) ENGINE = ReplacingMergeTree ORDER BY (client, i)")
    default_threads = http(server.url, "SELECT getSetting('max_threads')")[2]

    def client(n):
        connection = HTTPConnection("127.0.0.1", server.port, timeout=60)

        def ask(sql, params="", headers=None):
            connection.request("POST", "/?" + params, body=sql.encode(), headers=headers or {})
            response = connection.getresponse()
            body = response.read()
            assert response.status == 200, body
            return body

        own = {"X-ClickHouse-Database": f"db{n % 4}"}
        for i in range(200):
            kind = i % 4
            if kind == 0:
                ask(f"INSERT INTO t FORMAT TabSeparated\n{n}\t{i}\n", headers=own)
            elif kind == 1:
                assert ask(f"SELECT count() FROM t FINAL WHERE client = {n}", headers=own) == f"{i // 4 + 1}\n".encode()
            elif kind == 2:
                size = 1000 + n * 1000 + i
                answer = ask("SELECT currentDatabase(), getSetting('max_block_size')",
                             params=f"database=db{(n + i) % 4}&max_block_size={size}")
                assert answer == f"db{(n + i) % 4}\t{size}\n".encode()
            else:
                answer = ask("SELECT {x:UInt32} * 2, getSetting('max_threads'), currentDatabase()",
                             params=f"param_x={n * 1000 + i}")
                assert answer == f"{(n * 1000 + i) * 2}\t{default_threads.decode().strip()}\tdefault\n".encode()
        connection.close()
        return n

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        assert sorted(pool.map(client, range(16))) == list(range(16))
    for d in range(4):
        assert http(server.url, f"SELECT count() FROM db{d}.t FINAL")[2] == b"200\n"  # 4 clients x 50 inserts
    assert server.stats()["most_in_flight"] >= 2


def test_sixty_four_clients_connect_at_once(server):
    barrier = threading.Barrier(64)

    def client(n):
        barrier.wait()
        return http(server.url, f"SELECT {n}")[2]

    with concurrent.futures.ThreadPoolExecutor(64) as pool:
        assert list(pool.map(client, range(64))) == [f"{n}\n".encode() for n in range(64)]


def test_a_clients_own_use_and_set_stay_in_its_request(server):
    http(server.url, "CREATE DATABASE other")
    for _ in range(3):  # whichever pooled session runs them
        assert http(server.url, "USE other")[0] == 200
        assert http(server.url, "SET max_threads = 3")[0] == 200
        assert http(server.url, "SELECT currentDatabase(), getSetting('max_threads') = 3")[2] == b"default\t0\n"


@pytest.mark.parametrize("body, rows", [
    (b"INSERT INTO d FORMAT TabSeparated\n1\tone\n2\ttwo\n", [(1, "one"), (2, "two")]),
    (b"INSERT INTO d (k, v) FORMAT JSONEachRow {\"k\": 1, \"v\": \"FORMAT x\"}\n", [(1, "FORMAT x")]),
    (b"INSERT INTO d SETTINGS max_insert_block_size = 10 FORMAT CSV\r\n1,\"a,b\"\n", [(1, "a,b")]),
    (b"/* FORMAT */ INSERT INTO `d` (`k`, v) -- FORMAT\n FORMAT RowBinary\n" + struct.pack("<IB", 7, 3) + b"\x00\n'",
     [(7, "\x00\n'")]),
    (b"INSERT INTO d VALUES (5, 'FORMAT Native')", [(5, "FORMAT Native")]),
    (b"INSERT INTO d SELECT 6, 'x' FORMAT Native", [(6, "x")]),
])
def test_an_inserts_data_follows_its_query_in_the_body(server, body, rows):
    http(server.url, "CREATE TABLE d (k UInt32, v String) ENGINE = MergeTree ORDER BY k")
    status, _, answer = http(server.url, data=body)
    assert status == 200, answer
    assert http(server.url, "SELECT k, v FROM d ORDER BY k FORMAT JSONCompactEachRow")[2] == b"".join(
        json.dumps([k, v]).encode() + b"\n" for k, v in rows)


def test_an_inserts_query_in_the_url_and_its_data_in_the_body(server):
    http(server.url, "CREATE TABLE u (k UInt32, v String) ENGINE = MergeTree ORDER BY k")
    query = urllib.parse.quote("INSERT INTO u FORMAT RowBinary")
    assert http(server.url, params=f"query={query}", data=struct.pack("<IB", 9, 2) + b"ab")[0] == 200
    query = urllib.parse.quote("INSERT INTO u VALUES")
    assert http(server.url, params=f"query={query}", data=b"(10, 'cd')")[0] == 200
    assert http(server.url, "SELECT k, v FROM u ORDER BY k")[2] == b"9\tab\n10\tcd\n"


def test_a_url_longer_than_16_kib_is_refused_as_a_real_server_refuses_one_past_http_max_uri_size(server):
    """400 without a ClickHouse error, after the body was read (an answer, not a broken pipe); the longest URI seen is
    in the stats. 16 KiB is stricter than a real server's 1 MiB default: a statement growing in the URL fails here."""
    http(server.url, "CREATE TABLE w (k String) ENGINE = MergeTree ORDER BY k")
    ids = ", ".join(f"'{i:06}'" for i in range(2000))  # ~18 KB of SQL
    long_query = urllib.parse.quote(f"INSERT INTO w SELECT * FROM input('k String') WHERE k NOT IN ({ids}) FORMAT TSV")
    status, headers, body = http(server.url, params=f"query={long_query}", data=b"x\n" * 100_000)
    assert status == 400 and "X-ClickHouse-Exception-Code" not in headers, (status, headers, body)
    assert b"http_max_uri_size" in body
    short_query = urllib.parse.quote("INSERT INTO w SELECT * FROM input('k String') FORMAT TSV")
    assert http(server.url, params=f"query={short_query}", data=b"x\n")[0] == 200
    assert http(server.url, "SELECT count() FROM w")[2] == b"1\n"
    assert server.stats()["longest_uri"] > 16384


def test_answers_compressed_as_the_client_accepts(server):
    status, headers, body = http(server.url, "SELECT 'hello'", params="enable_http_compression=1",
                                 headers={"Accept-Encoding": "br;q=1.0, gzip"})
    assert status == 200 and headers["Content-Encoding"] == "gzip"
    assert gzip.decompress(body) == b"hello\n"
    assert "Content-Encoding" not in http(server.url, "SELECT 1", headers={"Accept-Encoding": "gzip"})[1]


def test_keeper_map_without_a_keeper_is_refused_as_on_a_real_server(server):
    status, headers, body = http(server.url, "CREATE TABLE km (k String, v String) ENGINE = KeeperMap('/km') PRIMARY KEY k")
    assert headers["X-ClickHouse-Exception-Code"] == "36" and b"keeper_map_path_prefix" in body


def test_keeper_map_strict_insert_and_two_servers_on_one_keeper(keeper_clickhouses):
    first, second = (f"{e.http_url}" for e in keeper_clickhouses)
    auth = [{"Authorization": "Basic " + base64.b64encode(f"{e.user}:{e.password}".encode()).decode()}
            for e in keeper_clickhouses]
    path = "/test_" + os.urandom(4).hex()
    for url, headers in zip((first, second), auth):
        ddl = f"CREATE TABLE km{path[6:]} (k String, v String) ENGINE = KeeperMap('{path}') PRIMARY KEY k"
        assert http(url, ddl, headers=headers)[0] == 200
    table = f"km{path[6:]}"
    assert http(first, f"INSERT INTO {table} VALUES ('a', 'from first')", headers=auth[0])[0] == 200
    status, headers, body = http(second, f"INSERT INTO {table} VALUES ('a', 'from second')",
                                 params="keeper_map_strict_mode=1", headers=auth[1])
    assert headers["X-ClickHouse-Exception-Code"] == "999" and b"Node exists" in body
    assert http(second, f"INSERT INTO {table} VALUES ('b', 'from second')", params="keeper_map_strict_mode=1",
                headers=auth[1])[0] == 200
    for url, headers in zip((first, second), auth):
        assert http(url, f"SELECT k, v FROM {table} ORDER BY k", headers=headers)[2] == b"a\tfrom first\nb\tfrom second\n"


def test_start_script_exports_the_real_credentials_and_stop_script_stops_all(tmp_path):
    env = dict(os.environ, CHDB_SERVER_PASSWORD="s3cret /:@", PYTHON=sys.executable)
    started = subprocess.run([str(REPO / "tests-e2e" / "start-clickhouse.sh"), "--keeper", str(tmp_path)],
                             env=env, capture_output=True, text=True, timeout=300)
    pids = [int(p.read_text()) for p in tmp_path.glob("*.pid")]
    try:
        assert started.returncode == 0, started.stderr
        exports = dict(line.removeprefix("export ").split("=", 1) for line in started.stdout.splitlines())
        url = urllib.parse.urlsplit(exports["CLICKHOUSE_URL"])
        assert urllib.parse.unquote(url.password) == "s3cret /:@"
        assert exports["CLICKHOUSE_KEEPER_URLS"] == exports["CLICKHOUSE_URL"]
        basic = base64.b64encode(f"default:{urllib.parse.unquote(url.password)}".encode()).decode()
        plain = f"http://{url.hostname}:{url.port}"
        assert http(plain, "SELECT 1", headers={"Authorization": "Basic " + basic})[2] == b"1\n"
        assert len(pids) == 2  # the server and its ZooKeeper
    finally:
        subprocess.run([str(REPO / "tests-e2e" / "stop-clickhouse.sh"), str(tmp_path)], check=True, timeout=120)
    for pid in pids:
        assert not pathlib.Path(f"/proc/{pid}").exists()
    assert _zookeepers_of(tmp_path) == []


def _zookeepers_of(data_dir):
    """The ZooKeeper JVMs whose data lies in data_dir (other test sessions may run ZooKeepers of their own)."""
    lines = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout.splitlines()
    return [line for line in lines if "ZooKeeperServerMain" in line and str(data_dir) in line]
