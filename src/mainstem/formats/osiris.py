"""The Osiris chunk layout: what the stream protocol's Deliver carries and the log stores.

One declaration for the log, the protocols (a Publish frame's entries, a Deliver's
header) and the clients, so that the layout on disk and on the wire cannot drift apart.
See `chunk.py` for the whole chunk: header, bloom filter, data entries, trailer.
"""

import struct

MAGIC_VERSION = 0x50
HEADER = struct.Struct(">BBHIqQQiIIB3x")
HEADER_SIZE = HEADER.size  # 48
MAX_CHUNK_ENTRIES = 0xFFFF  # the header counts entries in 16 bits

# A data entry is simple (top bit 0, 31-bit length, body) or a sub-batch of records.
SIMPLE_ENTRY = struct.Struct(">I")
SUB_BATCH_ENTRY = struct.Struct(">BHII")  # flags, records, uncompressed length, length
SUB_BATCH_FLAG = 0x80
SUB_BATCH_BIT = SUB_BATCH_FLAG << 24  # the same flag, as the top bit of the entry's first u32
MAX_ENTRY_LENGTH = 0x7FFF_FFFF
