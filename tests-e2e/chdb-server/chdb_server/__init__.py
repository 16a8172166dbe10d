"""A ClickHouse HTTP interface over chDB (the ClickHouse engine as a library), for tests and the demo."""
