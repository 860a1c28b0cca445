"""The stage rows the stage rules read, finished and running (``stage_relation.py`` joins their enrichments on): a
finished stage attempt from the listener's ``stage_completed`` aggregates, corrected by its ``task_end`` rows where
some of its task ends were not successes; a running one aggregated over its finished tasks.

Which task ends are failures, and over which the medians are taken, follows Spark: a ``Resubmitted`` marker repeats a
task that had succeeded (re-queued after its executor was lost), a kill or a denied commit is no failure of the task,
and a failed or killed attempt's partial input is no baseline for a median task. Same dialect as ``sql.py``.
"""

# ruff: noqa: S608 - SQL is assembled from our own identifiers and typed threshold literals (lit()), never from user text.

from __future__ import annotations

from sparktap.detection.sql import SqlContext, lit, scan_input_used, stage_input
from sparktap.schemas.ddl import quote_literal


def completed_stages(ctx: SqlContext) -> str:
    """One row per finished stage attempt, from the aggregates in ``stage_completed``, corrected by its task rows
    where it had unsuccessful task ends (``task_corrections``): medians over the successful attempts (where its task
    rows, which may be sampled or off, hold a success), ``Resubmitted`` markers out of the failures and the attempts,
    kills reported as failures counted as kills; and the task ends after its completion (a speculative copy killed
    once the stage finished, a cancelled stage's tasks) added to its failures, attempts, run time and duration, as
    Spark's History Server adds them. A stage attempt without such rows keeps the listener's figures. The
    join is in this SELECT, not a level below: 18.16 analyses a nested subquery again at every level above it."""
    return f"""SELECT
    cluster, app_id, app_attempt,
    app_name, toInt64(ifNull(job_id, -1)) AS job, toInt64(ifNull(sql_execution_id, -1)) AS sql_exec,
    stage_id, stage_attempt, name AS stage_name, toUInt8(0) AS running, toString(status) AS stage_status,
    toInt64(ifNull(completion_time_ms, event_time_ms)) AS detected_at_ms,
    toFloat64(duration_ms) AS stage_duration_ms, toFloat64(num_tasks) AS tasks,
    toFloat64(tasks_failed) - least(toFloat64(tasks_failed), {MARKERS} + {DENIED}) + c_late_failed AS failed,
    greatest(toFloat64(tasks_succeeded + tasks_failed + tasks_killed) - {MARKERS}, 0.) + c_late_attempted
        AS attempted,
    {succeeded_or("task_duration_ms_p50")} AS dur_p50, toFloat64(task_duration_ms_max) AS dur_max,
    toFloat64(run_time_ms_sum) + c_late_run AS run_sum, toFloat64(gc_time_ms_sum) AS gc_sum,
    if({MEDIANS_CORRECTED}, {SUCCEEDED_INPUT_P50}, {stage_input("p50")}) AS in_p50, {stage_input("max")} AS in_max,
    {stage_input("sum")} AS in_sum,
    {succeeded_or("shuffle_read_bytes_p50")} AS sr_p50, toFloat64(shuffle_read_bytes_max) AS sr_max,
    if({SQL_READ}, toFloat64(ifNull(sql_shuffle_read_bytes, 0)), toFloat64(shuffle_read_bytes_sum)) AS sr_sum,
    if({SQL_READ}, toFloat64(ifNull(sql_shuffle_read_remote_bytes, 0)), toFloat64(shuffle_read_remote_bytes_sum))
    AS sr_remote_sum,
    if({SQL_WRITE}, toFloat64(ifNull(sql_shuffle_write_bytes, 0)), toFloat64(shuffle_write_bytes_sum)) AS sw_sum,
    if({SQL_SPILL}, toFloat64(ifNull(sql_spill_bytes, 0)), toFloat64(disk_spill_bytes_sum)) AS disk_spill_sum,
    toFloat64(memory_spill_bytes_sum) AS mem_spill_sum, toFloat64(shuffle_fetch_wait_ms) AS fetch_wait_ms,
    toFloat64(ifNull(output_files, if(output_bytes > 0, num_tasks, 0))) AS out_files,
    toUInt8(isNull(output_files) AND output_bytes > 0) AS files_estimated, toFloat64(output_bytes) AS out_bytes,
    toFloat64(task_duration_ms_sum) + c_late_dur AS dur_sum, toFloat64(slots) AS slots,
    {succeeded_or("shuffle_read_records_p50")} AS srr_p50, toFloat64(shuffle_read_records_max) AS srr_max,
    {succeeded_or("input_records_per_task_p50")} AS inr_p50,
    toFloat64(input_records_per_task_max) AS inr_max,
    toFloat64(shuffle_local_blocks + shuffle_remote_blocks) AS blocks, toFloat64(input_records) AS in_records,
    toFloat64(shuffle_records_written) AS sw_records, toFloat64(shuffle_records_read) AS sr_records,
    toUInt8({scan_input_used()}) AS in_from_scan, toUInt8({SQL_READ} OR {SQL_WRITE} OR {SQL_SPILL}) AS shuffle_from_sql
FROM
(
    SELECT * FROM {ctx.view("stage_completed")}
    {ctx.where()}
) AS l
ANY LEFT JOIN
(
{task_corrections(ctx)}
) AS r USING ({STAGE_KEY})"""


SQL_WRITE = "(shuffle_write_bytes_sum = 0 AND ifNull(sql_shuffle_write_bytes, 0) > 0)"
SQL_READ = "(shuffle_read_bytes_sum = 0 AND ifNull(sql_shuffle_read_bytes, 0) > 0)"
SQL_SPILL = "(disk_spill_bytes_sum = 0 AND memory_spill_bytes_sum = 0 AND ifNull(sql_spill_bytes, 0) > 0)"
"""Where a finished stage's shuffle write, shuffle read or spill comes from its operators' own SQL metrics
(``stage_completed.sql_shuffle_*``, ``sql_spill_bytes``) instead of Spark's task metrics: where its tasks report none
of it and the SQL metrics some, an engine that keeps it out of the task metrics (docs/native.md). Spark's own
exchanges report the same shuffle in both, so elsewhere the task metrics stand. The stage row says so
(``shuffle_from_sql``) and the shuffle rules' evidence with it. Only the stage totals: the per-task spread (medians,
maxima) is the tasks' alone, so the skew rules stay blind there (``detection/blind.py``)."""

NOT_FAILURES = ("Resubmitted", "TaskKilled", "TaskCommitDenied")
"""Task ends Spark reports as not successful that are no failure of the task (``TaskFailedReason``'s
``countTowardsTaskFailures`` is false for the last two). ``Resubmitted`` is no attempt either: the task had
succeeded, and its output is re-queued after its executor was lost (the marker repeats the earlier successful
attempt), so it is left out of the attempts; a kill or a denied commit (a speculative copy) counts as killed."""
RESUBMITTED = f"(status = 'FAILED' AND ifNull(failure_class, '') = {quote_literal(NOT_FAILURES[0])})"
KILLED_AS_FAILED = (
    f"(status = 'FAILED' AND ifNull(failure_class, '') IN ({', '.join(quote_literal(c) for c in NOT_FAILURES[1:])}))"
)
REAL_FAILURE = (
    f"(status = 'FAILED' AND ifNull(failure_class, '') NOT IN ({', '.join(map(quote_literal, NOT_FAILURES))}))"
)
SUCCEEDED = "(status = 'SUCCESS')"

MEDIANS = (  # stage_completed column, the per-task value in task_end
    ("task_duration_ms_p50", "duration_ms"),
    ("input_bytes_p50", "input_bytes"),
    ("input_records_per_task_p50", "input_records"),
    ("shuffle_read_bytes_p50", "shuffle_local_bytes + shuffle_remote_bytes"),
    ("shuffle_read_records_p50", "shuffle_records_read"),
)
"""The per-task medians the rules compare with, taken over the successful attempts: a failed or killed attempt
stops part-way, and its partial input pulls the median down (an info-level skew 1.06x over the successful ones)."""

STAGE_KEY = "cluster, app_id, app_attempt, stage_id, stage_attempt"


def nearest_rank_median(value: str, condition: str) -> str:
    """The median of ``value`` over the rows where ``condition`` holds, by nearest rank (the value at rank
    ceil(n / 2)) as the listener computes its quantiles; 0 over no row."""
    return (
        f"arrayElement(arraySort(groupArrayIf({value}, {condition})), "
        f"toUInt32(greatest(ceil(0.5 * countIf({condition})), 1)))"
    )


def task_corrections(ctx: SqlContext) -> str:
    """Per finished stage attempt that had unsuccessful task ends (``stage_completed.tasks_failed`` or
    ``tasks_killed`` > 0) or task ends after its completion (``task_end.late``), from its ``task_end`` rows: the
    successful attempts and their medians (``MEDIANS``), the ends counted as failed that are none (``NOT_FAILURES``),
    and the late ends, which its ``stage_completed`` does not count: their failures, attempts, run time and duration
    (the listener sends every late task end, whatever its task sampling). The listener's aggregates count every task
    end with metrics; the task rows say which ones succeeded. Only those stages' task rows are read (a semi-join on the
    sorting key's stage columns); task ends come before their stage's completion, so a day before the range too."""
    medians = ",\n    ".join(
        f"toFloat64({nearest_rank_median(value, SUCCEEDED)}) AS c_{column}" for column, value in MEDIANS
    )
    return f"""SELECT {STAGE_KEY},
    toFloat64(countIf({SUCCEEDED})) AS c_succeeded,
    toFloat64(countIf({RESUBMITTED} AND NOT late)) AS c_resubmitted,
    toFloat64(countIf({KILLED_AS_FAILED} AND NOT late)) AS c_killed,
    toFloat64(countIf({REAL_FAILURE} AND late)) AS c_late_failed,
    toFloat64(countIf(late AND NOT {RESUBMITTED})) AS c_late_attempted,
    toFloat64(sumIf(run_time_ms, late)) AS c_late_run, toFloat64(sumIf(duration_ms, late)) AS c_late_dur,
    {medians}
FROM {ctx.view("task_end")}
{ctx.where(extend_days=1)} AND (({STAGE_KEY}) IN
(
    SELECT {STAGE_KEY} FROM {ctx.view("stage_completed")}
    {ctx.where()} AND tasks_failed + tasks_killed > 0
) OR ({STAGE_KEY}) IN
(
    SELECT {STAGE_KEY} FROM {ctx.view("task_end")}
    {ctx.where(extend_days=1)} AND late
))
GROUP BY {STAGE_KEY}"""


def succeeded_or(column: str) -> str:
    """A median of ``stage_completed``: over the successful attempts where ``task_corrections`` has them, else the
    listener's."""
    return f"if({MEDIANS_CORRECTED}, c_{column}, toFloat64({column}))"


MARKERS = "greatest(c_resubmitted, toFloat64(tasks_resubmitted))"
DENIED = "greatest(c_killed, toFloat64(tasks_commit_denied))"
"""A finished stage's ``Resubmitted`` markers and kills reported as failures (denied commits): the listener counts
them (minor 3), its task rows show them (where they are not sampled or off, and from an older listener); the larger
of the two, so either alone suffices."""

MEDIANS_CORRECTED = "(c_succeeded > 0 AND tasks_failed + tasks_killed > 0)"
"""Whether a stage's medians are taken over its successful task rows: where its listener's figures count unsuccessful
attempts, and its task rows hold a success (a stage corrected only for late task ends keeps the listener's)."""

SUCCEEDED_INPUT_P50 = (
    f"if({scan_input_used()}, c_input_records_per_task_p50 * ifNull(scan_bytes_read, 0) "
    "/ greatest(toFloat64(input_records), 1.), c_input_bytes_p50)"
)
"""``stage_input('p50')`` over the successful attempts: the median task's input bytes, or where they are implausible
its rows' share of the files the scans read."""


def running_median(value: str) -> str:
    """A running stage's median task ``value``: over its successful attempts so far (``MEDIANS``), over every finished
    one while none succeeded yet."""
    return f"toFloat64(if(countIf({SUCCEEDED}) > 0, quantileIf(0.5)({value}, {SUCCEEDED}), quantile(0.5)({value})))"


def running_stages(ctx: SqlContext, min_finished_tasks: int) -> str:
    """Stage attempts without a ``stage_completed`` yet, of applications without an ``app_end``, aggregated over
    their finished tasks (``task_end``). Selecting the running applications first (``app_id IN …``, a sorting-key
    column) keeps this cheap however many finished tasks the time range holds; the aggregating read takes only the
    granules of the not-completed stages (a semi-join on their keys, found from the key columns alone), so it does not
    grow with the running applications' finished stages. A stage is running by its task rows alone: one whose
    ``stage_submitted`` was lost or came before the range is still found, unnamed and without a job."""
    key = "cluster, app_id, app_attempt, stage_id, stage_attempt"
    scope = "WHERE " + "".join(f"{c} AND " for c in ctx.scope.conditions())
    return f"""SELECT
    cluster, app_id, app_attempt,
    r_app_name AS app_name, toInt64(ifNull(ss_job, -1)) AS job, toInt64(ifNull(ss_sql, -1)) AS sql_exec,
    stage_id, stage_attempt, ss_name AS stage_name, toUInt8(1) AS running, 'running' AS stage_status,
    toInt64(last_finish_ms) AS detected_at_ms, stage_duration_ms, toFloat64(greatest(finished, ss_tasks)) AS tasks,
    failed, attempted, dur_p50, dur_max, run_sum, gc_sum, in_p50, in_max, in_sum, sr_p50, sr_max, sr_sum,
    sr_remote_sum, sw_sum, disk_spill_sum, mem_spill_sum, fetch_wait_ms, out_files, toUInt8(1) AS files_estimated,
    out_bytes, dur_sum, toFloat64(ss_slots) AS slots, srr_p50, srr_max, inr_p50, inr_max, blocks, in_records,
    sw_records, sr_records, toUInt8(0) AS in_from_scan, toUInt8(0) AS shuffle_from_sql
FROM
(
    SELECT cluster, app_id, app_attempt, any(app_name) AS r_app_name, stage_id, stage_attempt,
        max(finish_time_ms) AS last_finish_ms,
        toFloat64(max(finish_time_ms) - min(launch_time_ms)) AS stage_duration_ms,
        count() AS finished, toFloat64(countIf({REAL_FAILURE})) AS failed,
        toFloat64(count() - countIf({RESUBMITTED})) AS attempted,
        {running_median("duration_ms")} AS dur_p50, toFloat64(max(duration_ms)) AS dur_max,
        toFloat64(sum(run_time_ms)) AS run_sum, toFloat64(sum(gc_time_ms)) AS gc_sum,
        {running_median("input_bytes")} AS in_p50, toFloat64(max(input_bytes)) AS in_max,
        toFloat64(sum(input_bytes)) AS in_sum,
        {running_median("shuffle_local_bytes + shuffle_remote_bytes")} AS sr_p50,
        toFloat64(max(shuffle_local_bytes + shuffle_remote_bytes)) AS sr_max,
        toFloat64(sum(shuffle_local_bytes + shuffle_remote_bytes)) AS sr_sum,
        toFloat64(sum(shuffle_remote_bytes)) AS sr_remote_sum, toFloat64(sum(shuffle_write_bytes)) AS sw_sum,
        toFloat64(sum(disk_spill_bytes)) AS disk_spill_sum, toFloat64(sum(memory_spill_bytes)) AS mem_spill_sum,
        toFloat64(sum(shuffle_fetch_wait_ms)) AS fetch_wait_ms, toFloat64(countIf(output_bytes > 0)) AS out_files,
        toFloat64(sum(output_bytes)) AS out_bytes, toFloat64(sum(duration_ms)) AS dur_sum,
        {running_median("shuffle_records_read")} AS srr_p50, toFloat64(max(shuffle_records_read)) AS srr_max,
        {running_median("input_records")} AS inr_p50, toFloat64(max(input_records)) AS inr_max,
        toFloat64(sum(shuffle_local_blocks + shuffle_remote_blocks)) AS blocks,
        toFloat64(sum(input_records)) AS in_records, toFloat64(sum(shuffle_write_records)) AS sw_records,
        toFloat64(sum(shuffle_records_read)) AS sr_records
    FROM {ctx.view("task_end")}
    {ctx.where()} AND ({key}) IN
    (
        SELECT {key} FROM {ctx.view("task_end")}
        {ctx.where()}
            AND app_id IN (SELECT app_id FROM {ctx.view("app_start")} {scope} app_id NOT IN
                (SELECT app_id FROM {ctx.view("app_end")} {scope} 1))
            AND ({key}) NOT IN (SELECT {key} FROM {ctx.view("stage_completed")} {ctx.where()})
        GROUP BY {key}
    )
    GROUP BY {key}
    HAVING finished >= {lit(min_finished_tasks)}
) AS done
ANY LEFT JOIN
(
    SELECT {key}, any(name) AS ss_name, any(job_id) AS ss_job, any(sql_execution_id) AS ss_sql,
        max(num_tasks) AS ss_tasks, max(slots) AS ss_slots
    FROM {ctx.view("stage_submitted")}
    {ctx.where()}
    GROUP BY {key}
) AS submitted USING ({key})"""
