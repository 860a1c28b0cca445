"""Writes the checked-in seed corpus of the C reader's fuzz target (tests/fuzz/corpus/), one file per seed.

    .venv/bin/python tests/fuzz/make_corpus.py

Seeds: task_end as the listener writes it, as the model dumps it, with only required fields; every JSON shape the
reader branches on (whitespace, escapes, UTF-8 of each length and each invalid form, numbers at the int64 limits,
fractions and exponents, booleans, null, nested values, duplicates, unknown keys, enumerations, trailing bytes); and
the hostile messages of issue 12. Several messages in one input are separated by NUL bytes (see oracle.py).
The ``found-*`` files are inputs a 10-minute run found, minimised with ``-merge=1`` (docs/fuzzing.md); they stay.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import orjson

from sparktap.schemas.examples import example_event

HERE = Path(__file__).parent / "corpus"


def _task_end_spec() -> list[tuple[bytes, ...]]:
    """The C reader's field spec of task_end, in its order (as tests/fuzz/oracle.py builds it)."""
    from sparktap.collector.arrowpath import ArrowReader
    from sparktap.collector.checks import compile_rules
    from sparktap.schemas.schema import schema_for

    table = schema_for((26, 9), "fuzz").tables["task_end"]
    spec: list[tuple[bytes, ...]] = ArrowReader(table, compile_rules(table), 1 << 20).spec
    return spec


def _seeds() -> dict[str, bytes]:
    full = example_event("task_end", seq=3).model_dump()
    listener = {k: v for k, v in full.items() if v is not None}
    required = {
        k: v
        for k, v in listener.items()
        if k
        in (
            "schema_version",
            "event_type",
            "cluster",
            "app_id",
            "app_attempt",
            "app_name",
            "seq",
            "emitted_at_ms",
            "event_time_ms",
        )
    }
    plain = orjson.dumps(listener)

    def with_(**changes: Any) -> bytes:
        return json.dumps({**listener, **changes}, ensure_ascii=False, separators=(",", ":")).encode()

    # the reader's expected-next-field guess has none after the spec's last field: a key that follows that field
    # (here a newer minor's) is looked up by name, the branch a message in spec order, plus one, takes
    spec = [name.decode() for name, *_ in _task_end_spec()]
    in_spec_order = {k: full[k] for k in spec if k in full and full[k] is not None}
    if spec[-1] not in in_spec_order:
        in_spec_order[spec[-1]] = 0
    after_last = json.dumps({**in_spec_order, "newer_minor_field": 1}, separators=(",", ":")).encode()

    seeds: dict[str, bytes] = {
        "after-the-last-field": after_last,
        "listener": plain,
        "model-dump": orjson.dumps(full),
        "required-only": orjson.dumps(required),
        "pretty": json.dumps(listener, indent=2).encode(),
        "crlf-tabs": plain.replace(b",", b",\r\n\t").replace(b":", b" : "),
        "empty-object": b"{}",
        "empty": b"",
        "not-object": b"[1,2,3]",
        "trailing": plain + b" x",
        "two-objects": plain + b"\n" + plain,
        "unclosed": plain[:-1],
        "batch": b"\x00".join([plain, with_(seq=4, host="h\u00e9"), orjson.dumps(required), with_(seq=5)]),
        "reordered": orjson.dumps(dict(reversed(list(listener.items())))),
        "duplicate-key": plain[:-1] + b',"seq":9}',
        "unknown-scalars": with_(extra_s="x", extra_n=-1.5e3, extra_t=True, extra_f=False, extra_0=None),
        "unknown-nested": with_(extra={"a": [1, {"b": None}]}),
        "escape-in-string": with_(host='a\\"b\n'),
        "escape-in-key": plain.replace(b'"host"', b'"ho\\u0073t"'),
        "control-char": with_(host="a\u0001b"),
        "utf8-2-3-4": with_(host="\u00e9\u20ac\U0001f600", app_name="\u0800\uffff\U00010000\U0010ffff"),
        "utf8-invalid": plain.replace(b'"driver"', b'"\xc0\xaf\xed\xa0\x80\xf4\x90\x80\x80\xff"'),
        "utf8-truncated": plain.replace(b'"driver"', b'"\xe2\x82"'),
        "int-limits": with_(stage_id=-(2**63), task_id=2**63 - 1, duration_ms=0),
        "int-beyond": with_(task_id=2**63, stage_id=-(2**63) - 1, duration_ms=2**64),
        "int-digits": plain.replace(b'"duration_ms":50', b'"duration_ms":00000000000000000000050'),
        "int-negative-zero": plain.replace(b'"duration_ms":50', b'"duration_ms":-0'),
        "fraction-exponent": with_(duration_ms=50.0, run_time_ms=1e3, extra=-0.5e-7),
        "quoted-number": with_(duration_ms="50"),
        "bool-as-int": with_(speculative=1),
        "bools": with_(speculative=True) + b"\x00" + with_(speculative=False),
        "null-known": with_(host=None),
        "enum-bad": with_(locality="MOON"),
        "enum-each": b"\x00".join(
            with_(locality=x, seq=i)
            for i, x in enumerate(["PROCESS_LOCAL", "NODE_LOCAL", "RACK_LOCAL", "NO_PREF", "ANY"], 10)
        ),
        "schema-version-string": with_(schema_version="2"),
        "schema-version-float": with_(schema_version=2.0),
        "schema-version-next": with_(schema_version=2),
        "event-time-max": with_(event_time_ms=2**63 - 1),
        "event-type-object": with_(event_type={"password": "canary"}),
        "unknown-type": with_(event_type="gpu_kernel", kernel="matmul"),
        "deep": with_(event_type="gpu_kernel", x=json.loads("[" * 300 + "]" * 300)),
        "too-large": with_(failure_message="x" * 5000),
        # unknown keys are skipped by the reader's scalar scanner: every number form, good and bad
        "number-forms": b"\x00".join(
            plain[:-1] + b',"extra":' + n + b"}"
            for n in (
                b"0",
                b"-0",
                b"12",
                b"-12",
                b"1.5",
                b"1.",
                b"1.e5",
                b"1e5",
                b"1E+5",
                b"1e-5",
                b"1e",
                b"1e+",
                b"-",
                b"-x",
                b"01",
                b".5",
                b"+1",
                b"tru",
                b"nul",
                b"fals",
                b'"x',
                b"[1]",
                b"{}",
            )
        ),
        "minus-at-end": b'{"schema_version":-',
    }
    return seeds


def main() -> None:
    HERE.mkdir(exist_ok=True)
    for old in HERE.iterdir():
        if not old.name.startswith("found-"):  # found-*: inputs the fuzzer found (a merged, minimised corpus)
            old.unlink()
    for name, data in _seeds().items():
        digest = hashlib.sha1(data).hexdigest()[:8]  # noqa: S324 - a file name, not security
        (HERE / f"{name}-{digest}").write_bytes(data)
    print(f"{len(list(HERE.iterdir()))} seeds in {HERE}")  # noqa: T201


if __name__ == "__main__":
    main()
