"""SQL building blocks shared by every detection rule: literals, time and scope filters, and the relations
(stage statistics, AQE shuffle reads) the rules are expressions over.

The relations read the ``<table>_dedup`` views (``schemas/ddl.py``), so a redelivered event never counts twice.
They use only what clickhouse-server 18.16 also has: no CTEs, one JOIN per SELECT (``ANY LEFT JOIN … USING``),
``UNION ALL`` with explicitly cast columns, ``tupleElement``, ``arrayFilter``/``arraySort`` with lambdas.

Times are filtered with the Grafana macros (``$__timeFilter(event_time)``, ``$__fromTime``, ``$__toTime``), so the
very same text is a dashboard panel query, a Grafana alert query and — with ``macros.expand`` and a concrete time
range — what the built-in alerter runs.
"""

# ruff: noqa: S608 - SQL is assembled from our own identifiers and typed threshold literals (lit()), never from user text.

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import KW_ONLY, dataclass, field

from sparktap.schemas.ddl import LATEST_VERSION, Features, quote_ident, quote_literal
from sparktap.schemas.types import IDENTIFIER_PATTERN

DEFAULT_DATABASE = "sparktap"


def lit(value: float | int | str | bool) -> str:
    """A SQL literal for a threshold value (typed numbers and our own strings only)."""
    if isinstance(value, bool | int | str):
        return quote_literal(value)
    if not math.isfinite(value):
        raise ValueError(f"threshold must be finite, got {value!r}")
    return repr(float(value))


def strings(values: Iterable[str]) -> str:
    """A SQL array literal of strings."""
    return "[" + ", ".join(quote_literal(v) for v in values) + "]"


def identifier_match(column: str) -> str:
    """``match(<column>, '<IDENTIFIER_PATTERN>')``: the rows whose identifier a dashboard variable may offer."""
    return f"match({column}, {quote_literal(IDENTIFIER_PATTERN)})"


def variable_values(name: str) -> str:
    """The values of the Grafana template variable ``name`` as a ClickHouse array of strings, safe whatever they are.

    Grafana's ``percentencode`` format leaves only ``A-Z a-z 0-9 - _ . ~`` and ``%XX`` (one value: the value;
    several: ``{a,b}`` encoded), so the quoted literal can hold nothing that ends it (no quote, no backslash, no
    ``$``); ClickHouse decodes it back to data. ``singlequote`` / ``sqlstring`` are unsafe for ClickHouse: neither
    escapes the backslash, so a value ending in ``\\`` ends the literal (issue 21). Identifiers hold no comma
    (``schemas/types.py``), so splitting on ``,`` gives the values back."""
    return f"splitByChar(',', replaceRegexpAll(decodeURLComponent('${{{name}:percentencode}}'), '^[{{]|[}}]$', ''))"


def in_variable(column: str, name: str) -> str:
    """``<column> IN (the values of the variable)`` (a subquery: the primary key still narrows the read)."""
    return f"{column} IN (SELECT arrayJoin({variable_values(name)}))"


@dataclass(frozen=True)
class Scope:
    """Extra row filters: a condition over ``cluster`` and one over ``app_id`` (SQL text built by us)."""

    cluster: str | None = None
    app: str | None = None

    @classmethod
    def grafana(cls, app: bool = True) -> Scope:
        """Filters on the dashboard template variables ``$cluster`` (and ``$app``), through ``in_variable``; rows
        whose ``cluster`` or ``app_id`` is not an identifier (legacy rows from before the collector checked) are
        left out whatever the variables hold (a crafted URL can set any value)."""
        clusters = " AND ".join(
            [in_variable("cluster", "cluster"), identifier_match("cluster"), identifier_match("app_id")]
        )
        return cls(clusters, in_variable("app_id", "app") if app else None)

    @classmethod
    def of(cls, clusters: Iterable[str] = (), apps: Iterable[str] = ()) -> Scope:
        """Filters on literal cluster names / application ids (empty: no filter)."""
        c, a = list(clusters), list(apps)
        return cls(
            f"cluster IN ({', '.join(quote_literal(x) for x in c)})" if c else None,
            f"app_id IN ({', '.join(quote_literal(x) for x in a)})" if a else None,
        )

    def conditions(self, with_app: bool = True) -> list[str]:
        out = [self.cluster] if self.cluster else []
        if with_app and self.app:
            out.append(self.app)
        return out


class Staging:
    """The statements of a staged detection pass (``SqlContext.staging``): relations a pass's query reads more than
    once or nests deeply, each computed once into a temporary table of the session (``CREATE TEMPORARY TABLE … AS
    SELECT``) before the query, which then reads the table. The same rows, so the same findings: the query is analysed
    in pieces instead of as one text of ~80 kB (ClickHouse analyses every inlined subquery, at each of its uses, and
    18.16 re-analyses a nested subquery at every level above it: issue 27). ``prefix``: the tables' names' start
    (unique per pass: several passes may share a session)."""

    def __init__(self, prefix: str) -> None:
        if not IDENTIFIER_RE.match(prefix):
            raise ValueError(f"staging prefix {prefix!r}: expected letters, digits and underscores")
        self.prefix = prefix
        self.statements: list[tuple[str, str]] = []
        """(temporary table, its SELECT) in the order they must run (a table's SELECT may read earlier ones)"""
        self._by_sql: dict[str, str] = {}
        self.choices: dict[str, RuleChoice] = {}
        """per findings table: how to narrow its rules to those that fire (``RuleChoice``)"""
        self.found = ""
        """the table of every finding (the last statement), '' when none"""

    def table(self, name: str, sql: str) -> str:
        """The temporary table holding ``sql``'s rows (one table per distinct ``sql``)."""
        known = self._by_sql.get(sql)
        if known is None:
            known = f"{self.prefix}_{len(self.statements)}_{name}"
            if not IDENTIFIER_RE.match(known):
                raise ValueError(f"staged relation name {name!r}: expected letters, digits and underscores")
            self.statements.append((known, sql))
            self._by_sql[sql] = known
        return known

    def drops(self) -> list[str]:
        return [f"DROP TEMPORARY TABLE IF EXISTS {quote_ident(t)}" for t, _ in reversed(self.statements)]


IDENTIFIER_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

RULES_MARK = "(sparktap_rule_tuples_d41d8cd98f00)"
"""Where a ``RuleChoice.template`` takes the tuples of the rules that fire"""


@dataclass
class RuleChoice:
    """A staged findings table's rules narrowed to those that fire: ``probe`` (a SELECT over the staged relation, the
    rules' severities alone, ``rule`` the index of each firing tuple) runs first, then ``template`` with the
    ``tuples`` it named at ``RULES_MARK`` (``tuples[0]`` when none fires: no row either way). The same rows as the
    statement with every tuple: a rule not named has no row with a severity; ClickHouse then analyses the values,
    evidence and texts of the firing rules only (18.16: ~8 ms a rule, issue 27)."""

    probe: str
    tuples: list[str]
    template: str

    def select(self, fired: Iterable[int]) -> str:
        chosen = [self.tuples[i] for i in sorted(set(fired)) if 0 <= i < len(self.tuples)] or self.tuples[:1]
        return self.template.replace(RULES_MARK, ",\n    ".join(chosen))


@dataclass(frozen=True)
class SqlContext:
    """Where and how rule SQL runs: database, server version (for dialect choices), scope."""

    database: str = DEFAULT_DATABASE
    version: tuple[int, ...] = LATEST_VERSION
    scope: Scope = field(default_factory=Scope)
    _: KW_ONLY  # the options below by name only: a positional call must not shift one into another
    final_reads: bool = False
    """Read ``<table> FINAL`` instead of its ``<table>_dedup`` view (the same rows): one node only (chDB or one
    server), never a cluster, whose ``<table>`` is the Distributed insert table. ClickHouse 26.x analyses a view's
    whole ``SELECT *`` at each of the detection query's ~35 reads: about 0.3 s of its ~1.6 s CPU (issue 22)."""
    history_runs: int = 0
    """With an application scope, how many earlier runs of each recurring job the history reads take (``history.py``;
    0: every run of the history window)"""
    job_parts: tuple[str, ...] = ("app_name", "schedule")
    """What keys a recurring job without ``spark.sparktap.job`` (``history.job_key``): ``app_name``, ``user``,
    ``schedule`` (``run_regression.job_key``)"""

    staging: Staging | None = field(default=None, compare=False, repr=False)
    """A staged pass (``Staging``): ``staged`` relations go to temporary tables of the session; None: one query"""

    def staged(self, name: str, sql: str, *, in_subquery: bool = False) -> str:
        """``sql``, or with ``staging`` a ``SELECT *`` of the temporary table holding its rows. ``in_subquery``: the
        relation is read in an ``IN`` subquery, which a cluster's Distributed read sends to every shard (where the
        session's table is not): staged on one node (``final_reads``) only."""
        if self.staging is None or (in_subquery and not self.final_reads):
            return sql
        return f"SELECT * FROM {quote_ident(self.staging.table(name, sql))}"

    @property
    def features(self) -> Features:
        return Features.for_version(self.version)

    def view(self, table: str) -> str:
        """The deduplicated view of an event table (``<table> FINAL`` itself with ``final_reads``)."""
        if self.final_reads:
            return f"{quote_ident(self.database)}.{quote_ident(table)} FINAL"
        return f"{quote_ident(self.database)}.{quote_ident(table + '_dedup')}"

    def where(self, time_column: str = "event_time", extend_days: int = 0, with_app: bool = True) -> str:
        """``WHERE`` clause: the dashboard time range (widened into the past by ``extend_days``) and the scope."""
        if extend_days:
            # DateTime is unsigned: a range starting less than extend_days after the epoch must not wrap to 2106
            days = int(extend_days)
            start = f"greatest($__fromTime, toDateTime({days * 86_400})) - INTERVAL {days} DAY"
            time = f"{time_column} >= {start} AND {time_column} <= $__toTime"
        else:
            time = f"$__timeFilter({time_column})"
        return self.filter([time, *self.scope.conditions(False)], self.scope.app if with_app else None)

    def filter(self, conditions: list[str], app: str | None = None) -> str:
        """``WHERE`` of ``conditions`` and ``app`` (a condition on ``app_id``, a sorting-key column of every table a
        pass reads); with ``final_reads``, ``app`` as the ``PREWHERE`` of the ``<table> FINAL`` read this follows:
        neither 18.16 nor 26.x moves a condition to ``PREWHERE`` under ``FINAL``, so a scoped read took every column
        of the granules the key could not skip (28,000 ``stage_completed`` rows for 10 applications' 100, ~60-100 ms
        on 18.16 at 100 M task rows) instead of the few granules holding the applications (~15 ms, issue 27). Exact:
        FINAL collapses rows of one sorting key, which all hold the same ``app_id``."""
        if app and self.final_reads:
            return f"PREWHERE {app} WHERE " + " AND ".join(conditions or ["1"])
        return "WHERE " + " AND ".join([*conditions, *([app] if app else [])] or ["1"])

    def prop(self, key: str) -> str:
        """A Spark property of the application (``app_start.properties``), '' when absent."""
        if self.features.map:
            return f"properties[{quote_literal(key)}]"
        return f"visitParamExtractString(properties, {quote_literal(key)})"


def size_bytes(expr: str) -> str:
    """Parse a Spark size string ('64m', '64MB', '67108864', '1g', '512k') into bytes; 0 when unparsable."""
    v = f"lower(replaceAll({expr}, ' ', ''))"
    n = f"toFloat64OrZero(extract({v}, '^[0-9.]+'))"
    return (
        f"multiIf(match({v}, '^[0-9]+b?$'), {n}, match({v}, '^[0-9.]+ *(k|kb|kib)$'), {n} * 1024, "
        f"match({v}, '^[0-9.]+ *(m|mb|mib)$'), {n} * 1048576, match({v}, '^[0-9.]+ *(g|gb|gib)$'), {n} * 1073741824, "
        f"match({v}, '^[0-9.]+ *(t|tb|tib)$'), {n} * 1099511627776, 0.)"
    )


# ------------------------------------------------------------------------------------------ stage relation

INPUT_TRUSTED = "toUInt8(in_records = 0 OR in_sum >= in_records) AS in_bytes_trusted"
"""Whether a stage's input bytes can be believed: at least a byte per input row. Spark 4 with Parquet vectored IO
reports about 2,400× too few task input bytes (they follow the file count, not the data size); there a finished
stage takes the size of the files its scans read (``stage_completed.scan_bytes_read``, the scans' own ``size of
files read`` SQL metric: ``in_from_scan`` = 1, see ``stage_input``). Without it, below a byte a row, the rules
compare rows instead (``in_bytes_trusted`` = 0) and say so in their evidence."""


def scan_input_used(prefix: str = "") -> str:
    """Whether a ``stage_completed`` row's input is its scans' files (``scan_bytes_read``) rather than its tasks'
    input bytes: the tasks report under a byte per row read (implausible) and the scans' figure is at least that.
    ``prefix``: the columns' table alias with its dot ('' for none)."""
    p = prefix
    return (
        f"({p}input_records > 0 AND {p}input_bytes_sum < {p}input_records "
        f"AND ifNull({p}scan_bytes_read, 0) >= {p}input_records)"
    )


def stage_input(quantity: str = "sum", prefix: str = "") -> str:
    """A finished stage's trusted input bytes (``sum``, or the per-task ``p50`` / ``max``) from ``stage_completed``:
    the tasks' input bytes, or where they are implausible (``scan_input_used``) the size of the files its scans read;
    a task's share of it is its rows read times the files' bytes per row. The one choice every rule, panel and report
    figure of input bytes makes."""
    p = prefix
    tasks = f"toFloat64({p}input_bytes_{quantity})"
    if quantity == "sum":
        scan = f"toFloat64(ifNull({p}scan_bytes_read, 0))"
    else:
        scan = (
            f"toFloat64({p}input_records_per_task_{quantity}) * ifNull({p}scan_bytes_read, 0) "
            f"/ greatest(toFloat64({p}input_records), 1.)"
        )
    return f"if({scan_input_used(prefix)}, {scan}, {tasks})"


STAGE_COLUMNS = (
    "cluster, app_id, app_attempt, app_name, job, sql_exec, stage_id, stage_attempt, stage_name, running, "
    "stage_status, detected_at_ms, stage_duration_ms, tasks, failed, attempted, dur_p50, dur_max, "
    "run_sum, gc_sum, in_p50, in_max, in_sum, sr_p50, sr_max, sr_sum, sr_remote_sum, sw_sum, disk_spill_sum, "
    "mem_spill_sum, fetch_wait_ms, out_files, files_estimated, out_bytes, dur_sum, slots, srr_p50, srr_max, "
    "inr_p50, inr_max, blocks, in_records, sw_records, sr_records, in_from_scan, shuffle_from_sql, " + INPUT_TRUSTED
)


def app_properties(ctx: SqlContext) -> str:
    """Per application attempt: the Spark properties the rules consult (from ``app_start``, '' when absent)."""
    return f"""SELECT cluster, app_id, app_attempt,
    any({ctx.prop("spark.sql.adaptive.enabled")}) AS prop_aqe,
    any({ctx.prop("spark.sql.adaptive.skewJoin.enabled")}) AS prop_skew_join,
    any({ctx.prop("spark.sql.adaptive.advisoryPartitionSizeInBytes")}) AS prop_advisory,
    any({ctx.prop("spark.sql.cbo.enabled")}) AS prop_cbo,
    any({ctx.prop("spark.sql.cbo.joinReorder.enabled")}) AS prop_join_reorder,
    any({ctx.prop("spark.sql.statistics.histogram.enabled")}) AS prop_histogram
FROM {ctx.view("app_start")}
WHERE {" AND ".join(["1", *ctx.scope.conditions()])}
GROUP BY cluster, app_id, app_attempt"""


def aqe_per_execution(ctx: SqlContext) -> str:
    """Per SQL execution: how many AQE plan updates, and what AQE's skew handling did (latest value per node)."""
    where = ctx.where(extend_days=1)
    return f"""SELECT cluster, app_id, app_attempt, sql_exec, sum(updates) AS aqe_updates,
    sum(skew_reads) AS aqe_skew_reads, sum(skewed_partitions) AS aqe_skewed_partitions,
    sum(skew_splits) AS aqe_skew_splits
FROM
(
    SELECT cluster, app_id, app_attempt,
        execution_id AS sql_exec, toUInt64(1) AS updates, toUInt64(0) AS skew_reads,
        toUInt64(0) AS skewed_partitions, toUInt64(0) AS skew_splits
    FROM {ctx.view("aqe_plan_update")}
    {where}
    UNION ALL
    SELECT cluster, app_id, app_attempt,
        execution_id AS sql_exec, toUInt64(0) AS updates, toUInt64(argMax(skewed, seq)) AS skew_reads,
        toUInt64(argMax(ifNull(num_skewed_partitions, 0), seq)) AS skewed_partitions,
        toUInt64(argMax(ifNull(num_skewed_splits, 0), seq)) AS skew_splits
    FROM {ctx.view("aqe_shuffle_read")}
    {where}
    GROUP BY cluster, app_id, app_attempt, execution_id, node_id
)
GROUP BY cluster, app_id, app_attempt, sql_exec"""


ENRICHMENTS = ("properties", "aqe", "history", "tables")
_ENRICHMENT_COLUMNS = {
    "properties": ("prop_aqe", "prop_skew_join", "prop_advisory", "prop_cbo", "prop_join_reorder", "prop_histogram"),
    "aqe": ("aqe_updates", "aqe_skew_reads", "aqe_skewed_partitions", "aqe_skew_splits"),
    "history": ("hist_apps", "hist_bytes", "hist_times"),
    "tables": ("tw_table", "tw_format", "tw_location", "tw_trend_files", "tw_trend_days"),
}


def stage_relation_columns(needs: frozenset[str]) -> str:
    """The columns of ``stage_relation(…, needs, …)`` by name: a ``SELECT *`` of its joins carries the right sides'
    ``r.cluster`` … on 18.16, which a table made of it refuses (duplicate columns)."""
    names = [c.split(" AS ")[-1].strip() for c in STAGE_COLUMNS.split(", ") if c.strip()]
    names += [c for need in ENRICHMENTS if need in needs for c in _ENRICHMENT_COLUMNS[need]]
    return ", ".join(names)


def aqe_read_relation(ctx: SqlContext) -> str:
    """One row per AQE shuffle read node (its latest metrics), with the application's properties."""
    rel = f"""SELECT cluster, app_id, app_attempt, a_app_name AS app_name, toInt64(-1) AS job, sql_exec,
    toInt64(-1) AS stage_id, toInt64(-1) AS stage_attempt, '' AS stage_name, node_id, toUInt8(0) AS running,
    detected_at_ms, read_coalesced, read_skewed, read_local, partitions, data_bytes, coalesced_partitions
FROM
(
    SELECT cluster, app_id, app_attempt,
        any(app_name) AS a_app_name, execution_id AS sql_exec, node_id,
        toInt64(max(event_time_ms)) AS detected_at_ms,
        toUInt8(argMax(coalesced, seq)) AS read_coalesced, toUInt8(argMax(skewed, seq)) AS read_skewed,
        toUInt8(argMax(local, seq)) AS read_local,
        toFloat64(argMax(ifNull(num_partitions, 0), seq)) AS partitions,
        toFloat64(argMax(ifNull(partition_data_size_bytes, 0), seq)) AS data_bytes,
        toFloat64(argMax(ifNull(num_coalesced_partitions, 0), seq)) AS coalesced_partitions
    FROM {ctx.view("aqe_shuffle_read")}
    {ctx.where()}
    GROUP BY cluster, app_id, app_attempt, execution_id, node_id
)"""
    return join_using(rel, ctx.staged("app_properties", app_properties(ctx)), "cluster, app_id, app_attempt")


def join_using(left: str, right: str, using: str) -> str:
    """``left ANY LEFT JOIN right USING (using)``, both subqueries."""
    return f"SELECT * FROM\n(\n{left}\n) AS l\nANY LEFT JOIN\n(\n{right}\n) AS r USING ({using})"
