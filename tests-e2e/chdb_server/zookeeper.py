"""python -m chdb_server.zookeeper --data DIR [--port N]

Runs a standalone Apache ZooKeeper (Maven Central's, resolved once through the repository's Maven wrapper) for local
ClickHouse servers with KeeperMap tables. When it answers, prints two lines: its address (host:port) and the path of
a ClickHouse config that points an engine at it (`python -m chdb_server --config PATH`). SIGTERM or SIGINT stop it;
the ZooKeeper JVM also ends when this process dies, however it dies.
"""
import argparse
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
POM = os.path.join(REPO, "tests-e2e", "zookeeper", "pom.xml")
CLASSPATH = os.path.join(REPO, "tests-e2e", "zookeeper", "target", "classpath.txt")
# Every server given this config sees the same KeeperMap tables: the prefix is the same for all.
CONFIG = """<clickhouse>
  <zookeeper><node><host>{host}</host><port>{port}</port></node></zookeeper>
  <keeper_map_path_prefix>/keeper_map_tables</keeper_map_path_prefix>
</clickhouse>
"""


def classpath() -> str:
    if not os.path.exists(CLASSPATH):
        partial = f"{CLASSPATH}.{os.getpid()}"
        subprocess.run([os.path.join(REPO, "mvnw"), "-q", "-B", "-ntp", "-f", POM, "dependency:build-classpath",
                        f"-Dmdep.outputFile={partial}"], check=True, stdout=sys.stderr)
        os.replace(partial, CLASSPATH)
    with open(CLASSPATH) as f:
        return f.read().strip()


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
