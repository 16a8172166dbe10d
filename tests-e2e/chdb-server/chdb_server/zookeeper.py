"""python -m chdb_server.zookeeper --data DIR [--port N]

Runs a standalone Apache ZooKeeper for local ClickHouse servers with KeeperMap tables. Its jars come from Maven
Central, downloaded once into a cache (CHDB_SERVER_CACHE, else ~/.cache/chdb-server; MAVEN_REPOSITORY_URL for a
mirror) and checked against Maven Central's SHA-1. When it answers, prints two lines: its address (host:port) and the
path of a ClickHouse config that points an engine at it (`python -m chdb_server --config PATH`). SIGTERM or SIGINT
stop it; the ZooKeeper JVM also ends when this process dies, however it dies.
"""
import argparse
import ctypes
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

# The standalone server and what it loads: ZooKeeper's own pom marks metrics-core and snappy-java optional, but
# the server needs them for its metrics and its snapshots; slf4j-simple gives it a log.
ARTIFACTS = [
    ("org.apache.zookeeper", "zookeeper", "3.9.5"),
    ("org.apache.zookeeper", "zookeeper-jute", "3.9.5"),
    ("org.apache.yetus", "audience-annotations", "0.12.0"),
    ("commons-io", "commons-io", "2.17.0"),
    ("io.dropwizard.metrics", "metrics-core", "4.2.40"),
    ("org.xerial.snappy", "snappy-java", "1.1.10.12"),
    ("org.slf4j", "slf4j-api", "2.0.20"),
    ("org.slf4j", "slf4j-simple", "2.0.20"),
]
# Every server given this config sees the same KeeperMap tables: the prefix is the same for all.
CONFIG = """<clickhouse>
  <zookeeper><node><host>{host}</host><port>{port}</port></node></zookeeper>
  <keeper_map_path_prefix>/keeper_map_tables</keeper_map_path_prefix>
</clickhouse>
"""


def classpath() -> str:
    cache = os.environ.get("CHDB_SERVER_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "chdb-server")
    repository = os.environ.get("MAVEN_REPOSITORY_URL", "https://repo.maven.apache.org/maven2").rstrip("/")
    folder = os.path.join(cache, "zookeeper")
    os.makedirs(folder, exist_ok=True)
    jars = []
    for group, artifact, version in ARTIFACTS:
        jar = os.path.join(folder, f"{artifact}-{version}.jar")
        if not os.path.exists(jar):
            url = f"{repository}/{group.replace('.', '/')}/{artifact}/{version}/{artifact}-{version}.jar"
            _download(url, jar)
        jars.append(jar)
    return os.pathsep.join(jars)


def _download(url: str, path: str):
    with urllib.request.urlopen(url, timeout=60) as response:
        data = response.read()
    with urllib.request.urlopen(url + ".sha1", timeout=60) as response:
        expected = response.read().decode().split()[0].strip()
    if hashlib.sha1(data).hexdigest() != expected:
        sys.exit(f"{url}: SHA-1 {hashlib.sha1(data).hexdigest()}, Maven Central says {expected}")
    partial = f"{path}.{os.getpid()}"  # several servers may start at once: each writes its own, then renames
    with open(partial, "wb") as f:
        f.write(data)
    os.replace(partial, path)


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def answers(host: str, port: int) -> bool:
    """ZooKeeper's `ruok` four-letter command: `imok` once it serves clients."""
    try:
        with socket.create_connection((host, port), timeout=1) as s:
            s.sendall(b"ruok")
            return s.recv(4) == b"imok"
    except OSError:
        return False


def _die_with_parent():
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def main(argv=None):
    parser = argparse.ArgumentParser(prog="chdb_server.zookeeper", description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--data", required=True, help="directory for ZooKeeper's data, its log and the config")
    args = parser.parse_args(argv)

    os.makedirs(args.data, exist_ok=True)
    port = args.port or free_port(args.host)
    java = os.path.join(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME") else shutil.which("java")
    command = [java, "-Xmx256m", "-Dzookeeper.admin.enableServer=false", "-Dzookeeper.4lw.commands.whitelist=ruok",
               "-Dorg.slf4j.simpleLogger.showDateTime=true",
               "-cp", classpath(), "org.apache.zookeeper.server.ZooKeeperServerMain", str(port),
               os.path.join(args.data, "data")]
    with open(os.path.join(args.data, "zookeeper.log"), "ab") as log:
        zookeeper = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                     preexec_fn=_die_with_parent)
    signal.signal(signal.SIGTERM, lambda *_: zookeeper.terminate())
    signal.signal(signal.SIGINT, lambda *_: zookeeper.terminate())
    deadline = time.monotonic() + 60
    while not answers(args.host, port):
        if zookeeper.poll() is not None or time.monotonic() > deadline:
            zookeeper.kill()
            sys.exit(f"ZooKeeper did not start; see {log.name}")
        time.sleep(0.1)
    config = os.path.join(args.data, "clickhouse-keeper.xml")
    with open(config, "w") as f:
        f.write(CONFIG.format(host=args.host, port=port))
    print(f"{args.host}:{port}", flush=True)
    print(config, flush=True)
    zookeeper.wait()


if __name__ == "__main__":
    main()
