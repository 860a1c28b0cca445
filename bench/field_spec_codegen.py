"""Benchmark: the two ``exec`` code generators against spec-driven interpreters, on the same events, side by side.

    python -m bench.field_spec_codegen [--events 20000] [--repeat 5]

Issue 13 keeps generated code only where it pays. The generators and what they are measured against:

1. ``schemas.rows.columnizer`` (a batch of event dicts -> columns; the collector's decode for every table that is
   not flat, the streaming sink) against two interpreters over the same ``ColumnSpec`` list: ``rows.columns``
   (the reference: walks each column's path per value) and closures built once per column from the spec (one call
   per value, no ``exec``);
2. ``schemas.rows.flattener`` (one event -> one row dict; ``RowBuilder``) against ``rows.flatten``, its reference;
3. the generator that was ``collector.checks.ObjectRule.compile`` (presence and nulls of a batch, one generated
   comprehension; kept here as ``_compiled_object_rule``, verbatim) against ``ObjectRule.bad``, the interpreter
   that replaced it (inline comprehension for a level without nested models, ``ObjectRule.ok`` per event else).

Events: realistic ``task_end`` dicts (``bench/_collector_data.py``, zero counters left out as the listener does)
and ``stage_completed`` / ``aqe_plan_update`` examples (nested quantiles, parallel arrays). Every interpreter's
output is checked equal to the generated code's before it is timed. Time: best of ``--repeat`` runs,
``time.perf_counter``; per event. Prints one line per figure; never fails the suite.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from bench._collector_data import task_events
from sparktap.collector.checks import ObjectRule, compile_rules
from sparktap.schemas.ddl import ColumnSpec, TableSpec, table_for
from sparktap.schemas.examples import example_event
from sparktap.schemas.rows import columnizer, columns, flatten, flattener, json_text

Events = Sequence[Mapping[str, Any]]


def _best(function: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        best = min(best, time.perf_counter() - start)
    return best


def _getter(col: ColumnSpec) -> Callable[[Mapping[str, Any]], Any]:
    """One closure per column, built from the spec (the interpreter one would write instead of ``exec``)."""
    default = col.default
    fresh = isinstance(default, list | dict)
    if col.encoding in ("each", "each_json"):
        outer, inner, item_default = col.path[0], col.path[1], col.item_default
        as_json = col.encoding == "each_json"

        def each(e: Mapping[str, Any]) -> Any:
            return [
                item_default if (v := it.get(inner)) is None else json_text(v) if as_json else v
                for it in (e.get(outer) or ())
            ]

        return each
    parents, key = col.path[:-1], col.path[-1]
    as_json = col.encoding == "json"
    nullable = col.nullable and not as_json

    def value(e: Mapping[str, Any]) -> Any:
        node: Any = e
        for parent in parents:
            node = node.get(parent) or {}
        v = node.get(key, value)  # the closure itself marks "missing"
        if v is value:
            return (list(default) if isinstance(default, list) else dict(default)) if fresh else default
        if v is None:
            return None if nullable else default
        return json_text(v) if as_json else v

    return value


def _closure_columns(table: TableSpec) -> Callable[[Events], dict[str, list[Any]]]:
    getters = [(col.name, _getter(col)) for col in table.columns]
    return lambda events: {name: [get(e) for e in events] for name, get in getters}


def _compiled_object_rule(rule: ObjectRule) -> Callable[[Events], list[int]]:
    """The removed ``ObjectRule.compile``: ``bad(events)`` generated as one comprehension."""
    namespace: dict[str, Any] = {"_R": rule.required, "_nulls_ok": rule.nulls_ok}
    terms = ["e.keys() >= _R", "(None not in e.values() or _nulls_ok(e))"]
    for j, (key, required, nested) in enumerate(rule.nested):
        namespace[f"_N{j}"] = nested.ok
        if required:
            terms.append(f"(type(_v := e.get({key!r})) is dict and _N{j}(_v))")
        else:
            terms.append(f"((_v := e.get({key!r})) is None or (type(_v) is dict and _N{j}(_v)))")
    source = f"def _bad(events):\n    return [i for i, e in enumerate(events) if not ({' and '.join(terms)})]\n"
    exec(compile(source, "<object rule>", "exec"), namespace)  # noqa: S102 - our own field names, repr-quoted
    function: Callable[[Events], list[int]] = namespace["_bad"]
    return function


def _events(event_type: str, count: int) -> list[dict[str, Any]]:
    if event_type == "task_end":
        return list(task_events(count))
    base = example_event(event_type).model_dump()
    return [{**base, "seq": seq} for seq in range(1, count + 1)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    n, repeat = args.events, args.repeat
    for event_type in ("task_end", "stage_completed", "aqe_plan_update"):
        table = table_for(event_type)
        events = _events(event_type, n)
        generated = columnizer(table)
        closures = _closure_columns(table)
        expected = generated(events)
        if columns(events, table) != expected or closures(events) != expected:
            raise SystemExit(f"{event_type}: an interpreter's columns differ from the generated ones")
        gen = _best(lambda: generated(events), repeat)  # noqa: B023 - called before the next iteration
        ref = _best(lambda: columns(events, table), repeat)  # noqa: B023
        clo = _best(lambda: closures(events), repeat)  # noqa: B023
        width = len(table.columns)
        print(
            f"columns {event_type:<16} ({width:>3} columns): generated {gen / n * 1e6:6.2f} µs/event, "
            f"closures {clo / n * 1e6:6.2f} µs ({clo / gen:4.2f}x), reference {ref / n * 1e6:6.2f} µs "
            f"({ref / gen:4.2f}x)",
            flush=True,
        )
        row = flattener(table)
        if [row(e) for e in events[:1000]] != [flatten(e, table) for e in events[:1000]]:
            raise SystemExit(f"{event_type}: the reference rows differ from the generated ones")
        gen = _best(lambda: [row(e) for e in events], repeat)  # noqa: B023
        ref = _best(lambda: [flatten(e, table) for e in events], repeat)  # noqa: B023
        print(
            f"rows    {event_type:<16} ({width:>3} columns): generated {gen / n * 1e6:6.2f} µs/event, "
            f"reference {ref / n * 1e6:6.2f} µs ({ref / gen:4.2f}x)",
            flush=True,
        )
        rules = compile_rules(table)
        if not rules.fast:
            print(f"checks  {event_type:<16}: not on the fast path ({rules.why_slow}): no object rule", flush=True)
            continue
        compiled, rule = _compiled_object_rule(rules.objects), rules.objects
        # every 100th event misses a required field: the rule has something to find
        mixed = [{k: v for k, v in e.items() if k != "seq"} if i % 100 == 0 else e for i, e in enumerate(events)]
        if compiled(mixed) != rule.bad(mixed) or len(rule.bad(mixed)) != (n + 99) // 100:
            raise SystemExit(f"{event_type}: the interpreted object rule differs from the compiled one")
        gen = _best(lambda: compiled(mixed), repeat)  # noqa: B023
        ref = _best(lambda: rule.bad(mixed), repeat)  # noqa: B023
        print(
            f"checks  {event_type:<16} (object rule): compiled {gen / n * 1e6:6.3f} µs/event, "
            f"interpreted {ref / n * 1e6:6.3f} µs ({ref / gen:4.2f}x)",
            flush=True,
        )


if __name__ == "__main__":
    main()
