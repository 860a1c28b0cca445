package io.sparktap.listener;

import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.function.BiConsumer;
import java.util.function.Consumer;

import java.lang.ref.WeakReference;

import org.apache.spark.scheduler.SparkListenerEvent;
import org.apache.spark.sql.execution.QueryExecution;
import org.apache.spark.sql.execution.SQLExecution;
import org.apache.spark.sql.execution.WholeStageCodegenExec;
import org.apache.spark.sql.execution.ui.SparkListenerDriverAccumUpdates;
import org.apache.spark.sql.execution.ui.SparkListenerSQLAdaptiveExecutionUpdate;
import org.apache.spark.sql.execution.ui.SparkListenerSQLExecutionEnd;
import org.apache.spark.sql.execution.ui.SparkListenerSQLExecutionStart;

import scala.Tuple2;

/**
 * SQL executions and adaptive query execution, from the events spark-sql posts through {@code onOtherEvent}.
 * Lives in its own class so that a driver without spark-sql on its class path only loses these events.
 *
 * <p>Per execution it keeps the join strategies of the previous plan (for {@code previous_join_strategies}) and
 * which accumulator ids belong to which AQE shuffle read node, to decode {@code SparkListenerDriverAccumUpdates}
 * into {@code aqe_shuffle_read} events. The state goes at SQL end (and is capped in case an end never comes).
 *
 * <p>File scans: the driver posts a scan's {@code size of files read} and {@code number of files read} when it lists
 * the files, before the stage that runs the scan starts. A finished stage whose tasks updated one of the scan's own
 * metrics (its rows, its scan time) ran that scan: {@link #scanInput} gives the stage the files' bytes, which Spark 4
 * with Parquet vectored IO does not count in the tasks' input bytes (they follow the file count there).
 *
 * <p>DSv2 file scans ({@code BatchScan}) have no file metrics on any line: the stage that ran one (its tasks updated
 * the scan's {@code number of output rows}) gets the files of the scan's input partitions, read from the execution's
 * running {@link QueryExecution} ({@link V2ScanFiles}), taken from {@code SQLExecution} when the plan shows a DSv2 scan
 * and again at the stage's end if that missed. Once the execution has ended (the listener far behind) it is gone and
 * the stage goes without: detection then compares rows where the tasks' bytes are implausible.
 *
 * <p>Tables: at SQL end, one {@code table_access} per scan and write node (at most {@code spark.sparktap.tables.max}):
 * live from the execution's QueryExecution ({@link TablesLive}; a nested execution, such as the insert a CTAS runs,
 * also reads the still-running plans it is nested in for the table's name), replayed from the last plan the log
 * recorded and the driver's metric updates ({@link TablesReplay}).
 */
final class SqlTracker {
    private static final int MAX_EXECUTIONS = 1000;
    /** Codegen stages whose generated methods one sql_plan_stats measures (pre-order); the rest report -1. */
    static final int MAX_CODEGEN_STAGES = 32;

    private final Redactor redactor;
    private final Consumer<Event> sink;
    private final int planMaxNodes;
    /** table_access events per execution (spark.sparktap.tables.max); 0: none */
    int tablesMax = 100;
    private final DeltaCommits deltaCommits = new DeltaCommits();
    private TablesReplay tablesReplay;
    /** replaying an event log: sql_plan_stats from the recorded plans and their metrics' values */
    private ReplayPlanStats replayStats;
    private final BiConsumer<String, Throwable> failed;
    private boolean codegenStats;
    /** false when replaying an event log: no QueryExecution runs in this JVM to read DSv2 scans' files from */
    boolean livePlans = true;
    private int codegenStagesLeft;
    private final Map<Long, Execution> executions = new LinkedHashMap<>();
    private final Map<Long, PlanWalker.MetricRef> accumulators = new HashMap<>();
    /** accumulator id of a scan's file metric -> the scan; of its task-side metrics -> the scan */
    private final Map<Long, PlanWalker.Scan> scanFileMetrics = new HashMap<>();
    private final Map<Long, PlanWalker.Scan> scanTaskMetrics = new HashMap<>();
    private final java.util.Set<Long> scanSizeIds = new java.util.HashSet<>();

    private static final class Execution {
        final long startTime;
        /** the execution this one runs inside (a CTAS's nested insert), -1 for none (Spark 3.4+) */
        long rootId = -1L;
        List<String> joins = Collections.emptyList();
        final List<Long> accumulatorIds = new ArrayList<>();
        final List<Long> scanAccumulatorIds = new ArrayList<>();
        /** the running QueryExecution, when the plan has a DSv2 scan (weak: Spark drops it at the execution's end) */
        WeakReference<QueryExecution> qe;

        Execution(long startTime) {
            this.startTime = startTime;
        }
    }

    /** {@code failed}: where a part of an event could not be read (logged once per kind, counted; the event goes). */
    SqlTracker(Redactor redactor, int planMaxNodes, boolean codegenStats, Consumer<Event> sink,
            BiConsumer<String, Throwable> failed) {
        this.redactor = redactor;
        this.planMaxNodes = planMaxNodes;
        this.codegenStats = codegenStats;
        this.sink = sink;
        this.failed = failed;
    }

    /** Handle the event if it is one of ours; false if it is not a SQL event. */
    boolean handle(SparkListenerEvent event) throws ReflectiveOperationException {
        if (event instanceof SparkListenerDriverAccumUpdates) {
            accumUpdates((SparkListenerDriverAccumUpdates) event);
        } else if (event instanceof SparkListenerSQLAdaptiveExecutionUpdate) {
            planUpdate((SparkListenerSQLAdaptiveExecutionUpdate) event);
        } else if (event instanceof SparkListenerSQLExecutionStart) {
            start((SparkListenerSQLExecutionStart) event);
        } else if (event instanceof SparkListenerSQLExecutionEnd) {
            end((SparkListenerSQLExecutionEnd) event);
        } else {
            return false;
        }
        return true;
    }

    private void start(SparkListenerSQLExecutionStart e) throws ReflectiveOperationException {
        long id = e.executionId();
        Execution ex = new Execution(e.time());
        PlanWalker.Result plan = PlanWalker.walk(e.sparkPlanInfo(), id);
        ex.joins = plan.joins;
        remember(id, ex);
        replayPlan(id, e.sparkPlanInfo(), e.physicalPlanDescription());
        register(id, ex, plan);
        Object root = Scala.optionalValue(e, "rootExecutionId"); // Spark 3.4+
        long rootId = root instanceof Number ? ((Number) root).longValue() : -1L;
        ex.rootId = rootId == id ? -1L : rootId;
        String description = redactor.description(e.description(), 1000);
        Object jobTags = Scala.optionalAccessor(e, "jobTags"); // Spark 4: the tags of the execution's jobs
        ConnectTracker.Who who = jobTags instanceof scala.collection.Iterable
                ? ConnectTracker.who(Scala.list((scala.collection.Iterable<String>) jobTags))
                : ConnectTracker.Who.NONE;
        sink.accept(Event.of(EventType.SQL_START, e.time(), out -> {
            out.num("execution_id", id);
            out.optId("root_execution_id", rootId);
            out.opt("description", description);
            who.write(out);
        }));
    }

    private void end(SparkListenerSQLExecutionEnd e) throws ReflectiveOperationException {
        long id = e.executionId();
        Execution ex = executions.remove(id);
        if (ex != null) {
            forget(ex);
        }
        long duration = ex != null ? Math.max(0L, e.time() - ex.startTime) : -1L;
        Object err = Scala.optionalValue(e, "errorMessage"); // Spark 3.4+
        String error = err != null && !err.toString().isEmpty() ? redactor.text(err.toString(), 500) : null;
        sink.accept(Event.of(EventType.SQL_END, e.time(), out -> {
            out.num("execution_id", id);
            out.optId("duration_ms", duration);
            out.opt("error", error);
        }));
        tables(e, ex != null ? ex.startTime : e.time(), ex != null ? ex.rootId : -1L);
        codegenStagesLeft = MAX_CODEGEN_STAGES;
        PlanStats stats = planMaxNodes <= 0 ? null
                : livePlans ? PlanStats.of(e.qe(), planMaxNodes, codegenStats ? this::methodBytes : null)
                : replayStats != null ? replayStats.end(id, planMaxNodes) : null;
        if (stats != null) {
            sink.accept(Event.of(EventType.SQL_PLAN_STATS, e.time(), out -> stats.write(out, id, redactor)));
        }
    }

    /**
     * The execution's table_access events: live from its QueryExecution ({@link TablesLive}), replayed from the plan
     * the log recorded ({@link TablesReplay}). Never thrown: a failure loses these events only (counted, logged).
     */
    private void tables(SparkListenerSQLExecutionEnd e, long startMs, long rootId) {
        if (tablesMax <= 0) {
            return;
        }
        long id = e.executionId();
        try {
            List<TableAccess> found;
            if (livePlans) {
                QueryExecution qe = e.qe();
                found = qe == null ? Collections.emptyList()
                        : new TablesLive(deltaCommits).read(qe, enclosing(id, rootId), startMs, e.time());
            } else {
                found = tablesReplay == null ? Collections.emptyList() : tablesReplay.end(id);
            }
            TableAccess.emit(found, id, e.time(), tablesMax, redactor, sink);
        } catch (Exception | LinkageError t) {
            failed.accept("table_access", t);
        }
    }

    /**
     * The still-running executions a nested one may run inside, nearest first: those between its root and itself (a
     * CTAS's insert runs in the CTAS's execution, which Spark 4's saveAsTable runs in its own: root, CTAS, insert).
     */
    private List<QueryExecution> enclosing(long id, long rootId) {
        if (rootId < 0 || rootId >= id) {
            return Collections.emptyList();
        }
        List<QueryExecution> out = new ArrayList<>();
        for (long k = id - 1; k >= rootId && k >= id - 8; k--) {
            if (executions.containsKey(k)) { // started and not yet ended here
                QueryExecution qe = queryExecution(k);
                if (qe != null) {
                    out.add(qe);
                }
            }
        }
        return out;
    }

    /** Replay: keep the execution's latest plan (its table nodes and plan statistics are read at its end). */
    private void replayPlan(long id, org.apache.spark.sql.execution.SparkPlanInfo plan, String description) {
        if (livePlans) {
            return;
        }
        if (planMaxNodes > 0) {
            if (replayStats == null) {
                replayStats = new ReplayPlanStats();
            }
            replayStats.plan(id, plan);
        }
        if (tablesMax <= 0) {
            return;
        }
        if (tablesReplay == null) {
            tablesReplay = new TablesReplay();
        }
        tablesReplay.plan(id, plan, description);
    }

    /** A codegen stage's largest generated method (CodegenSize), or -1 when it cannot be had (counted, not thrown). */
    private int methodBytes(WholeStageCodegenExec stage) {
        if (!codegenStats || codegenStagesLeft <= 0) {
            return -1;
        }
        codegenStagesLeft--;
        try {
            return CodegenSize.maxMethodBytes(stage);
        } catch (LinkageError e) {
            codegenStats = false; // this Spark lacks the API: no codegen_method_bytes, every other figure goes on
            failed.accept("sql_plan_stats codegen_method_bytes (off for this application)", e);
        } catch (Exception e) {
            failed.accept("sql_plan_stats codegen_method_bytes", e);
        }
        return -1;
    }

    private void planUpdate(SparkListenerSQLAdaptiveExecutionUpdate e) {
        long id = e.executionId();
        PlanWalker.Result plan = PlanWalker.walk(e.sparkPlanInfo(), id);
        Execution ex = executions.get(id);
        if (ex == null) {
            ex = new Execution(Clock.now());
            remember(id, ex);
        }
        List<String> previous = ex.joins;
        ex.joins = plan.joins;
        replayPlan(id, e.sparkPlanInfo(), e.physicalPlanDescription());
        register(id, ex, plan);
        List<PlanWalker.ShuffleRead> reads = plan.reads;
        List<String> joins = plan.joins;
        boolean finalPlan = plan.finalPlan;
        sink.accept(Event.of(EventType.AQE_PLAN_UPDATE, Clock.now(), out -> {
            out.num("execution_id", id);
            out.flag("final_plan", finalPlan);
            out.strings("join_strategies", joins);
            out.strings("previous_join_strategies", previous);
            if (!reads.isEmpty()) {
                out.gen().writeArrayFieldStart("shuffle_reads");
                for (PlanWalker.ShuffleRead r : reads) {
                    out.gen().writeStartObject();
                    out.num("node_id", r.nodeId);
                    out.flag("coalesced", r.coalesced);
                    out.flag("skewed", r.skewed);
                    out.flag("local", r.local);
                    out.str("description", redactor.text(r.description, 200));
                    out.longMap("metric_accumulators", r.metricAccumulators);
                    out.gen().writeEndObject();
                }
                out.gen().writeEndArray();
            }
        }));
    }

    /**
     * At a stage's completion: {bytes, files} of the file scans it ran (their own SQL metrics), or null when none is
     * known; a replay also hands the stage's SQL metric values to the execution's plan statistics
     * ({@link ReplayPlanStats}). Never thrown (counted, logged: the stage goes without them).
     */
    long[] stageInput(org.apache.spark.scheduler.StageInfo info, long executionId) {
        try {
            stageCompleted(info, executionId);
            java.util.List<Long> ids = new java.util.ArrayList<>();
            for (Object id : Scala.list(info.accumulables().keys())) {
                ids.add(((Number) id).longValue());
            }
            return scanInput(ids);
        } catch (RuntimeException | LinkageError e) {
            failed.accept("stage_completed scan_bytes_read", e);
            return null;
        }
    }

    /** Replay: a stage completion's accumulables hold the values of the SQL metrics its tasks updated. */
    void stageCompleted(org.apache.spark.scheduler.StageInfo info, long executionId) {
        if (replayStats != null) {
            replayStats.stage(info, executionId);
        }
    }

    private void accumUpdates(SparkListenerDriverAccumUpdates e) {
        if (tablesReplay != null) {
            tablesReplay.accumUpdates(e.executionId(), e.accumUpdates());
        }
        if (replayStats != null) {
            replayStats.driver(e.executionId(), e.accumUpdates());
        }
        if (!scanFileMetrics.isEmpty()) {
            for (Tuple2<Object, Object> kv : Scala.list(e.accumUpdates())) {
                long acc = ((Number) kv._1()).longValue();
                PlanWalker.Scan scan = scanFileMetrics.get(acc);
                if (scan != null && scan.executionId == e.executionId()) {
                    long value = ((Number) kv._2()).longValue(); // the metric's value, set once per listing
                    if (scanSizeIds.contains(acc)) {
                        scan.filesBytes = value;
                    } else {
                        scan.files = value;
                    }
                }
            }
        }
        if (accumulators.isEmpty()) {
            return;
        }
        Map<PlanWalker.ShuffleRead, ShuffleReadValues> byNode = null;
        for (Tuple2<Object, Object> kv : Scala.list(e.accumUpdates())) {
            PlanWalker.MetricRef ref = accumulators.get(((Number) kv._1()).longValue());
            if (ref == null || ref.executionId != e.executionId()) {
                continue;
            }
            if (byNode == null) {
                byNode = new LinkedHashMap<>();
            }
            byNode.computeIfAbsent(ref.read, k -> new ShuffleReadValues()).update(ref.kind,
                    ((Number) kv._2()).longValue());
        }
        if (byNode == null) {
            return;
        }
        long time = Clock.now();
        long id = e.executionId();
        for (Map.Entry<PlanWalker.ShuffleRead, ShuffleReadValues> entry : byNode.entrySet()) {
            PlanWalker.ShuffleRead r = entry.getKey();
            ShuffleReadValues v = entry.getValue();
            sink.accept(Event.of(EventType.AQE_SHUFFLE_READ, time, out -> {
                out.num("execution_id", id);
                out.num("node_id", r.nodeId);
                out.flag("coalesced", r.coalesced);
                out.flag("skewed", r.skewed);
                out.flag("local", r.local);
                out.optId("num_partitions", v.partitions);
                out.optId("partition_data_size_bytes", v.dataSizeBytes);
                out.optId("num_skewed_partitions", v.skewedPartitions);
                out.optId("num_skewed_splits", v.skewedSplits);
                out.optId("num_coalesced_partitions", v.coalescedPartitions);
            }));
        }
    }

    private void register(long id, Execution ex, PlanWalker.Result plan) {
        if (plan.v2Scans && ex.qe == null && livePlans) {
            ex.qe = new WeakReference<>(queryExecution(id)); // the files of its DSv2 scans are only in the plan
        }
        for (Map.Entry<Long, PlanWalker.MetricRef> kv : plan.metrics.entrySet()) {
            if (accumulators.put(kv.getKey(), kv.getValue()) == null) {
                ex.accumulatorIds.add(kv.getKey());
            }
        }
        // a scan already known (an AQE plan update shows the same node again) keeps what the driver posted for it
        Map<PlanWalker.Scan, PlanWalker.Scan> known = new HashMap<>();
        for (Map.Entry<Long, PlanWalker.Scan> kv : plan.scanFileMetrics.entrySet()) {
            PlanWalker.Scan before = scanFileMetrics.get(kv.getKey());
            if (before != null) {
                known.put(kv.getValue(), before);
            }
        }
        for (Map.Entry<Long, PlanWalker.Scan> kv : plan.scanFileMetrics.entrySet()) {
            if (scanFileMetrics.putIfAbsent(kv.getKey(), known.getOrDefault(kv.getValue(), kv.getValue())) == null) {
                ex.scanAccumulatorIds.add(kv.getKey());
            }
        }
        for (Map.Entry<Long, PlanWalker.Scan> kv : plan.scanTaskMetrics.entrySet()) {
            if (scanTaskMetrics.putIfAbsent(kv.getKey(), known.getOrDefault(kv.getValue(), kv.getValue())) == null) {
                ex.scanAccumulatorIds.add(kv.getKey());
            }
        }
        scanSizeIds.addAll(plan.scanSizeIds);
    }

    /**
     * The files a finished stage scanned: {bytes, files} summed over the file scans whose task-side metrics the
     * stage's tasks updated and whose file metrics the driver posted; null when it ran no such scan.
     */
    long[] scanInput(Iterable<Long> stageAccumulatorIds) {
        if (scanTaskMetrics.isEmpty()) {
            return null;
        }
        java.util.Set<PlanWalker.Scan> scans = null;
        for (Long acc : stageAccumulatorIds) {
            PlanWalker.Scan scan = scanTaskMetrics.get(acc);
            if (scan != null && scan.v2 && !scan.looked && livePlans) {
                lookUpFiles(scan);
            }
            if (scan != null && scan.filesBytes >= 0) {
                if (scans == null) {
                    scans = new java.util.HashSet<>();
                }
                scans.add(scan);
            }
        }
        if (scans == null) {
            return null;
        }
        long bytes = 0L;
        long files = 0L;
        for (PlanWalker.Scan scan : scans) {
            bytes += scan.filesBytes;
            files += Math.max(0L, scan.files);
        }
        return new long[] {bytes, files};
    }

    /** The files of a DSv2 scan, from its execution's running plan; once per scan, never thrown (counted, logged). */
    private void lookUpFiles(PlanWalker.Scan scan) {
        scan.looked = true;
        Execution ex = executions.get(scan.executionId);
        QueryExecution qe = ex != null && ex.qe != null ? ex.qe.get() : null;
        if (qe == null) {
            qe = queryExecution(scan.executionId);
        }
        if (qe == null) {
            return; // the execution has ended: the stage goes without its scan's files
        }
        java.util.Set<Long> wanted = new java.util.HashSet<>();
        for (PlanWalker.Scan other : scanTaskMetrics.values()) {
            if (other.v2 && other.executionId == scan.executionId && other.filesBytes < 0) {
                wanted.add(other.rowsAccumulatorId); // every DSv2 scan of the execution in one walk
            }
        }
        try {
            Map<Long, long[]> found = V2ScanFiles.read(qe, wanted);
            for (PlanWalker.Scan other : scanTaskMetrics.values()) {
                long[] files = found.get(other.rowsAccumulatorId);
                if (files != null && other.executionId == scan.executionId) {
                    other.filesBytes = files[0];
                    other.files = files[1];
                    other.looked = true;
                }
            }
        } catch (Exception | LinkageError e) {
            failed.accept("stage_completed scan_bytes_read of a DSv2 scan", e); // the stage goes without it
        }
    }

    /** Spark's QueryExecution of a running execution, or null once it has ended (or where it cannot be had). */
    private QueryExecution queryExecution(long id) {
        try {
            return SQLExecution.getQueryExecution(id);
        } catch (RuntimeException | LinkageError e) {
            failed.accept("SQLExecution.getQueryExecution (DSv2 scan files)", e);
            return null;
        }
    }

    private void remember(long id, Execution ex) {
        Execution old = executions.put(id, ex);
        if (old != null) {
            forget(old);
        }
        if (executions.size() > MAX_EXECUTIONS) {
            Iterator<Execution> it = executions.values().iterator();
            forget(it.next());
            it.remove();
        }
    }

    private void forget(Execution ex) {
        for (Long acc : ex.accumulatorIds) {
            accumulators.remove(acc);
        }
        ex.accumulatorIds.clear();
        for (Long acc : ex.scanAccumulatorIds) {
            scanFileMetrics.remove(acc);
            scanTaskMetrics.remove(acc);
            scanSizeIds.remove(acc);
        }
        ex.scanAccumulatorIds.clear();
    }

    void clear() {
        executions.clear();
        tablesReplay = null;
        replayStats = null;
        accumulators.clear();
        scanFileMetrics.clear();
        scanTaskMetrics.clear();
        scanSizeIds.clear();
    }

    /** What the driver's accumulator updates reported for one AQE shuffle read node; -1 = not reported. */
    static final class ShuffleReadValues {
        long partitions = -1;
        long dataSizeBytes = -1;
        long skewedPartitions = -1;
        long skewedSplits = -1;
        long coalescedPartitions = -1;

        /** One update of the metric {@code kind} (a PlanWalker metric constant). */
        void update(int kind, long value) {
            switch (kind) {
                case PlanWalker.PARTITIONS:
                    partitions = value;
                    break;
                case PlanWalker.DATA_SIZE:
                    dataSizeBytes = Math.max(0L, dataSizeBytes) + value; // one update per partition: the sum
                    break;
                case PlanWalker.SKEWED_PARTITIONS:
                    skewedPartitions = value;
                    break;
                case PlanWalker.SKEWED_SPLITS:
                    skewedSplits = value;
                    break;
                case PlanWalker.COALESCED_PARTITIONS:
                    coalescedPartitions = value;
                    break;
                default:
                    break;
            }
        }
    }
}
