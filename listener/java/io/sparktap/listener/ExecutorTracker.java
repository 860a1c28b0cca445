package io.sparktap.listener;

import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;
import java.util.function.Consumer;
import java.util.regex.Pattern;

import org.apache.spark.SparkConf;
import org.apache.spark.executor.ExecutorMetrics;
import org.apache.spark.resource.ExecutorResourceRequest;
import org.apache.spark.resource.ResourceProfile;
import org.apache.spark.scheduler.SparkListenerExecutorMetricsUpdate;

import scala.Tuple2;

/**
 * Executor telemetry (issue 25): peak executor metrics per executor per stage attempt and per executor lifetime,
 * requested resources per resource profile, removal classes, open lifetimes closed at app end.
 *
 * <p>Runs on the listener-bus thread only. Bounded: one peaks array per (live stage attempt, executor) and per live
 * executor; nothing is emitted per heartbeat, and at most {@code maxHeartbeatsPerSecond} heartbeats are read per
 * second (the rest are counted as skipped).
 */
final class ExecutorTracker {
    /** Spark's ExecutorMetricType names, in the contract's order (schemas/events.py ExecutorMetrics). */
    static final String[] SPARK_NAMES = {"JVMHeapMemory", "JVMOffHeapMemory", "OnHeapExecutionMemory",
        "OffHeapExecutionMemory", "OnHeapStorageMemory", "OffHeapStorageMemory", "OnHeapUnifiedMemory",
        "OffHeapUnifiedMemory", "DirectPoolMemory", "MappedPoolMemory", "ProcessTreeJVMRSSMemory",
        "ProcessTreePythonRSSMemory", "ProcessTreeOtherRSSMemory", "MinorGCCount", "MinorGCTime", "MajorGCCount",
        "MajorGCTime", "TotalGCTime"};
    static final String[] FIELDS = {"jvm_heap_memory", "jvm_off_heap_memory", "on_heap_execution_memory",
        "off_heap_execution_memory", "on_heap_storage_memory", "off_heap_storage_memory", "on_heap_unified_memory",
        "off_heap_unified_memory", "direct_pool_memory", "mapped_pool_memory", "process_tree_jvm_rss_memory",
        "process_tree_python_rss_memory", "process_tree_other_rss_memory", "minor_gc_count", "minor_gc_time",
        "major_gc_count", "major_gc_time", "total_gc_time"};
    static final int N = SPARK_NAMES.length;
    private static final int MAX_STAGES = 10_000;

    /** Peaks of one executor over one scope (a stage attempt, or its lifetime). */
    static final class Peaks {
        final long[] values = new long[N];
        long updates;
    }

    /** Requested resources of a resource profile, MiB (-1: unknown). */
    static final class Request {
        final long memoryMb;
        final long overheadMb;
        final long pysparkMb;

        Request(long memoryMb, long overheadMb, long pysparkMb) {
            this.memoryMb = memoryMb;
            this.overheadMb = overheadMb;
            this.pysparkMb = pysparkMb;
        }
    }

    private final Consumer<Event> submit;
    private final long maxHeartbeatsPerSecond;
    private final boolean[] present = new boolean[N];
    private boolean probed;
    /** After the application end (the lifetimes closed): the stages SparkContext.stop() cancels carry no peaks. */
    private boolean ended;
    private final Map<String, Peaks> lifetimes = new HashMap<>();
    private final Map<Long, Map<String, Peaks>> stages = new HashMap<>();
    private final Map<Integer, Request> profiles = new HashMap<>();
    /** open executors (executor_added seen, no executor_removed yet) -> nothing; insertion order. */
    private final Map<String, Boolean> open = new LinkedHashMap<>();
    /** executors that reported a task failing with an OutOfMemoryError */
    private final Map<String, Boolean> oomSeen = new HashMap<>();
    private long windowStartMs;
    private long windowCount;
    long heartbeatsSkipped;
    long heartbeatsRead;

    ExecutorTracker(SparkConf conf, long maxHeartbeatsPerSecond, Consumer<Event> submit) {
        this.submit = submit;
        this.maxHeartbeatsPerSecond = maxHeartbeatsPerSecond;
        profiles.put(0, fromConf(conf));
    }

    // ------------------------------------------------------------------------------------------- requests

    /** The default profile's request from the conf (as ResourceProfile.getDefaultExecutorResources reads it). */
    static Request fromConf(SparkConf conf) {
        long memory = mb(conf.get("spark.executor.memory", "1g"));
        long overhead = conf.contains("spark.executor.memoryOverhead")
                ? mb(conf.get("spark.executor.memoryOverhead", "")) : -1L;
        String master = conf.get("spark.master", "");
        if (overhead < 0 && memory >= 0 && (master.startsWith("yarn") || master.startsWith("k8s"))) {
            double factor = 0.1;
            try {
                factor = Double.parseDouble(conf.get("spark.executor.memoryOverheadFactor", "0.1").trim());
            } catch (NumberFormatException e) {
                factor = 0.1;
            }
            long min = mb(conf.get("spark.executor.minMemoryOverhead", "384m"));
            overhead = Math.max(min < 0 ? 384L : min, (long) (factor * memory));
        }
        long pyspark = conf.contains("spark.executor.pyspark.memory")
                ? mb(conf.get("spark.executor.pyspark.memory", "")) : -1L;
        return new Request(memory, overhead, pyspark);
    }

    /** A Spark size (a bare number is MiB) in MiB, or -1 when it does not parse. */
    static long mb(String value) {
        java.util.regex.Matcher m = SIZE.matcher(value.trim().toLowerCase(Locale.ROOT));
        if (!m.matches()) {
            return -1L;
        }
        try {
            long n = Long.parseLong(m.group(1));
            String unit = m.group(2) == null ? "" : m.group(2);
            int shift = unit.isEmpty() ? 20 : "bkmgtp".indexOf(unit.charAt(0)) * 10; // as Spark's byteStringAsMb
            return shift >= 20 ? n << (shift - 20) : n >> (20 - shift);
        } catch (NumberFormatException e) {
            return -1L;
        }
    }

    private static final Pattern SIZE = Pattern.compile("([0-9]+)\\s*(b|kb?|mb?|gb?|tb?|pb?)?");

    void profileAdded(ResourceProfile rp) {
        Map<String, ExecutorResourceRequest> res = rp.executorResourcesJMap();
        Request base = profiles.get(0);
        profiles.put(rp.id(), new Request(amount(res, ResourceProfile.MEMORY(), base.memoryMb),
                amount(res, ResourceProfile.OVERHEAD_MEM(), base.overheadMb),
                amount(res, ResourceProfile.PYSPARK_MEM(), base.pysparkMb)));
    }

    private static long amount(Map<String, ExecutorResourceRequest> res, String name, long dflt) {
        ExecutorResourceRequest r = res.get(name);
        return r == null ? dflt : r.amount();
    }

    Request request(int profileId) {
        Request r = profiles.get(profileId);
        return r != null ? r : profiles.get(0);
    }

    // ------------------------------------------------------------------------------------------- peaks

    private void probe(ExecutorMetrics m) {
        for (int i = 0; i < N; i++) {
            try {
                m.getMetricValue(SPARK_NAMES[i]);
                present[i] = true;
            } catch (RuntimeException e) {
                present[i] = false; // a metric this Spark does not have: stays 0
            }
        }
        probed = true;
    }

    private void read(ExecutorMetrics m, long[] into) {
        if (!probed) {
            probe(m);
        }
        for (int i = 0; i < N; i++) {
            into[i] = present[i] ? m.getMetricValue(SPARK_NAMES[i]) : 0L;
        }
    }

    private static void merge(Peaks p, long[] values) {
        long[] v = p.values;
        for (int i = 0; i < N; i++) {
            if (values[i] > v[i]) {
                v[i] = values[i];
            }
        }
        p.updates++;
    }

    private final long[] scratch = new long[N];

    private Peaks lifetime(String executorId) {
        return lifetimes.computeIfAbsent(executorId, k -> new Peaks());
    }

    private Peaks stagePeaks(long stageKey, String executorId) {
        Map<String, Peaks> byExec = stages.get(stageKey);
        if (byExec == null) {
            if (stages.size() >= MAX_STAGES) {
                stages.clear(); // stage attempts that never completed: never grow without bound
            }
            byExec = new HashMap<>();
            stages.put(stageKey, byExec);
        }
        return byExec.computeIfAbsent(executorId, k -> new Peaks());
    }

    /** A task end's {@code taskExecutorMetrics} (may be null). */
    void taskEnd(String executorId, long stageKey, ExecutorMetrics m, String failureClass) {
        if (ended) {
            return;
        }
        if (failureClass != null && failureClass.contains("OutOfMemoryError")) {
            oomSeen.put(executorId, Boolean.TRUE);
        }
        if (m == null) {
            return;
        }
        read(m, scratch);
        if (stages.containsKey(stageKey)) {
            merge(stagePeaks(stageKey, executorId), scratch);
        }
        if (executorId.equals("driver") || lifetimes.containsKey(executorId)) {
            merge(lifetime(executorId), scratch);
        }
    }

    /** A heartbeat: its per-stage-attempt peaks (the driver's under stage -1). */
    void heartbeat(SparkListenerExecutorMetricsUpdate e) {
        if (ended) {
            return;
        }
        long now = Clock.now();
        if (now - windowStartMs >= 1000L) {
            windowStartMs = now;
            windowCount = 0;
        }
        if (++windowCount > maxHeartbeatsPerSecond) {
            heartbeatsSkipped++;
            return;
        }
        String executorId = e.execId();
        if (!executorId.equals("driver") && !open.containsKey(executorId) && !lifetimes.containsKey(executorId)) {
            return; // removed already (Spark's status store ignores these too)
        }
        heartbeatsRead++;
        for (Tuple2<Tuple2<Object, Object>, ExecutorMetrics> kv : Scala.list(e.executorUpdates())) {
            int stageId = ((Number) kv._1()._1()).intValue();
            int attempt = ((Number) kv._1()._2()).intValue();
            read(kv._2(), scratch);
            if (stageId >= 0 && stages.containsKey(ListenerCore.stageKey(stageId, attempt))) {
                merge(stagePeaks(ListenerCore.stageKey(stageId, attempt), executorId), scratch);
            }
            merge(lifetime(executorId), scratch);
        }
    }

    void stageSubmitted(long stageKey) {
        if (!ended && !stages.containsKey(stageKey)) {
            if (stages.size() >= MAX_STAGES) {
                stages.clear();
            }
            stages.put(stageKey, new HashMap<>());
        }
    }

    /** One executor_metrics per executor that reported for this stage attempt, in executor id order. */
    void stageCompleted(int stageId, int attempt, long stageKey, long timeMs) {
        Map<String, Peaks> byExec = stages.remove(stageKey);
        if (byExec == null || byExec.isEmpty()) {
            return;
        }
        for (Map.Entry<String, Peaks> kv : new TreeMap<>(byExec).entrySet()) {
            submit.accept(metricsEvent(kv.getKey(), stageId, attempt, kv.getValue(), timeMs));
        }
    }

    static Event metricsEvent(String executorId, int stageId, int attempt, Peaks p, long timeMs) {
        long[] values = p.values.clone();
        long updates = p.updates;
        return Event.of(EventType.EXECUTOR_METRICS, timeMs, out -> {
            out.str("executor_id", executorId);
            out.optId("stage_id", stageId);
            out.optId("stage_attempt", stageId >= 0 ? attempt : -1);
            out.count("updates", updates);
            for (int i = 0; i < N; i++) {
                out.count(FIELDS[i], values[i]);
            }
        });
    }

    // ------------------------------------------------------------------------------------------- lifetimes

    void executorAdded(String executorId) {
        open.put(executorId, Boolean.TRUE);
        lifetime(executorId);
    }

    /** The removal class of a removal reason (docs/architecture.md, executor_removed.removal_class). */
    String removalClass(String executorId, String reason) {
        String r = reason == null ? "" : reason.toLowerCase(Locale.ROOT);
        if (OOM.matcher(r).find()) {
            return "oom";
        }
        boolean killedByDriver = KILLED.matcher(r).find();
        if (!killedByDriver && oomSeen.containsKey(executorId)) {
            return "oom"; // a task failed with an OutOfMemoryError on it, then it was lost or exited
        }
        if (killedByDriver) {
            return "killed";
        }
        if (LOST.matcher(r).find()) {
            return "lost";
        }
        return "other";
    }

    private static final Pattern OOM = Pattern.compile(
            "exit(?:ed)? (?:with )?(?:code|status)[ :=]*(?:is )?(?:137|52)\\b|code is 137\\b|exceeding memory limits"
                    + "|oomkilled|outofmemoryerror|out of memory");
    private static final Pattern KILLED = Pattern.compile(
            "killed by driver|executor killed|killed on request|requested by driver|decommission|preempt");
    private static final Pattern LOST = Pattern.compile(
            "lost|disassociated|disconnected|heartbeat|timed out|timeout|exited|worker shutting down|shutdown");

    /** The executor's lifetime summary (when it reported any metrics); it is no longer tracked afterwards. */
    void executorRemoved(String executorId, long timeMs) {
        open.remove(executorId);
        oomSeen.remove(executorId);
        Peaks p = lifetimes.remove(executorId);
        if (p != null && p.updates > 0) {
            submit.accept(metricsEvent(executorId, -1, -1, p, timeMs));
        }
    }

    /** Executors still open at app end (in the order they were added); the driver's lifetime is emitted here. */
    List<String> openExecutors() {
        return new ArrayList<>(open.keySet());
    }

    /** The lifetimes closed at the application end: later executor events are not sent (the bus thread's view). */
    boolean ended() {
        return ended;
    }

    /**
     * The driver's lifetime summary; after this no peaks are kept: a stage that completes after the end (cancelled
     * by SparkContext.stop()) gets no executor_metrics, live and replayed alike (a heartbeat is not in the log).
     */
    void applicationEnd(long timeMs) {
        ended = true;
        stages.clear();
        Peaks driver = open.containsKey("driver") ? null : lifetimes.remove("driver");
        if (driver != null && driver.updates > 0) {
            submit.accept(metricsEvent("driver", -1, -1, driver, timeMs));
        }
    }

    void clear() {
        lifetimes.clear();
        stages.clear();
        open.clear();
        oomSeen.clear();
    }

    Map<String, Boolean> openView() {
        return Collections.unmodifiableMap(open);
    }
}
