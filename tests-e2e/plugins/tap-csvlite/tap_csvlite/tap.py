"""A tap for tests: the CSV at `path` (columns id,name) is stream `rows`, replicated incrementally by `id`; the one at
`more_path`, if set, is a second stream, `more_rows`, replicated the same way.

`state_every` makes it emit a STATE message after every that many records (the SDK's default is 10,000);
`record_delay_ms` makes it wait that long before each record, for runs that last; `pause_after` and `pause_while`
make it wait, after that many records, for as long as the file `pause_while` exists: a run that lasts exactly until
the test lets it go on (`pause_after: 0`: before its first record, so before its first STATE message);
`pause_again_after` and `pause_again_while` make a second such pause.
"""
import csv
import os
import time

from singer_sdk import Stream, Tap
from singer_sdk import typing as th


class Rows(Stream):
    name = "rows"
    path_setting = "path"
    primary_keys = ("id",)
    replication_key = "id"
    is_sorted = True
    schema = th.PropertiesList(th.Property("id", th.IntegerType), th.Property("name", th.StringType)).to_dict()

    @property
    def STATE_MSG_FREQUENCY(self):  # noqa: N802 - the SDK's name
        return int(self.config.get("state_every", 10000))

    def get_records(self, context):
        start = self.get_starting_replication_key_value(context)
        delay = self.config.get("record_delay_ms", 0) / 1000
        pauses = [(self.config.get("pause_after"), self.config.get("pause_while")),
                  (self.config.get("pause_again_after"), self.config.get("pause_again_while"))]
        sent = 0
        with open(self.config[self.path_setting], newline="") as f:
            for row in csv.DictReader(f):
                record = {"id": int(row["id"]), "name": row["name"]}
                if start is None or record["id"] > start:
                    for pause_after, pause_while in pauses:
                        while sent == pause_after and pause_while and os.path.exists(pause_while):
                            time.sleep(0.05)
                    time.sleep(delay)
                    sent += 1
                    yield record


class MoreRows(Rows):
    name = "more_rows"
    path_setting = "more_path"


class TapCsvLite(Tap):
    name = "tap-csvlite"
    config_jsonschema = th.PropertiesList(
        th.Property("path", th.StringType, required=True),
        th.Property("more_path", th.StringType),
        th.Property("state_every", th.IntegerType),
        th.Property("record_delay_ms", th.IntegerType),
        th.Property("pause_after", th.IntegerType),
        th.Property("pause_while", th.StringType),
        th.Property("pause_again_after", th.IntegerType),
        th.Property("pause_again_while", th.StringType),
    ).to_dict()

    def discover_streams(self):
        return [Rows(self), *([MoreRows(self)] if self.config.get("more_path") else [])]
