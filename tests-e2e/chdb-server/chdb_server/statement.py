"""Where a request's query ends and an INSERT's data begins, found the way ClickHouse's parser finds it.

A real server reads `INSERT INTO t … FORMAT Native` up to the format's name and takes the rest of the body, in that
format, as the rows (ParserInsertQuery: after the name, spaces and tabs are skipped, then one line break). So too
`INSERT INTO t SELECT … FROM input('structure') … FORMAT RowBinary`, whose SELECT reads those rows. Only the head of
an INSERT is scanned: a 20 MB `INSERT … VALUES` or SELECT is passed through as SQL untouched.
"""
from __future__ import annotations

import dataclasses
import re

_WORD = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")
_TRAILING_FORMAT = re.compile(r"\bFORMAT\s+(\w+)\s*;?\s*$", re.IGNORECASE)
# A statement whose rows are SQL (VALUES) or come from a query: nothing to split off.
_ROWS_IN_SQL = {b"VALUES", b"SELECT", b"WITH", b"FROM"}
_INPUT = re.compile(r"\binput\s*\(", re.IGNORECASE)


@dataclasses.dataclass
class Statement:
    text: str
    data: bytes | None = None  # an INSERT's rows, in `input_format`
    input_format: str | None = None
    settings_at: int | None = None  # where the INSERT's own SETTINGS clause starts in `text`

    @property
    def output_format(self) -> str | None:
        """The query's own `FORMAT x` at its end, for what it returns."""
        if self.data is not None:
            return None
        found = _TRAILING_FORMAT.search(self.text[-512:])  # only the end can hold it; a state makes SQL long
        return found.group(1) if found else None

    def sql(self, infile: str | None = None, settings: dict[str, str] | None = None) -> str:
        """The statement for chDB, which reads an INSERT's rows from `infile` (where `data` was written); `settings`
        are the request's (name: SQL literal), which the statement's own SETTINGS clause overrides."""
        if self.data is None:
            return self.text
        head, clause = self.text, ""
        if self.settings_at is not None:
            head, clause = self.text[:self.settings_at], self.text[self.settings_at:]
        if settings:
            own = clause.strip()[len("SETTINGS"):].strip()
            named = set(re.findall(r"(\w+)\s*=", own))
            extra = ", ".join(f"{name} = {value}" for name, value in settings.items() if name not in named)
            clause = "SETTINGS " + ", ".join(part for part in (own, extra) if part)
        path = infile.replace("\\", "\\\\").replace("'", "\\'")
        if _INPUT.search(head):  # chDB has no input(): the same rows, read by file() from where they were written
            return _INPUT.sub(f"file('{path}', '{self.input_format}', ", head, count=1).rstrip() + "\n" + clause
        # Line breaks between the parts: either part may end in a `--` comment.
        return f"{head.rstrip()}\nFROM INFILE '{path}'\n{clause.rstrip()}\nFORMAT {self.input_format}"

    @property
    def second_statement_at(self) -> int | None:
        """Where a second statement starts, if the query holds more than one (a real server refuses that over HTTP,
        "Multi-statements are not allowed"; one trailing `;` is fine), else None. Only the query, not an INSERT's data."""
        text = self.text.encode()
        if b";" not in text:
            return None
        ended = False
        for start, token in _tokens(text):
            if ended:
                return start
            ended = token == b";"
        return None

    @classmethod
    def parse(cls, body: bytes) -> Statement:
        tokens = _tokens(body)
        first = next(tokens, None)
        if first is None or first[1].upper() != b"INSERT":
            return cls(body.decode())
        depth = 0
        settings_at = None
        reads_input = False
        for start, token in tokens:
            word = token.upper()
            if token in (b"(", b")"):
                depth += 1 if token == b"(" else -1
            elif depth == 0 and word in _ROWS_IN_SQL and not reads_input:
                if not (word == b"SELECT" and _INPUT.search(body[:start + 65536].decode(errors="replace"))):
                    return cls(body.decode())
                reads_input = True
            elif depth == 0 and word == b"SETTINGS":
                settings_at = start
            elif depth == 0 and word == b"FORMAT":
                name = next(tokens, None)
                if name is None or not _WORD.fullmatch(name[1]):
                    break
                end = _data_start(body, name[0] + len(name[1]))
                return cls(body[:start].decode(), body[end:], name[1].decode(), settings_at)
        return cls(body.decode())


def _data_start(body: bytes, pos: int) -> int:
    while pos < len(body) and body[pos] in b" \t\f":
        pos += 1
    if body.startswith(b"\r", pos):
        pos += 1
    if body.startswith(b"\n", pos):
        pos += 1
    return pos


def _tokens(body: bytes):
    """(offset, token) for words, quoted names and strings, and single characters; skips spaces and comments."""
    pos, end = 0, len(body)
    while pos < end:
        c = body[pos:pos + 1]
        if c.isspace():
            pos += 1
        elif body.startswith(b"--", pos):
            newline = body.find(b"\n", pos)
            pos = end if newline < 0 else newline + 1
        elif body.startswith(b"/*", pos):
            close = body.find(b"*/", pos + 2)
            pos = end if close < 0 else close + 2
        elif c in b"'`\"":
            close = _closing_quote(body, pos)
            yield pos, body[pos:close]
            pos = close
        else:
            word = _WORD.match(body, pos)
            close = word.end() if word else pos + 1
            yield pos, body[pos:close]
            pos = close


def _closing_quote(body: bytes, pos: int) -> int:
    """The offset just past the quoted text that starts at `pos` (backslash escapes and doubled quotes)."""
    quote = body[pos]
    pos += 1
    while pos < len(body):
        if body[pos] == 0x5C:  # backslash
            pos += 2
        elif body[pos] == quote:
            if pos + 1 < len(body) and body[pos + 1] == quote:
                pos += 2
            else:
                return pos + 1
        else:
            pos += 1
    return len(body)
