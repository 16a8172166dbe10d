"""python -m chdb_server --port 8123 --data DIR [--config FILE] [--user U] [--password P] [--tls [--cert C --key K]]

Prints one line, the server's URL, when it is ready; SIGTERM or SIGINT stop it cleanly.
"""
import argparse
import os
import signal
import ssl
import subprocess
import sys
import threading

from .engine import Engine
from .server import Server


def _self_signed(directory: str):
    cert, key = os.path.join(directory, "cert.pem"), os.path.join(directory, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", key, "-out", cert],
                   check=True, capture_output=True)
    return cert, key


def main(argv=None):
    parser = argparse.ArgumentParser(prog="chdb_server", description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8123, help="0 picks a free port")
    parser.add_argument("--data", required=True, help="directory holding the data; kept across restarts")
    parser.add_argument("--config", help="a ClickHouse server config file for the engine (e.g. <zookeeper>)")
    parser.add_argument("--user", default=os.environ.get("CHDB_SERVER_USER", "default"),
                        help="default: $CHDB_SERVER_USER, else default")
    parser.add_argument("--password", default=os.environ.get("CHDB_SERVER_PASSWORD", ""),
                        help="default: $CHDB_SERVER_PASSWORD, else empty")
    parser.add_argument("--tls", action="store_true", help="serve HTTPS (self-signed certificate unless --cert)")
    parser.add_argument("--max-uri-size", type=int, default=16384,
                        help="longest request URI in bytes, answered 400 above (a real server's http_max_uri_size: "
                             "1 MiB by default, 16 KiB on older releases; default here 16384)")
    parser.add_argument("--cert")
    parser.add_argument("--key")
    args = parser.parse_args(argv)

    engine = Engine(args.data, args.config)
    server = Server((args.host, args.port), engine, args.user, args.password, args.max_uri_size)
    scheme = "http"
    if args.tls:
        cert, key = (args.cert, args.key) if args.cert else _self_signed(args.data)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        scheme = "https"
        print(f"certificate: {cert}", file=sys.stderr, flush=True)

    stopping = threading.Event()

    def stop(signum, frame):
        if not stopping.is_set():
            stopping.set()
            threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"{scheme}://{args.host}:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
        engine.close()


if __name__ == "__main__":
    main()
