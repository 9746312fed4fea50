"""Whether a record names a tier object, asked per object deleted: a stream of --records
tiered segments deleted, each of its 2 x --records objects checked as `_delete_due` does
(`Catalog.names_object`), against the same checks by a scan of each record's JSON (the
query before migration 14), on the same catalog with the other stream's records left.

    .venv/bin/python -m bench.tier_records_bench [--records 2000]

Prints the seconds of each and their ratio (scan / index); asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from mainstem.broker.catalog import Catalog
from mainstem.log.tier_upload import TieredRecord, index_key, segment_key_of

SCAN = "SELECT 1 FROM tiered_segments WHERE json_extract(record, '$.key') = ? LIMIT 1"


def record(stream: str, first: int) -> TieredRecord:
    return TieredRecord(f"{stream}/0/{first:020d}-1-ab.segment", first, first + 10, 0, 100,
                        1, 2, 120, 7, 48, 9, 2, ((first, 1),))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory, \
            Catalog.open(Path(directory) / "catalog.sqlite") as catalog:
        keys = []
        for stream in ("kept", "gone"):
            catalog.add_stream("/", stream)
            for first in range(0, args.records * 10, 10):
                catalog.add_tiered("/", stream, 0, record(stream, first))
                if stream == "gone":
                    keys += [record(stream, first).key, index_key(record(stream, first).key)]
        catalog.delete_stream("/", "gone")
        started = time.perf_counter()
        assert not any(catalog.names_object(key) for key in keys)
        indexed = time.perf_counter() - started
        db = catalog._db  # the peer: the same catalog, read as before
        started = time.perf_counter()
        assert not any(db.execute(SCAN, (segment_key_of(key),)).fetchone() for key in keys)
        scanned = time.perf_counter() - started
    print(json.dumps({"records": args.records, "objects_checked": len(keys),
                      "index_s": round(indexed, 4), "scan_s": round(scanned, 4),
                      "scan_over_index": round(scanned / indexed, 1)}))


if __name__ == "__main__":
    main()
