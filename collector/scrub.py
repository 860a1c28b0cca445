"""The collector's second pass over every value a user controls (promise 25): the listener already cleaned it
(Redactor.java); this pass makes the store safe whatever produced the message (an older listener, another producer,
an imported log).

The contract marks each such string (``schemas/types.py``, ``FieldSpec.text``): a name (``Label``) or free text; the
keys of a dict of marked strings (``app_start.tags`` and ``properties``) are names (``clean_dict``). The
pass is the listener's own path (``sparktap.listener.redaction.clean``): control characters removed, the one pattern
file masked, cut to the kind's cap with ``…[truncated N chars]``. It never drops the event.

Cheap on the fast path: the column rules (``collector/checks.py``) and the Arrow path ask only whether each *distinct*
value of a column is clean already, and a value found clean is remembered (names and statuses repeat from batch to
batch), so a batch of listener events costs a set per column. Only the events holding a value that is not clean go to
the slow path, where ``scrub`` rewrites it after the contract's validation.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel

from sparktap.listener.redaction import clean, is_clean
from sparktap.schemas.fields import FieldSpec, fields_of
from sparktap.schemas.types import NAME, UserText

_CLEAN: dict[UserText, set[str]] = {}
"""per kind, values found clean already (each set bounded by ``_CLEAN_MAX``)"""
_CLEAN_MAX = 16_384


def clean_enough(value: str, spec: UserText) -> bool:
    """Whether ``value`` is stored as it is: clean by the listener's path (remembered once found clean)."""
    known = _CLEAN.setdefault(spec, set())
    if value in known:
        return True
    if not is_clean(value, spec):
        return False
    if len(known) >= _CLEAN_MAX:
        known.clear()
    known.add(value)
    return True


def bad_values(values: Iterable[Any], spec: UserText) -> set[Any]:
    """The distinct ``values`` that are not clean strings (``None`` is fine here: the null rules judge it)."""
    return {v for v in values if v is not None and not (type(v) is str and clean_enough(v, spec))}


def clean_value(value: str, spec: UserText) -> str:
    """``value`` as it is stored: itself when clean, else through the listener's path."""
    return value if clean_enough(value, spec) else clean(value, spec)


@functools.cache
def _marked(model: type[BaseModel]) -> tuple[FieldSpec, ...]:
    """The fields of ``model`` holding a marked string somewhere (itself, a list's element, a dict's value, a nested
    model)."""
    out = []
    for spec in fields_of(model):
        item = spec.item
        if (
            spec.text is not None
            or (item is not None and (item.text is not None or item.kind == "model"))
            or spec.kind == "model"
        ):
            out.append(spec)
    return tuple(out)


def scrub(model: type[BaseModel], obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` (a validated ``model``'s dump) with every marked string cleaned, in place; returned for convenience."""
    for spec in _marked(model):
        value = obj.get(spec.name)
        if value is None:
            continue
        item = spec.item
        if spec.text is not None:
            if type(value) is str:
                obj[spec.name] = clean_value(value, spec.text)
        elif spec.kind == "model" and spec.model is not None and type(value) is dict:
            scrub(spec.model, value)
        elif item is not None and type(value) is list:
            if item.text is not None:
                obj[spec.name] = [clean_value(v, item.text) if type(v) is str else v for v in value]
            elif item.model is not None:
                for v in value:
                    if type(v) is dict:
                        scrub(item.model, v)
        elif item is not None and item.text is not None and type(value) is dict:
            obj[spec.name] = clean_dict(value, item.text)
    return obj


def clean_dict(value: dict[Any, Any], spec: UserText) -> dict[Any, Any]:
    """A dict of marked strings as stored: each value through its kind's path, each key through the name path (a
    property or tag name is a name a user can choose: ``spark.sparktap.tag.<key>``, ``--conf``); two keys that clean
    to the same name keep the first value."""
    out: dict[Any, Any] = {}
    for k, v in value.items():
        key = clean_value(k, NAME) if type(k) is str else k
        out.setdefault(key, clean_value(v, spec) if type(v) is str else v)
    return out


def clean_keys_enough(value: dict[Any, Any]) -> bool:
    """Whether every key of ``value`` is stored as it is (the fast path's check of a dict's keys)."""
    return all(type(k) is not str or clean_enough(k, NAME) for k in value)
