"""The SQL plan events: estimates against actuals per physical plan node at the end of a SQL execution, and the
adaptive (AQE) plan's updates and shuffle reads (``sparktap.schemas.events`` re-exports them)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from sparktap.schemas.envelope import Envelope, _Model
from sparktap.schemas.types import Bytes, Count, Id


class PlanNode(_Model):
    """One physical plan node of a finished SQL execution: the optimizer's estimate beside what it produced."""

    node_id: Id = Field(description="Spark's plan node id (SparkPlan.id)")
    parent_id: Annotated[int, Field(ge=-1)] = Field(default=-1, description="-1 for the root")
    operator: str = Field(description="node name: Scan parquet default.t, SortMergeJoin, HashAggregate …")
    est_rows: Annotated[int, Field(ge=-1)] = Field(default=-1, description="optimizer's row estimate; -1: none")
    est_bytes: Annotated[int, Field(ge=-1)] = Field(default=-1, description="optimizer's size estimate; -1: none")
    est_source: Literal["", "plan", "catalog"] = Field(
        default="", description="plan: the plan's statistics (CBO); catalog: the table's last ANALYZE"
    )
    actual_rows: Annotated[int, Field(ge=-1)] = Field(default=-1, description="numOutputRows; -1: no such metric")
    codegen_stage: Annotated[int, Field(ge=-1)] = Field(
        default=-1, description="the whole-stage codegen stage the node runs in; -1: none"
    )
    codegen_fallback: str = Field(default="", description="why a node able to take part in codegen runs without it")
    codegen_duration_ms: Annotated[int, Field(ge=-1)] = Field(
        default=-1, description="a WholeStageCodegen node's pipeline time"
    )
    codegen_method_bytes: Annotated[int, Field(ge=-1)] = Field(
        default=-1,
        description="a WholeStageCodegen node's largest generated method in bytecode bytes (Spark runs the stage "
        "interpreted past spark.sql.codegen.hugeMethodLimit); -1: not measured",
    )
    time_ms: Annotated[int, Field(ge=-1)] = Field(
        default=-1,
        description="the node's own time from its SQL timing metrics, in ms: a native operator's 'exclusive time' "
        "where it has one, else the sum of its timing metrics but cumulative, stage and driver ones (a "
        "WholeStageCodegen node: its pipeline time); -1: no timing metric",
    )
    shuffle_write_bytes: Annotated[int, Field(ge=-1)] = Field(
        default=-1,
        description="shuffle bytes the node wrote by its SQL metrics (an exchange; Photon's shuffle sink, whose "
        "shuffle is in no task metric); -1: no such metric",
    )
    shuffle_read_bytes: Annotated[int, Field(ge=-1)] = Field(
        default=-1, description="shuffle bytes read (remote + local) by its SQL metrics; -1: no such metric"
    )
    spill_bytes: Annotated[int, Field(ge=-1)] = Field(
        default=-1, description="bytes spilled to disk by its SQL metrics (a sort, an aggregate); -1: no such metric"
    )


class SqlPlanStats(Envelope):
    """At the end of a SQL execution: estimates vs actual rows and codegen, per physical plan node."""

    event_type: Literal["sql_plan_stats"] = "sql_plan_stats"
    execution_id: Id
    whole_stage_codegen: bool = False
    codegen_max_fields: Count = 0
    codegen_huge_method_limit: Count = 0
    nodes: list[PlanNode] = Field(default_factory=list, description="pre-order, at most spark.sparktap.plan.maxNodes")
    nodes_omitted: Count = 0


# --------------------------------------------------------------------------------------------- AQE


class AqeShuffleReadNode(_Model):
    """An AQE shuffle read (AQEShuffleReadExec) in an adaptive plan, with the kinds of read it does."""

    node_id: Id = Field(description="position of the node in a pre-order walk of the plan")
    coalesced: bool = False
    skewed: bool = False
    local: bool = Field(default=False, description="local shuffle reader (after a switch to broadcast join)")
    description: str = ""
    metric_accumulators: dict[str, int] = Field(
        default_factory=dict, description="SQL metric name -> accumulator id, to decode driver updates"
    )


class AqePlanUpdate(Envelope):
    """Decoded from SparkListenerSQLAdaptiveExecutionUpdate."""

    event_type: Literal["aqe_plan_update"] = "aqe_plan_update"
    execution_id: Id
    final_plan: bool = False
    join_strategies: list[str] = Field(default_factory=list, description="join operators in the new plan")
    previous_join_strategies: list[str] = Field(default_factory=list, description="in the plan before this update")
    shuffle_reads: list[AqeShuffleReadNode] = Field(default_factory=list)


class AqeShuffleRead(Envelope):
    """Decoded from the driver accumulator updates of one AQE shuffle read node."""

    event_type: Literal["aqe_shuffle_read"] = "aqe_shuffle_read"
    execution_id: Id
    node_id: Id
    coalesced: bool = False
    skewed: bool = False
    local: bool = False
    num_partitions: Count | None = None
    partition_data_size_bytes: Bytes | None = None
    num_skewed_partitions: Count | None = None
    num_skewed_splits: Count | None = None
    num_coalesced_partitions: Count | None = None
