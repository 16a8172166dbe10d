"""The local chDB server speaks ClickHouse's HTTP interface as real clients use it."""
from __future__ import annotations

import base64
import concurrent.futures
import json
import os
import pathlib
import ssl
import subprocess
import urllib.error
import urllib.parse
import urllib.request

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


def test_clickhouse_connect(server):
    client = clickhouse_connect.get_client(host="127.0.0.1", port=server.port, username="default", password="")
    client.command("CREATE TABLE cc (id UInt32, name String) ENGINE = MergeTree ORDER BY id")
    client.insert("cc", [[1, "one"], [2, "two"]], column_names=["id", "name"])
    assert client.query("SELECT id, name FROM cc ORDER BY id").result_rows == [(1, "one"), (2, "two")]
    assert client.query("SELECT id FROM cc WHERE id > 5").result_rows == []
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


def test_eight_concurrent_clients(server):
    def client(n):
        for i in range(200):
            status, _, body = http(server.url, f"SELECT {n} * 1000 + {i}")
            assert status == 200 and body == f"{n * 1000 + i}\n".encode()
        return n

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        assert sorted(pool.map(client, range(8))) == list(range(8))


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
