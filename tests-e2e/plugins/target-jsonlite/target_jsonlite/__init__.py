"""A Singer target for tests, without dependencies: RECORDs are appended to `path` (config), STATEs echoed."""
import argparse
import json
import sys


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", required=False)
    parser.add_argument("--about", action="store_true")
    args, _ = parser.parse_known_args()
    if args.about:
        print(json.dumps({"name": "target-jsonlite", "capabilities": []}))
        return
    config = {}
    if args.config:
        with open(args.config) as f:
            config = json.load(f)
    with open(config.get("path", "output.jsonl"), "a") as out:
        for line in sys.stdin:
            message = json.loads(line)
            if message["type"] == "RECORD":
                out.write(json.dumps(message["record"]) + "\n")
                out.flush()
            elif message["type"] == "STATE":
                print(json.dumps(message["value"]), flush=True)
