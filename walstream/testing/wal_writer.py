"""A WAL writer run as its own process by the WAL crash test (killed with SIGKILL).

Prints one JSON handle per line, flushed, only after ``write`` returned.
"""

from __future__ import annotations

import json
import sys

from walstream.wal import KafkaWriteAheadLog


def main() -> None:
    bootstrap, name = sys.argv[1], sys.argv[2]
    log = KafkaWriteAheadLog(bootstrap, name, rolling_interval_ms=500, chunk_bytes=2048)
    i = 0
    while True:
        record = f"record-{i}:".encode() * (1 + i % 400)  # some records span chunks
        handle = log.write(record, 1_000 + 5 * i)
        print(json.dumps({"i": i, "handle": handle.to_dict()}), flush=True)
        i += 1


if __name__ == "__main__":
    main()
