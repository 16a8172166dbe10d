"""ClickHouse's compressed block framing (`compress=1` answers, `decompress=1` request bodies).

Each block: 16-byte CityHash128 of the rest, then method (0x82 = LZ4), compressed size (header
included, u32 LE), uncompressed size (u32 LE), then the LZ4 block without a size prefix.
"""
import struct

import lz4.block
from clickhouse_cityhash.cityhash import CityHash128

LZ4 = 0x82
NONE = 0x02
HEADER = 9
BLOCK_SIZE = 1 << 20


def _checksum(data: bytes) -> bytes:
    h = CityHash128(data)
    return struct.pack("<QQ", h >> 64, h & 0xFFFFFFFFFFFFFFFF)


def compress(data: bytes) -> bytes:
    out = bytearray()
    for start in range(0, len(data), BLOCK_SIZE):
        chunk = data[start:start + BLOCK_SIZE]
        packed = lz4.block.compress(chunk, store_size=False)
        body = struct.pack("<BII", LZ4, len(packed) + HEADER, len(chunk)) + packed
        out += _checksum(body) + body
    return bytes(out)


def decompress(data: bytes) -> bytes:
    out = bytearray()
    pos = 0
    while pos < len(data):
        checksum = data[pos:pos + 16]
        method, size, raw_size = struct.unpack_from("<BII", data, pos + 16)
        body = data[pos + 16:pos + 16 + size]
        if len(body) != size or _checksum(body) != checksum:
            raise ValueError("compressed block checksum mismatch")
        payload = body[HEADER:]
        if method == LZ4:
            out += lz4.block.decompress(payload, uncompressed_size=raw_size)
        elif method == NONE:
            out += payload
        else:
            raise ValueError(f"unsupported compression method 0x{method:02x}")
        pos += 16 + size
    return bytes(out)
