"""The detection rules: one SQL builder per rule of the Detection table (ARCHITECTURE.md), plus the composition
that turns any set of them into one query returning findings.

A rule builder returns ``RuleSql`` parts: expressions over a relation (``stage`` statistics or ``aqe_read`` nodes,
``detection/sql.py``) for the condition, severity, main value, the threshold crossed, named evidence
numbers, a one-line explanation carrying the numbers, and a concrete suggested fix. ``rule_query`` evaluates the
parts of many rules in one pass over each relation (``ARRAY JOIN`` of one tuple per rule), so the stage tables are
read once whatever the number of rules.

Finding columns (every query): cluster, app_id, app_attempt, app_name, job_id, sql_execution_id, stage_id,
stage_attempt, stage_name, node_id, running, rule, severity, value, threshold, evidence_names, evidence_values,
explanation, suggested_fix, detected_at_ms, detected_at. Unknown ids are -1 (job, SQL execution; stage and attempt
for AQE-node findings; node for stage findings).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from sparktap.detection.sql import (
    SqlContext,
    aqe_read_relation,
    lit,
    size_bytes,
    stage_relation,
    strings,
)
from sparktap.detection.thresholds import (
    DEFAULT_THRESHOLDS,
    SEVERITIES,
    Severity,
    Thresholds,
)

Source = Literal["stage", "aqe_read"]

FINDING_COLUMNS: tuple[str, ...] = (
    "cluster", "app_id", "app_attempt", "app_name", "job_id", "sql_execution_id", "stage_id", "stage_attempt",
    "stage_name", "node_id", "running", "rule", "severity", "value", "threshold", "evidence_names",
    "evidence_values", "explanation", "suggested_fix", "detected_at_ms", "detected_at",
)


@dataclass(frozen=True)
class RuleSql:
    """One rule over one relation. ``derived`` are named helper expressions (computed once per row, visible to all
    the other expressions); ``severity`` may be '' for "does not fire" and is only used where ``condition`` holds."""

    rule: str
    source: Source
    condition: str
    severity: str
    value: str
    threshold: str
    evidence: tuple[tuple[str, str], ...]
    explanation: str
    fix: str
    derived: tuple[tuple[str, str], ...] = ()
    needs: frozenset[str] = field(default_factory=frozenset)

    def as_tuple(self) -> str:
        names = strings(n for n, _ in self.evidence)
        values = "[" + ", ".join(f"toFloat64({e})" for _, e in self.evidence) + "]"
        return (
            f"tuple({lit(self.rule)}, if({self.condition}, {self.severity}, ''), toFloat64({self.value}), "
            f"toFloat64({self.threshold}), {names}, {values}, {self.explanation}, {self.fix})"
        )


@dataclass(frozen=True)
class RuleInfo:
    """What the dashboards, alert rules and runbook say about a rule."""

    id: str
    title: str
    summary: str
    builder: Callable[[Thresholds], list[RuleSql]]


def _ladder(value: str, rungs: Sequence[tuple[Severity, float]]) -> str:
    """multiIf over (severity, rung) from the highest rung down; '' below the lowest."""
    ordered = sorted(rungs, key=lambda r: SEVERITIES.index(r[0]), reverse=True)
    arms = ", ".join(f"{value} >= {lit(rung)}, {lit(sev)}" for sev, rung in ordered)
    return f"multiIf({arms}, '')"


def _secs(expr: str) -> str:
    return f"concat(toString(round(({expr}) / 1000, 1)), ' s')"


def _x(expr: str, digits: int = 1) -> str:
    return f"concat(toString(round({expr}, {digits})), '×')"


def _pct(expr: str) -> str:
    return f"concat(toString(round(100 * ({expr}))), ' %')"


def _size(expr: str) -> str:
    return f"formatReadableSize({expr})"


def _int(expr: str) -> str:
    return f"toString(toUInt64(round({expr})))"


def _join(*parts: str) -> str:
    """SQL fragments joined by commas (separating commas written at a part's ends are tolerated)."""
    return ", ".join(p.strip().strip(",").strip() for p in parts)


def _concat(*parts: str) -> str:
    """concat() of SQL string expressions; separating commas written at a part's ends are tolerated."""
    return "concat(" + ", ".join(p.strip().strip(",").strip() for p in parts) + ")"


# ----------------------------------------------------------------------------------------------- the rules


def task_time_skew(t: Thresholds) -> list[RuleSql]:
    c = t.task_time_skew
    return [RuleSql(
        rule="task_time_skew", source="stage",
        derived=(("tts_ratio", "dur_max / greatest(dur_p50, 1.)"),
                 ("tts_share", "dur_max / greatest(stage_duration_ms, 1.)")),
        condition=(f"tts_ratio >= {lit(c.ratio_warning)} AND dur_max >= {lit(c.min_max_task_ms)} "
                   f"AND tts_share >= {lit(c.min_share_of_stage)}"),
        severity=_ladder("tts_ratio", [("warning", c.ratio_warning), ("critical", c.ratio_critical)]),
        value="tts_ratio",
        threshold=f"if(tts_ratio >= {lit(c.ratio_critical)}, {lit(c.ratio_critical)}, {lit(c.ratio_warning)})",
        evidence=(("max_task_ms", "dur_max"), ("median_task_ms", "dur_p50"), ("ratio", "tts_ratio"),
                  ("stage_duration_ms", "stage_duration_ms"), ("share_of_stage", "tts_share")),
        explanation=_concat("'Slowest task ran ', ", _secs("dur_max"), ", ', ', ", _x("tts_ratio"),
                            ", ' the median task (', ", _secs("dur_p50"), ", '), and was ', ", _pct("tts_share"),
                            ", ' of the stage''s ', ", _secs("stage_duration_ms"), ", ' wall time'"),
        fix=(f"if(sr_max / greatest(sr_p50, 1.) >= {lit(t.data_skew.ratio_warning)} "
             f"OR in_max / greatest(in_p50, 1.) >= {lit(t.data_skew.ratio_warning)}, "
             "'The slow task also reads far more data: enable spark.sql.adaptive.skewJoin.enabled=true (with "
             "spark.sql.adaptive.enabled=true) for joins, or salt the hot key and aggregate in two steps', "
             "'Not explained by data size: check the straggler''s executor/host (GC, disk, noisy neighbour) and "
             "enable speculation (spark.speculation=true)')"),
    )]


def data_skew(t: Thresholds) -> list[RuleSql]:
    c = t.data_skew
    return [RuleSql(
        rule="data_skew", source="stage",
        derived=(("ds_shuffle", "sr_max >= in_max"),
                 ("ds_max", "if(ds_shuffle, sr_max, in_max)"),
                 ("ds_median", "if(ds_shuffle, sr_p50, in_p50)"),
                 ("ds_ratio", "ds_max / greatest(ds_median, 1.)")),
        condition=f"ds_max >= {lit(c.min_max_bytes)} AND ds_ratio >= {lit(c.ratio_info)}",
        severity=_ladder("ds_ratio", [("info", c.ratio_info), ("warning", c.ratio_warning),
                                      ("critical", c.ratio_critical)]),
        value="ds_ratio",
        threshold=(f"multiIf(ds_ratio >= {lit(c.ratio_critical)}, {lit(c.ratio_critical)}, "
                   f"ds_ratio >= {lit(c.ratio_warning)}, {lit(c.ratio_warning)}, {lit(c.ratio_info)})"),
        evidence=(("max_task_bytes", "ds_max"), ("median_task_bytes", "ds_median"), ("ratio", "ds_ratio"),
                  ("from_shuffle", "ds_shuffle")),
        explanation=_concat("'Largest task reads ', ", _size("ds_max"),
                            ", if(ds_shuffle, ' of shuffle data, ', ' of input, '), ", _x("ds_ratio"),
                            ", ' the median task (', ", _size("ds_median"), ", ')'"),
        fix=("if(ds_shuffle, 'A few keys hold most rows: enable spark.sql.adaptive.skewJoin.enabled=true for joins, "
             "salt the hot key (key, floor(rand() * 16)) and aggregate in two steps, or broadcast the small side "
             "with a /*+ BROADCAST(t) */ hint', 'Input splits are uneven: compact the source files or "
             "repartition() right after reading')"),
    )]


def skew_not_fixed(t: Thresholds) -> list[RuleSql]:
    c = t.skew_not_fixed
    return [RuleSql(
        rule="skew_not_fixed", source="stage", needs=frozenset({"properties", "aqe"}),
        derived=(("snf_ratio", "sr_max / greatest(sr_p50, 1.)"),
                 ("snf_reason", "multiIf(lower(prop_aqe) = 'false', 'aqe_off', lower(prop_skew_join) = 'false', "
                                "'skew_join_off', aqe_skew_splits > 0, 'split_not_enough', 'not_applicable')")),
        condition=f"sql_exec >= 0 AND snf_ratio > {lit(c.factor)} AND sr_max > {lit(c.min_partition_bytes)}",
        severity="'warning'",
        value="snf_ratio",
        threshold=lit(c.factor),
        evidence=(("max_task_shuffle_bytes", "sr_max"), ("median_task_shuffle_bytes", "sr_p50"),
                  ("ratio", "snf_ratio"), ("aqe_plan_updates", "aqe_updates"),
                  ("aqe_skewed_partitions", "aqe_skewed_partitions"), ("aqe_skew_splits", "aqe_skew_splits")),
        explanation=_concat(
            "'After AQE a task still reads ', ", _size("sr_max"), ", ' of shuffle data, ', ", _x("snf_ratio"),
            ", ' the median (', ", _size("sr_p50"), ", '): ', ",
            "multiIf(snf_reason = 'aqe_off', 'AQE is off (spark.sql.adaptive.enabled=false)', "
            "snf_reason = 'skew_join_off', 'skew join is disabled (spark.sql.adaptive.skewJoin.enabled=false)', "
            "snf_reason = 'split_not_enough', concat('AQE split ', toString(aqe_skewed_partitions), "
            "' skewed partition(s) into ', toString(aqe_skew_splits), ' but that was not enough'), "
            "'AQE did not treat it as a skewed join (not a sort-merge join, or one key too big to split)')"),
        fix=("multiIf(snf_reason = 'aqe_off', 'Set spark.sql.adaptive.enabled=true and "
             "spark.sql.adaptive.skewJoin.enabled=true', snf_reason = 'skew_join_off', "
             "'Set spark.sql.adaptive.skewJoin.enabled=true', snf_reason = 'split_not_enough', "
             "'Lower spark.sql.adaptive.advisoryPartitionSizeInBytes so skewed partitions split finer, or salt the "
             "hot key', 'Salt the hot key (key, floor(rand() * 16)) and aggregate in two steps, or broadcast the "
             "small side with a /*+ BROADCAST(t) */ hint')"),
    )]


def small_partitions(t: Thresholds) -> list[RuleSql]:
    c = t.small_partitions
    advisory = f"if(sp_prop_advisory > 0, sp_prop_advisory, {lit(c.advisory_partition_bytes)})"
    stage = RuleSql(
        rule="small_partitions", source="stage", needs=frozenset({"properties"}),
        derived=(("sp_prop_advisory", size_bytes("prop_advisory")), ("sp_advisory", advisory),
                 ("sp_suggested", "greatest(1., ceil(greatest(sr_sum, in_sum) / sp_advisory))")),
        condition=f"tasks > {lit(c.min_tasks)} AND dur_p50 < {lit(c.max_median_task_ms)}",
        severity="'warning'",
        value="tasks",
        threshold=lit(c.min_tasks),
        evidence=(("tasks", "tasks"), ("median_task_ms", "dur_p50"), ("bytes_read", "greatest(sr_sum, in_sum)"),
                  ("suggested_partitions", "sp_suggested")),
        explanation=_concat(_int("tasks"), ", ' tasks with a median of ', ", _int("dur_p50"),
                            ", ' ms each: scheduling overhead dominates (', ", _size("greatest(sr_sum, in_sum)"),
                            ", ' read in all)'"),
        fix=_join("if(sr_sum >= in_sum, concat('Use fewer shuffle partitions: spark.sql.shuffle.partitions=', ",
                    _int("sp_suggested"), ", ' (about ', ", _size("sp_advisory"), ", ' each) or let AQE coalesce "
                    "(spark.sql.adaptive.coalescePartitions.enabled=true) and raise "
                    "spark.sql.adaptive.advisoryPartitionSizeInBytes'), 'Read fewer, larger splits: raise "
                    "spark.sql.files.maxPartitionBytes (e.g. 256m) or compact the small input files')"),
    )
    aqe = RuleSql(
        rule="small_partitions", source="aqe_read",
        derived=(("sp_prop_advisory", size_bytes("prop_advisory")), ("sp_advisory", advisory),
                 ("sp_avg", "data_bytes / greatest(partitions, 1.)"),
                 ("sp_suggested", "greatest(1., ceil(data_bytes / sp_advisory))")),
        condition=(f"read_coalesced = 1 AND partitions >= {lit(c.aqe_min_partitions)} "
                   f"AND sp_avg < {lit(c.aqe_max_fraction_of_advisory)} * sp_advisory"),
        severity="'warning'",
        value="sp_avg",
        threshold=f"{lit(c.aqe_max_fraction_of_advisory)} * sp_advisory",
        evidence=(("partitions", "partitions"), ("avg_partition_bytes", "sp_avg"), ("advisory_bytes", "sp_advisory"),
                  ("suggested_partitions", "sp_suggested")),
        explanation=_concat("'AQE coalesced this shuffle read into ', ", _int("partitions"),
                            ", ' partitions of ', ", _size("sp_avg"), ", ' on average, far below the advisory ', ",
                            _size("sp_advisory")),
        fix=_concat("'Set spark.sql.adaptive.coalescePartitions.parallelismFirst=false so AQE targets the advisory "
                    "size (about ', ", _int("sp_suggested"), ", ' partitions), or raise "
                    "spark.sql.adaptive.advisoryPartitionSizeInBytes / lower spark.sql.shuffle.partitions'"),
    )
    return [stage, aqe]


def small_files(t: Thresholds) -> list[RuleSql]:
    c = t.small_files
    return [RuleSql(
        rule="small_files", source="stage",
        derived=(("sf_avg", "out_bytes / greatest(out_files, 1.)"),
                 ("sf_target", f"greatest(1., ceil(out_bytes / {lit(c.target_file_bytes)}))")),
        condition=f"out_files > {lit(c.min_files)} AND sf_avg < {lit(c.max_avg_file_bytes)}",
        severity="'warning'",
        value="out_files",
        threshold=lit(c.min_files),
        evidence=(("files", "out_files"), ("bytes_written", "out_bytes"), ("avg_file_bytes", "sf_avg"),
                  ("suggested_files", "sf_target"), ("files_estimated", "files_estimated")),
        explanation=_concat("'Wrote ', if(files_estimated = 1, '~', ''), ", _int("out_files"),
                            ", ' files averaging ', ", _size("sf_avg"), ", ' (', ", _size("out_bytes"),
                            ", ' in all)'"),
        fix=_concat("'coalesce(', ", _int("sf_target"), ", ') or repartition(', ", _int("sf_target"),
                    ", ') before the write for files of about ', ", _size(lit(c.target_file_bytes)),
                    ", ' (or the /*+ REBALANCE */ hint with AQE; for partitioned output repartition by the partition "
                    "columns)'"),
    )]


def oversized_partition(t: Thresholds) -> list[RuleSql]:
    c = t.oversized_partition
    return [RuleSql(
        rule="oversized_partition", source="stage",
        derived=(("op_max", "greatest(in_max, sr_max)"),
                 ("op_suggested", f"greatest(tasks, ceil(greatest(sr_sum, in_sum) / {lit(512 * 1024 * 1024)}))")),
        condition=f"op_max > {lit(c.max_task_bytes)}",
        severity="'warning'",
        value="op_max",
        threshold=lit(c.max_task_bytes),
        evidence=(("max_task_bytes", "op_max"), ("max_task_input_bytes", "in_max"),
                  ("max_task_shuffle_bytes", "sr_max"), ("tasks", "tasks")),
        explanation=_concat("'One task reads ', ", _size("op_max"),
                            ", if(sr_max >= in_max, ' of shuffle data', ' of input'), ' (limit ', ",
                            _size(lit(c.max_task_bytes)), ", ')'"),
        fix=_join("if(sr_max >= in_max, concat('Split the work: spark.sql.shuffle.partitions=', ",
                    _int("op_suggested"), ", ' or lower spark.sql.adaptive.advisoryPartitionSizeInBytes; salt the "
                    "key if one key is that big'), 'Lower spark.sql.files.maxPartitionBytes (e.g. 128m) or split the "
                    "big unsplittable input files (gzip)')"),
    )]


def shuffle_blowup(t: Thresholds) -> list[RuleSql]:
    c = t.shuffle_blowup
    recent = (f"arraySlice(arrayReverseSort((b, ts) -> ts, sb_prev_bytes, sb_prev_times), 1, {lit(c.history_runs)})")
    # A stage that reads nothing measurable (spark.range, parallelised collections) has no input to compare with.
    write = (f"sb_in > 0 AND sw_sum >= {lit(c.min_write_bytes)} AND sb_write_ratio >= {lit(c.write_ratio_warning)}")
    spill = f"disk_spill_sum >= {lit(c.min_spill_bytes)} AND sb_spill_ratio >= {lit(c.spill_ratio_warning)}"
    hist = (f"sb_runs >= {lit(c.history_min_runs)} AND sb_bytes >= {lit(c.history_min_bytes)} "
            f"AND sb_hist_ratio >= {lit(c.history_ratio_warning)}")
    return [RuleSql(
        rule="shuffle_blowup", source="stage", needs=frozenset({"history"}),
        derived=(
            ("sb_in", "in_sum + sr_sum"),
            ("sb_write_ratio", "sw_sum / greatest(sb_in, 1.)"),
            ("sb_spill_ratio", "disk_spill_sum / greatest(sb_in, 1.)"),
            ("sb_bytes", "greatest(sw_sum, sr_sum)"),
            ("sb_prev_bytes", "arrayFilter((b, a, ts) -> a != app_id AND ts < detected_at_ms, hist_bytes, "
                              "hist_apps, hist_times)"),
            ("sb_prev_times", "arrayFilter((ts, a) -> a != app_id AND ts < detected_at_ms, hist_times, hist_apps)"),
            ("sb_recent", f"arraySort({recent})"),
            ("sb_runs", "length(sb_recent)"),
            ("sb_median", "if(sb_runs > 0, arrayElement(sb_recent, toUInt32(intDiv(sb_runs + 1, 2))), 0.)"),
            ("sb_hist_ratio", "if(sb_runs > 0, sb_bytes / greatest(sb_median, 1.), 0.)"),
            ("sb_write", write), ("sb_spill", spill), ("sb_hist", hist),
        ),
        condition="sb_write OR sb_spill OR sb_hist",
        severity=(f"if((sb_write AND sb_write_ratio >= {lit(c.write_ratio_critical)}) "
                  f"OR (sb_spill AND sb_spill_ratio >= {lit(c.spill_ratio_critical)}) "
                  f"OR (sb_hist AND sb_hist_ratio >= {lit(c.history_ratio_critical)}), 'critical', 'warning')"),
        value="multiIf(sb_write, sb_write_ratio, sb_hist, sb_hist_ratio, sb_spill_ratio)",
        threshold=(f"multiIf(sb_write, {lit(c.write_ratio_warning)}, sb_hist, {lit(c.history_ratio_warning)}, "
                   f"{lit(c.spill_ratio_warning)})"),
        evidence=(("shuffle_write_bytes", "sw_sum"), ("stage_input_bytes", "sb_in"),
                  ("write_ratio", "sb_write_ratio"), ("disk_spill_bytes", "disk_spill_sum"),
                  ("spill_ratio", "sb_spill_ratio"), ("history_median_bytes", "sb_median"),
                  ("history_runs", "sb_runs"), ("history_ratio", "sb_hist_ratio")),
        explanation=("arrayStringConcat(arrayFilter(x -> x != '', ["
                     + "if(sb_write, " + _concat("'Shuffle write ', ", _size("sw_sum"), ", ' is ', ",
                                                 _x("sb_write_ratio"), ", ' the stage input (', ", _size("sb_in"),
                                                 ", ')'") + ", ''), "
                     + "if(sb_hist, " + _concat("'shuffle ', ", _size("sb_bytes"), ", ' is ', ",
                                                _x("sb_hist_ratio"), ", ' the median of its last ', ",
                                                "toString(sb_runs), ' runs (', ", _size("sb_median"), ", ')'")
                     + ", ''), "
                     + "if(sb_spill, " + _concat("'disk spill ', ", _size("disk_spill_sum"), ", ' is ', ",
                                                 _pct("sb_spill_ratio"), ", ' of the bytes processed'") + ", '')"
                     + "]), '; ')"),
        fix=("arrayStringConcat(arrayFilter(x -> x != '', ["
             "if(sb_write, 'Rows multiply before the shuffle (explode/flatMap/join fan-out): filter and select only "
             "needed columns before it, aggregate right after it, or broadcast the small join side', ''), "
             "if(sb_hist, 'Compare with the previous runs: input growth or a changed join/explode', ''), "
             "if(sb_spill, 'Give tasks more memory: raise spark.sql.shuffle.partitions or spark.executor.memory', '')"
             "]), '; ')"),
    )]


def remote_heavy_shuffle(t: Thresholds) -> list[RuleSql]:
    c = t.remote_heavy_shuffle
    return [RuleSql(
        rule="remote_heavy_shuffle", source="stage",
        derived=(("rh_remote", "sr_remote_sum / greatest(sr_sum, 1.)"),
                 ("rh_wait", "fetch_wait_ms / greatest(run_sum, 1.)")),
        condition=(f"sr_sum > 0 AND rh_remote >= {lit(c.min_remote_share)} AND rh_wait >= "
                   f"{lit(c.min_fetch_wait_share)} AND run_sum >= {lit(c.min_run_time_ms)}"),
        severity="'warning'",
        value="rh_remote",
        threshold=lit(c.min_remote_share),
        evidence=(("remote_share", "rh_remote"), ("shuffle_read_bytes", "sr_sum"), ("fetch_wait_ms", "fetch_wait_ms"),
                  ("fetch_wait_share", "rh_wait")),
        explanation=_concat(_pct("rh_remote"), ", ' of ', ", _size("sr_sum"),
                            ", ' shuffle read was remote and tasks waited ', ", _pct("rh_wait"),
                            ", ' of their run time for fetches'"),
        fix=("'Use fewer, larger executors (more cores each) so more blocks are local; broadcast the small join side "
             "(/*+ BROADCAST(t) */) to skip the shuffle; raise spark.reducer.maxSizeInFlight; enable push-based "
             "shuffle (spark.shuffle.push.enabled) where supported'"),
    )]


def task_failures(t: Thresholds) -> list[RuleSql]:
    c = t.task_failures
    return [RuleSql(
        rule="task_failures", source="stage",
        derived=(("tf_ratio", "failed / greatest(attempted, 1.)"),),
        condition=f"failed > 0 AND tf_ratio >= {lit(c.ratio_info)}",
        severity=_ladder("tf_ratio", [("info", c.ratio_info), ("warning", c.ratio_warning),
                                      ("critical", c.ratio_critical)]),
        value="tf_ratio",
        threshold=(f"multiIf(tf_ratio >= {lit(c.ratio_critical)}, {lit(c.ratio_critical)}, "
                   f"tf_ratio >= {lit(c.ratio_warning)}, {lit(c.ratio_warning)}, {lit(c.ratio_info)})"),
        evidence=(("failed_tasks", "failed"), ("attempted_tasks", "attempted"), ("ratio", "tf_ratio")),
        explanation=_concat(_int("failed"), ", ' of ', ", _int("attempted"), ", ' task attempts failed (', ",
                            _pct("tf_ratio"), ", ')', if(stage_status = 'failed', ' and the stage failed', '')"),
        fix=("'Read the failure reasons (task_end.failure_class / Spark UI): OOM -> more partitions or "
             "spark.executor.memoryOverhead; FetchFailed -> lost executors (memory, preemption); fix the cause "
             "before raising spark.task.maxFailures'"),
    )]


def gc_pressure(t: Thresholds) -> list[RuleSql]:
    c = t.gc_pressure
    return [RuleSql(
        rule="gc_pressure", source="stage",
        derived=(("gc_ratio", "gc_sum / greatest(run_sum, 1.)"),),
        condition=f"run_sum >= {lit(c.min_run_time_ms)} AND gc_ratio >= {lit(c.ratio_info)}",
        severity=_ladder("gc_ratio", [("info", c.ratio_info), ("warning", c.ratio_warning),
                                      ("critical", c.ratio_critical)]),
        value="gc_ratio",
        threshold=(f"multiIf(gc_ratio >= {lit(c.ratio_critical)}, {lit(c.ratio_critical)}, "
                   f"gc_ratio >= {lit(c.ratio_warning)}, {lit(c.ratio_warning)}, {lit(c.ratio_info)})"),
        evidence=(("gc_ms", "gc_sum"), ("run_ms", "run_sum"), ("ratio", "gc_ratio")),
        explanation=_concat("'Tasks spent ', ", _pct("gc_ratio"), ", ' of their run time in GC (', ",
                            _secs("gc_sum"), ", ' of ', ", _secs("run_sum"), ", ')'"),
        fix=("'Give each task more heap: raise spark.executor.memory or lower spark.executor.cores; use more "
             "partitions, cache serialized (MEMORY_AND_DISK_SER) or less; try G1GC "
             "(spark.executor.extraJavaOptions=-XX:+UseG1GC)'"),
    )]


RULES: tuple[RuleInfo, ...] = (
    RuleInfo("task_time_skew", "Task-time skew", "a straggler task dominates the stage", task_time_skew),
    RuleInfo("data_skew", "Data skew", "one task reads far more data than the median task", data_skew),
    RuleInfo("skew_not_fixed", "Skew AQE did not fix", "a skewed shuffle partition survived AQE", skew_not_fixed),
    RuleInfo("small_partitions", "Small partitions", "many tiny tasks or partitions", small_partitions),
    RuleInfo("small_files", "Small files", "a write produced many tiny files", small_files),
    RuleInfo("oversized_partition", "Oversized partition", "one task reads more than a partition should",
             oversized_partition),
    RuleInfo("shuffle_blowup", "Shuffle blow-up", "shuffle or spill far larger than the input or than usual",
             shuffle_blowup),
    RuleInfo("remote_heavy_shuffle", "Remote-heavy shuffle", "shuffle reads are remote and tasks wait for them",
             remote_heavy_shuffle),
    RuleInfo("task_failures", "Task failures", "many task attempts failed", task_failures),
    RuleInfo("gc_pressure", "GC pressure", "tasks spend their time in garbage collection", gc_pressure),
)
RULE_IDS: tuple[str, ...] = tuple(r.id for r in RULES)
RULES_BY_ID: dict[str, RuleInfo] = {r.id: r for r in RULES}


# ----------------------------------------------------------------------------------------------- composition


def _projection(source: Source) -> str:
    stage = "stage_id, stage_attempt, toInt64(-1) AS node_id" if source == "stage" else \
        "stage_id, stage_attempt, node_id"
    return (
        f"cluster, app_id, app_attempt, app_name, job AS job_id, sql_exec AS sql_execution_id, {stage}, stage_name, "
        "running, tupleElement(f, 1) AS rule, tupleElement(f, 2) AS severity, tupleElement(f, 3) AS value, "
        "tupleElement(f, 4) AS threshold, tupleElement(f, 5) AS evidence_names, tupleElement(f, 6) AS evidence_values, "
        "tupleElement(f, 7) AS explanation, tupleElement(f, 8) AS suggested_fix, detected_at_ms, "
        "toDateTime(intDiv(detected_at_ms, 1000)) AS detected_at"
    )


def _source_query(source: Source, parts: list[RuleSql], relation: str) -> str:
    derived: dict[str, str] = {}
    for part in parts:
        for name, expr in part.derived:
            if derived.setdefault(name, expr) != expr:
                raise ValueError(f"derived column {name!r} defined twice with different expressions")
    extra = "".join(f",\n    {expr} AS {name}" for name, expr in derived.items())
    tuples = ",\n    ".join(p.as_tuple() for p in parts)
    return (
        f"SELECT {_projection(source)}\nFROM\n(\nSELECT *{extra}\nFROM\n(\n{relation}\n)\n)\n"
        f"ARRAY JOIN [\n    {tuples}\n] AS f\nWHERE severity != ''"
    )


def rule_parts(rules: Iterable[str] | None = None, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> list[RuleSql]:
    """The SQL parts of the chosen rules (all by default), in the order of ``RULES``."""
    chosen = set(RULE_IDS if rules is None else rules)
    unknown = chosen - set(RULE_IDS)
    if unknown:
        raise ValueError(f"unknown detection rule(s) {sorted(unknown)}; known: {', '.join(RULE_IDS)}")
    return [part for info in RULES if info.id in chosen for part in info.builder(thresholds)]


def rule_query(
    rules: Iterable[str] | None = None,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    ctx: SqlContext | None = None,
    min_severity: Severity = "info",
) -> str:
    """One query returning the findings of the chosen rules (``FINDING_COLUMNS``), most severe first.

    Times are Grafana macros (``$__timeFilter``, ``$__fromTime``, ``$__toTime``): expand them with
    ``sparktap.detection.macros.expand`` to run the query outside Grafana."""
    ctx = ctx or SqlContext()
    parts = rule_parts(rules, thresholds)
    queries: list[str] = []
    stage_parts = [p for p in parts if p.source == "stage"]
    if stage_parts:
        needs = frozenset().union(*(p.needs for p in stage_parts))
        running = thresholds.running.min_finished_tasks if thresholds.running.enabled else None
        relation = stage_relation(ctx, needs, running, thresholds.shuffle_blowup.history_days)
        queries.append(_source_query("stage", stage_parts, relation))
    aqe_parts = [p for p in parts if p.source == "aqe_read"]
    if aqe_parts:
        queries.append(_source_query("aqe_read", aqe_parts, aqe_read_relation(ctx)))
    levels = SEVERITIES[SEVERITIES.index(min_severity):]
    rank = f"indexOf({strings(SEVERITIES)}, severity)"
    return (
        "SELECT * FROM\n(\n" + "\nUNION ALL\n".join(queries) + "\n)\n"
        f"WHERE severity IN ({', '.join(lit(s) for s in levels)})\n"
        f"ORDER BY {rank} DESC, detected_at_ms DESC, rule, cluster, app_id, stage_id, node_id"
    )
