"""Benchmark: what a Python object per consumed message costs the collector: confluent-kafka's ``consume`` plus
``scan_messages`` and freeing the messages, against the same librdkafka consumed from C with no Python object, in
one run (issue 27, docs/benchmarks.md round 9).

    python -m bench.consume_objects [--events 200000] [--rounds 3]

Input: the collector benchmark's realistic ``task_end`` messages (~730 bytes) on 4 partitions of a real Apache Kafka
broker (tests.support.services.kafka). Every side consumes them all with a new group, in chunks of 20,000 (the
collector's ``consume_chunk``) and ``queued.max.messages.kbytes=32768`` (its fetch queue), and report the consuming
thread's CPU per message (the broker thread's fetching and decompressing is the same librdkafka work on both sides and
left out):

- **confluent-kafka** (the collector's consumer before round 10, and its fallback): ``Consumer.consume``,
  ``scan_messages`` (collector/batch.py: the values, offsets and positions the batch keeps) and dropping the
  chunk's messages;
- **sparktap's consumer** (collector/kafka/librdkafka.py, since round 10): ``consume_queued`` into a ``MessageChunk``
  (the messages left where librdkafka put them), its ``scan`` and ``release``;
- **librdkafka from C**: a 60-line C program built here with the system's C compiler against the very
  ``librdkafka`` the confluent-kafka wheel ships (prototypes declared by hand: the wheel has no header):
  ``rd_kafka_consume_batch_queue`` on the consumer queue and ``rd_kafka_message_destroy``, plus one read of every
  8th byte of each payload (the least a reader of the bytes does), reported apart.

Each round runs the three sides in turn. Prints one line per figure and, last, the ratio; never part of the suite
(``make bench``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench._collector_run import produce_tasks

CHUNK = 20_000
QUEUE_KBYTES = 32_768

C_SOURCE = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>
#include <time.h>
typedef struct rd_kafka_s rd_kafka_t;
typedef struct rd_kafka_conf_s rd_kafka_conf_t;
typedef struct rd_kafka_queue_s rd_kafka_queue_t;
typedef struct rd_kafka_topic_partition_list_s rd_kafka_topic_partition_list_t;
typedef struct {
    int err; void *rkt; int32_t partition; void *payload; size_t len; void *key; size_t key_len; int64_t offset;
    void *_private;
} rd_kafka_message_t; /* rdkafka.h's public rd_kafka_message_t */
rd_kafka_conf_t *rd_kafka_conf_new(void);
int rd_kafka_conf_set(rd_kafka_conf_t *, const char *, const char *, char *, size_t);
rd_kafka_t *rd_kafka_new(int, rd_kafka_conf_t *, char *, size_t);
int rd_kafka_poll_set_consumer(rd_kafka_t *);
rd_kafka_topic_partition_list_t *rd_kafka_topic_partition_list_new(int);
void *rd_kafka_topic_partition_list_add(rd_kafka_topic_partition_list_t *, const char *, int32_t);
int rd_kafka_subscribe(rd_kafka_t *, const rd_kafka_topic_partition_list_t *);
rd_kafka_queue_t *rd_kafka_queue_get_consumer(rd_kafka_t *);
ssize_t rd_kafka_consume_batch_queue(rd_kafka_queue_t *, int, rd_kafka_message_t **, size_t);
void rd_kafka_message_destroy(rd_kafka_message_t *);
int rd_kafka_consumer_close(rd_kafka_t *);
static double cpu(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}
static void set(rd_kafka_conf_t *conf, const char *name, const char *value) {
    char err[512];
    if (rd_kafka_conf_set(conf, name, value, err, sizeof err) != 0) {
        fprintf(stderr, "%s: %s\n", name, err);
        exit(2);
    }
}
int main(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: consume BOOTSTRAP TOPIC GROUP MESSAGES CHUNK QUEUE_KBYTES\n");
        return 2;
    }
    long want = atol(argv[4]), chunk = atol(argv[5]), got = 0;
    char err[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    set(conf, "bootstrap.servers", argv[1]);
    set(conf, "group.id", argv[3]);
    set(conf, "auto.offset.reset", "earliest");
    set(conf, "queued.max.messages.kbytes", argv[6]);
    rd_kafka_t *rk = rd_kafka_new(1, conf, err, sizeof err);
    if (rk == NULL) {
        fprintf(stderr, "rd_kafka_new: %s\n", err);
        return 2;
    }
    rd_kafka_poll_set_consumer(rk);
    rd_kafka_topic_partition_list_t *topics = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(topics, argv[2], -1);
    rd_kafka_subscribe(rk, topics);
    rd_kafka_queue_t *queue = rd_kafka_queue_get_consumer(rk);
    rd_kafka_message_t **msgs = malloc(sizeof(*msgs) * (size_t)chunk);
    double consume = 0, touch = 0, destroy = 0;
    uint64_t sum = 0;
    int idle = 0;
    /* the first message (the group's join) is not timed, as on the Python side */
    ssize_t n = rd_kafka_consume_batch_queue(queue, 30000, msgs, 1);
    for (ssize_t i = 0; i < n; i++) {
        got += msgs[i]->err == 0;
        rd_kafka_message_destroy(msgs[i]);
    }
    while (got < want && idle < 30) {
        double t0 = cpu();
        n = rd_kafka_consume_batch_queue(queue, 1000, msgs, (size_t)chunk);
        double t1 = cpu();
        for (ssize_t i = 0; i < n; i++) {
            if (msgs[i]->err) {
                continue;
            }
            const unsigned char *p = msgs[i]->payload;
            for (size_t j = 0; j < msgs[i]->len; j += 8) {
                sum += p[j];
            }
            got++;
        }
        double t2 = cpu();
        for (ssize_t i = 0; i < n; i++) {
            rd_kafka_message_destroy(msgs[i]);
        }
        double t3 = cpu();
        idle = n > 0 ? 0 : idle + 1;
        consume += t1 - t0;
        touch += t2 - t1;
        destroy += t3 - t2;
    }
    printf("%ld %.9f %.9f %.9f %lu\n", got, consume, touch, destroy, (unsigned long)sum);
    rd_kafka_consumer_close(rk);
    return got < want;
}
"""


def librdkafka() -> Path:
    """The librdkafka shared library the confluent-kafka wheel ships (``confluent_kafka.libs``)."""
    from sparktap.collector.kafka.rdkafka import library_path

    found = library_path()
    if found is None:
        raise SystemExit("no librdkafka*.so* in confluent_kafka.libs: this benchmark needs the confluent-kafka wheel")
    return found


def build(workdir: Path) -> Path:
    """The C consumer, compiled against ``librdkafka()`` (cc or gcc from PATH)."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise SystemExit("no C compiler (cc or gcc) on PATH: it builds the librdkafka side of this benchmark")
    lib = librdkafka()
    source, program = workdir / "consume.c", workdir / "consume"
    source.write_text(C_SOURCE)
    subprocess.run([compiler, "-O2", "-o", str(program), str(source), str(lib), f"-Wl,-rpath,{lib.parent}"], check=True)
    return program


def run_c(program: Path, bootstrap: str, topic: str, events: int) -> tuple[float, float]:
    """(consume and destroy, payload read) CPU seconds per message of the C consumer's thread."""
    out = subprocess.run(
        [str(program), bootstrap, topic, f"bench-c-{uuid.uuid4().hex[:8]}", str(events), str(CHUNK), str(QUEUE_KBYTES)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"the C consumer failed ({out.returncode}): {out.stderr.strip() or out.stdout.strip()}")
    got, consume, touch, destroy, _ = out.stdout.split()
    return (float(consume) + float(destroy)) / int(got), float(touch) / int(got)


def _conf(side: str, bootstrap: str) -> dict[str, object]:
    """Both Python sides' consumer settings (a new group each)."""
    return {
        "bootstrap.servers": bootstrap,
        "group.id": f"bench-{side}-{uuid.uuid4().hex[:8]}",
        "auto.offset.reset": "earliest",
        "queued.max.messages.kbytes": QUEUE_KBYTES,
    }


def _timed(
    join: Callable[[], Any],
    consume: Callable[[], Any],
    scan: Callable[[Any, list[bytes]], Any],
    free: Callable[[Any], None],
    events: int,
) -> tuple[float, float, float]:
    """(consume, scan, freeing) CPU seconds per message of this thread over chunks of ``consume()`` until ``events``
    messages were taken; ``join()``, the first message (the group's join), is not timed, as on the C side."""
    first = join()
    got = len(first)
    free(first)
    del first
    consume_s = scan_s = free_s = 0.0
    idle = 0
    while got < events and idle < 30:
        t0 = time.thread_time()
        chunk = consume()
        t1 = time.thread_time()
        where: list[bytes] = []
        taken = scan(chunk, where)
        t2 = time.thread_time()
        got += len(taken[0])
        idle = 0 if len(chunk) else idle + 1
        free(chunk)
        del chunk, taken, where
        t3 = time.thread_time()
        consume_s, scan_s, free_s = consume_s + t1 - t0, scan_s + t2 - t1, free_s + t3 - t2
    if got < events:
        raise RuntimeError(f"consumed {got} of {events} messages")
    return consume_s / got, scan_s / got, free_s / got


def run_python(bootstrap: str, topic: str, events: int) -> tuple[float, float, float]:
    """(consume, scan_messages, freeing) CPU seconds per message of the consuming thread (this one)."""
    from confluent_kafka import Consumer

    from sparktap.collector.batch import scan_messages

    consumer = Consumer(_conf("py", bootstrap))
    consumer.subscribe([topic])
    try:
        return _timed(
            lambda: consumer.consume(num_messages=1, timeout=30),
            lambda: consumer.consume(num_messages=CHUNK, timeout=1),
            lambda messages, where: scan_messages(messages, -1, where),
            lambda messages: None,  # dropped: freed by their reference counts
            events,
        )
    finally:
        consumer.close()


def run_chunks(bootstrap: str, topic: str, events: int) -> tuple[float, float, float]:
    """(consume, scan, release) CPU seconds per message of the consuming thread (this one) on the collector's own
    consumer (collector/kafka/librdkafka.py): ``consume_queued`` into a ``MessageChunk``, its ``scan`` (the same figures
    ``scan_messages`` gives the batch) and ``release`` (rd_kafka_message_destroy, in C)."""
    from sparktap.collector.kafka.librdkafka import ChunkConsumer

    consumer = ChunkConsumer(_conf("chunk", bootstrap))
    consumer.subscribe([topic])
    try:
        return _timed(
            lambda: consumer.consume_queued(1, 30),
            lambda: consumer.consume_queued(CHUNK, 1),
            lambda chunk, where: chunk.scan(-1, where),
            lambda chunk: chunk.release(),
            events,
        )
    finally:
        consumer.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)

    from sparktap.collector.memory import share_one_arena

    share_one_arena()  # as ``sparktap collect`` on a server store (collector/memory.py)
    from sparktap.local.broker import create_topic
    from tests.support.services.kafka import ApacheKafkaBroker

    broker = ApacheKafkaBroker().start()
    try:
        with tempfile.TemporaryDirectory(prefix="sparktap-bench-") as tmp:
            program = build(Path(tmp))
            bootstrap = broker.bootstrap_servers
            topic = f"bench-objects-{uuid.uuid4().hex[:8]}"
            create_topic(bootstrap, topic, partitions=4)
            produced = produce_tasks(bootstrap, topic, args.events)
            print(
                f"input: {args.events} events on 4 partitions of Apache Kafka, produced in {produced:.1f}s; "
                f"librdkafka {librdkafka().name}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
            )
            ours: list[float] = []
            theirs: list[float] = []
            chunks: list[float] = []
            sides = (
                ("sparktap's consumer (MessageChunk)", run_chunks, ("consume", "scan", "release"), chunks),
                ("confluent-kafka", run_python, ("consume", "scan_messages", "freeing"), ours),
            )
            for round_ in range(1, args.rounds + 1):
                for name, run, labels, figures in sides:
                    parts = run(bootstrap, topic, args.events)
                    figures.append(sum(parts))
                    split = ", ".join(f"{label} {part * 1e6:.2f}" for label, part in zip(labels, parts, strict=True))
                    print(f"round {round_} {name}: {figures[-1] * 1e6:.2f} µs/message ({split})", flush=True)
                c_consume, c_touch = run_c(program, bootstrap, topic, args.events)
                theirs.append(c_consume)
                print(
                    f"round {round_} librdkafka from C: {c_consume * 1e6:.2f} µs/message (consume and destroy; "
                    f"reading every 8th payload byte another {c_touch * 1e6:.2f})",
                    flush=True,
                )
            ours_median, theirs_median = statistics.median(ours), statistics.median(theirs)
            chunks_median = statistics.median(chunks)
            print(f"a Python object per message: {(ours_median - theirs_median) * 1e6:.2f} µs more (medians)")
            print(
                f"sparktap's consumer: {(ours_median - chunks_median) * 1e6:.2f} µs a message less than "
                f"confluent-kafka's, {(chunks_median - theirs_median) * 1e6:+.2f} against C alone (medians; "
                f"ratio sparktap-chunks/librdkafka-from-C: cpu_per_message={chunks_median / theirs_median:.1f})"
            )
            print(f"ratio confluent-kafka/librdkafka-from-C: cpu_per_message={ours_median / theirs_median:.1f}")
    finally:
        broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
