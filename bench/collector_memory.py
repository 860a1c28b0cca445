"""Benchmark: the collector's peak RSS and throughput with the byte budget on (``batch_bytes``, default) and off
(``batch_bytes=0``: rows and age only, the behaviour before the budget), at 1 KB and 500 KB events, side by side.

    python -m bench.collector_memory [--small 20000] [--large 300] [--url chdb|clickhouse://…]

Each case produces its events to a fresh topic of an embedded tansu broker (``SPARKTAP_BENCH_KAFKA=host:port`` for
another), then runs ``python -m sparktap collect`` as a child process (default settings but the budget) until
``/metrics`` shows every row inserted. Figures: the process's peak RSS (``VmHWM`` of ``/proc/<pid>/status``, the
real process: Python, librdkafka and chDB together) and its throughput (events over the wall time from the first
consumed message to the last row inserted). Prints one line per case and the on/off ratios; never fails the suite.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import orjson

from sparktap.local.ports import free_port
from sparktap.schemas.examples import example_event


def sql_starts(count: int, size: int, app: str) -> Iterator[bytes]:
    """Valid ``sql_start`` events of about ``size`` bytes each (the size is the SQL description)."""
    now = int(time.time() * 1000)
    base = example_event("sql_start").model_dump(exclude_none=True)
    filler = "x" * max(0, size - 400)
    for seq in range(1, count + 1):
        yield orjson.dumps(
            {
                **base,
                "app_id": app,
                "seq": seq,
                "execution_id": seq,
                "event_time_ms": now,
                "emitted_at_ms": now,
                "description": f"select {seq} -- {filler}",
            }
        )


def produce(bootstrap: str, topic: str, values: Iterator[bytes], key: bytes) -> int:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "enable.idempotence": True})
    count = 0
    for value in values:
        while True:
            try:
                producer.produce(topic, key=key, value=value)
                break
            except BufferError:
                producer.poll(0.1)
        count += 1
    if producer.flush(300) != 0:
        raise RuntimeError("could not produce the benchmark input")
    return count


def _metric(port: int, name: str) -> float:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:  # noqa: S310
            text = response.read().decode()
    except OSError:
        return 0.0
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


def peak_rss_mib(pid: int) -> float:
    """The process's peak resident set (VmHWM), MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmHWM for pid {pid}")


def run_collector(bootstrap: str, topic: str, url: str, events: int, batch_bytes: int | None) -> dict[str, float]:
    """``sparktap collect`` as a child process until ``events`` rows are in: peak RSS (MiB) and events/s."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARKTAP_")}
    env.update(
        {
            "SPARKTAP_KAFKA__BOOTSTRAP_SERVERS": bootstrap,
            "SPARKTAP_KAFKA__TOPIC": topic,
            "SPARKTAP_KAFKA__GROUP_ID": f"bench-{uuid.uuid4().hex[:6]}",
            "SPARKTAP_CLICKHOUSE__URL": url,
            "SPARKTAP_COLLECTOR__METRICS_HOST": "127.0.0.1",
            "SPARKTAP_COLLECTOR__METRICS_PORT": str(port),
            "SPARKTAP_COLLECTOR__LOG_FORMAT": "text",
            "SPARKTAP_LOG_LEVEL": "WARNING",
        }
    )
    if batch_bytes is not None:
        env["SPARKTAP_COLLECTOR__BATCH_BYTES"] = str(batch_bytes)
    proc = subprocess.Popen(  # noqa: S603 - this interpreter
        [sys.executable, "-m", "sparktap", "collect"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 900
        first = None
        while time.monotonic() < deadline and proc.poll() is None:
            if first is None and _metric(port, "sparktap_collector_consumed_messages_total") > 0:
                first = time.monotonic()
            if _metric(port, "sparktap_collector_inserted_rows_total") >= events:
                break
            time.sleep(0.1)
        else:
            raise RuntimeError(f"the collector stopped or took too long: {proc.stderr.read().decode()[-2000:]}")
        done = time.monotonic()
        rss = peak_rss_mib(proc.pid)
    finally:
        proc.terminate()
        proc.wait(60)
    return {"rss": rss, "rate": events / max(done - (first or done), 1e-3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=20_000, help="1 KB events per run")
    parser.add_argument("--large", type=int, default=300, help="500 KB events per run")
    parser.add_argument("--url", default="chdb", help="'chdb' (a fresh directory per run) or a clickhouse:// URL")
    args = parser.parse_args()
    from sparktap.local.broker import TansuBroker, create_topic

    external = os.environ.get("SPARKTAP_BENCH_KAFKA", "")
    broker = None if external else TansuBroker().start()
    bootstrap = external or (broker.bootstrap_servers if broker else "")
    results: dict[tuple[str, str], dict[str, float]] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="sparktap-bench-") as tmp:
            for label, count, size in (("1 KB", args.small, 1_000), ("500 KB", args.large, 500_000)):
                topic = f"bench-memory-{uuid.uuid4().hex[:6]}"
                create_topic(bootstrap, topic, partitions=2)
                produce(bootstrap, topic, sql_starts(count, size, f"app-{uuid.uuid4().hex[:6]}"), b"k")
                for mode, batch_bytes in (("off", 0), ("on", None)):
                    url = args.url
                    if url == "chdb":
                        url = f"chdb://{Path(tmp) / f'{topic}-{mode}'}"
                    elif "?" not in url:
                        url = f"{url.rstrip('/')}_{mode}_{uuid.uuid4().hex[:6]}"  # a fresh database per run
                    r = run_collector(bootstrap, topic, url, count, batch_bytes)
                    results[(label, mode)] = r
                    print(
                        f"{label} events ({count:,}), byte budget {mode}: peak RSS {r['rss']:,.0f} MiB, "
                        f"{r['rate']:,.0f} events/s",
                        flush=True,
                    )
        for label in ("1 KB", "500 KB"):
            on, off = results[(label, "on")], results[(label, "off")]
            print(
                f"{label}: budget on / off: peak RSS x{on['rss'] / off['rss']:.2f}, throughput "
                f"x{on['rate'] / off['rate']:.2f}"
            )
    finally:
        if broker is not None:
            broker.stop()


if __name__ == "__main__":
    main()
