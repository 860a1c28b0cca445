"""Benchmark: the collector's decode of ``task_end`` with its native code on (the C reader, native/_flatjson_read.c,
into Arrow columns) and off (``SPARKTAP_NATIVE=off``: the pure-Python fast path), side by side in one run.

    python -m bench.native_reader [--events 100000] [--rounds 5]

Input: the collector benchmark's realistic ``task_end`` messages (``bench/_collector_data.py``, ~730 bytes). Each
side runs in its own Python process (the switch is read when the collector is first imported) and decodes the same
messages in chunks of 20,000 (the collector's batch) with ``Decoder(schema, arrow=True)``, as the collector does on
chDB; both sides must take every message. Figure: the process's CPU time per message, best of ``--rounds``. Prints
one line per side and the ratio; never part of the suite (``make bench``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

CHUNK = 20_000


def child(events: int, rounds: int) -> dict[str, float | int | bool]:
    """Decode ``events`` messages ``rounds`` times in this process: its best CPU µs a message."""
    from bench._collector_data import task_messages
    from sparktap.collector.arrowpath import C_READER
    from sparktap.collector.decode import Decoder
    from sparktap.schemas.schema import schema_for

    values = [value for _, value in task_messages(events)]
    decoder = Decoder(schema_for((26, 9), "db"), arrow=True)
    best = float("inf")
    for _ in range(rounds):
        taken = 0
        start = time.process_time()
        for i in range(0, len(values), CHUNK):
            chunk = values[i : i + CHUNK]
            taken += len(chunk) - len(decoder.decode(chunk).rejects)
        best = min(best, time.process_time() - start)
        if taken != len(values):
            raise SystemExit(f"{len(values) - taken} of {len(values)} messages were refused")
    return {"c_reader": C_READER, "events": len(values), "us_per_event": best / len(values) * 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.events, args.rounds)))  # noqa: T201
        return
    results = {}
    for name, switch in (("native", "auto"), ("python", "off")):
        env = {**os.environ, "SPARKTAP_NATIVE": switch}
        command = [sys.executable, "-m", "bench.native_reader", "--child", "--events", str(args.events),
                   "--rounds", str(args.rounds)]  # fmt: skip
        out = subprocess.run(command, env=env, capture_output=True, text=True, check=True)  # noqa: S603
        results[name] = json.loads(out.stdout.strip().splitlines()[-1])
        r = results[name]
        print(
            f"{name:7} (SPARKTAP_NATIVE={switch}, C reader {r['c_reader']}): {r['us_per_event']:.2f} µs CPU a message"
        )  # noqa: T201
    if not results["native"]["c_reader"]:
        raise SystemExit("the C reader is not built here (pip install -e . with a C compiler): no comparison")
    ratio = results["python"]["us_per_event"] / results["native"]["us_per_event"]
    print(f"the native path decodes task_end {ratio:.2f} x faster (CPU a message, best of {args.rounds})")  # noqa: T201


if __name__ == "__main__":
    main()
