"""Wraps a plan's protobuf payload (tensor values inline) in the plan file
header of format version 3 with correct checksums and an empty data section:
what amp-run reads. Usage: wrap_plan.py PAYLOAD.pb OUT.plan"""
import struct
import sys
import zlib

payload = open(sys.argv[1], "rb").read()
data_start = (64 + len(payload) + 63) // 64 * 64
header = (b"AMPCPLAN" + struct.pack("<II", 3, 0) +
          struct.pack("<QQ", len(payload), zlib.crc32(payload)) +
          struct.pack("<QQQQ", data_start, 0, zlib.crc32(b""), 0))
body = header + payload
open(sys.argv[2], "wb").write(body + bytes(data_start - len(body)))
