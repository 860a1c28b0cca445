"""Named detection thresholds with the documented defaults (``docs/architecture.md``, Detection).

One config object, kubernetes-mixin ``_config`` style: every number a rule compares against has a name, a
default taken from the Detection table, and a type. Each rule declares its own group (``Config`` of its module
in ``detection/rules/``); ``Thresholds`` composes them, one field per rule, plus ``running`` and ``streaming`` (the
window of micro-batches both streaming rules read). The SQL builders
render these values as literals (``detection/sql.py``), never user text. Override with
``Thresholds(data_skew={"min_max_bytes": ...})`` or, in a process,
``SPARKTAP_ALERTS__THRESHOLDS__DATA_SKEW__MIN_MAX_BYTES=...``.

Severity ladders: a rule with three rungs reports ``info`` from the first, ``warning`` from the second (the "fires
when" value of the Detection table) and ``critical`` from the third. Only ``warning`` and above are notified by
default (``AlertSettings.min_severity``); ``info`` findings show on the dashboards.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from pydantic import Field, create_model, model_validator

from sparktap.detection.registry import RULES
from sparktap.detection.rule import SEVERITIES, GiB, Group, KiB, MiB, Severity

__all__ = [
    "DEFAULT_THRESHOLDS",
    "SEVERITIES",
    "GiB",
    "KiB",
    "MiB",
    "RunningStages",
    "Severity",
    "StreamingWindow",
    "Thresholds",
]


class RunningStages(Group):
    """Partial evaluation of stages still running, from their finished tasks (``task_end``)."""

    enabled: bool = True
    min_finished_tasks: Annotated[int, Field(ge=1)] = 20


class StreamingWindow(Group):
    """The micro-batches the streaming rules look at: each query run's last ``batches`` progress events, and at
    least ``min_batches`` of them before a streaming rule judges."""

    batches: Annotated[int, Field(ge=2)] = 10
    min_batches: Annotated[int, Field(ge=2)] = 5

    @model_validator(mode="after")
    def _within(self) -> StreamingWindow:
        if self.min_batches > self.batches:
            raise ValueError(f"min_batches ({self.min_batches}) must not exceed batches ({self.batches})")
        return self


class ThresholdsBase(Group):
    """What every ``Thresholds`` has besides one group per rule."""

    running: RunningStages = RunningStages()
    streaming: StreamingWindow = StreamingWindow()

    if TYPE_CHECKING:  # one field per discovered rule, each the rule's own ``Config``

        def __getattr__(self, name: str) -> Any: ...


if TYPE_CHECKING:

    class Thresholds(ThresholdsBase):
        """Every detection threshold, by rule."""

else:
    Thresholds = create_model(
        "Thresholds",
        __base__=ThresholdsBase,
        __module__=__name__,
        __doc__="Every detection threshold, by rule.",
        **{rule.id: (rule.config, rule.config()) for rule in RULES},
    )

DEFAULT_THRESHOLDS = Thresholds()
