package io.sparktap.listener;

import java.util.Collections;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;

import org.apache.spark.SparkConf;

import scala.Tuple2;

/**
 * The listener's settings, read once from the Spark conf ({@code spark.sparktap.*}).
 *
 * <p>A missing or invalid setting never throws: {@link #problem} holds one line naming the exact {@code --conf} to
 * set, and the listener turns itself off.
 */
final class ListenerConfig {
    static final String PREFIX = "spark.sparktap.";
    static final String KAFKA_PREFIX = PREFIX + "kafka.";
    static final String BOOTSTRAP_KEY = KAFKA_PREFIX + "bootstrap.servers";
    static final String DEFAULT_TOPIC = "sparktap.events";
    static final String DEFAULT_TRANSPORT = "kafka";

    enum TaskMode { ALL, SAMPLE, OFF }

    /** What job descriptions and SQL text become: absent, redacted (the default), or as Spark has them. */
    enum Descriptions { OFF, REDACTED, FULL }

    final boolean enabled;
    final String cluster;
    final String bootstrapServers;
    final String topic;
    /** librdkafka settings passed through to the relay (bootstrap.servers included; never logged). */
    final Map<String, String> kafka;
    final int queueCapacity;
    final long healthIntervalMs;
    final TaskMode taskMode;
    final double taskSampleFraction;
    final Descriptions descriptions;
    /** spark.sparktap.transport: "kafka" (a producer in this JVM) or "relay" (the Python relay child process). */
    final String transport;
    /** transport=kafka: how long the oldest unacknowledged event may wait before new events go to the spool. */
    final long stallMs;
    final String relayPython;
    final String spoolDir;
    final long spoolMaxBytes;
    final long bufferMaxEvents;
    final long flushTimeoutMs;
    /** How long after the application end the listener keeps sending what the bus still delivers (0: nothing). */
    final long lateEventsMs;
    final long relayStartTimeoutMs;
    final long relayMaxBackoffMs;
    final long relayStatusIntervalMs;
    final int maxTaskSamplesPerStage;
    /** Least time between two progress events of one streaming query; 0 sends every one. */
    final long streamingProgressIntervalMs;
    /** Plan nodes per sql_plan_stats event; 0 sends none. */
    final int planMaxNodes;
    /** table_access events per SQL execution (the rest are counted in their {@code of}); 0 sends none */
    final int tablesMax;
    /**
     * Whether sql_plan_stats carries each whole-stage codegen stage's largest generated method (bytecode bytes). Off
     * by default: regenerating a stage's code costs the listener-bus thread 2-6 ms (docs/benchmarks.md).
     */
    final boolean planCodegenStats;
    /** executor_metrics on (per executor per stage, lifetimes); off leaves executor_added/_removed as they are. */
    final boolean executorMetrics;
    /** Most executor heartbeats read per second (all executors together); the rest are skipped and counted. */
    final long executorHeartbeatsPerSecond;
    /** app_start tag name -> the conf key it is read from (spark.sparktap.tags), in order. */
    final Map<String, String> tagKeys;
    /** Why the listener cannot run (one line), or null. */
    final String problem;

    private ListenerConfig(SparkConf conf) {
        Problems problems = new Problems();
        this.enabled = bool(conf, PREFIX + "enabled", true, problems);
        this.cluster = conf.get(PREFIX + "cluster", "default");
        String badCluster = Identifiers.problem(PREFIX + "cluster", cluster, "--conf spark.sparktap.cluster=<name>");
        if (enabled && badCluster != null) {
            problems.add(badCluster);
        }
        String bootstrap = conf.get(BOOTSTRAP_KEY, "").trim();
        this.bootstrapServers = bootstrap;
        if (enabled && bootstrap.isEmpty()) {
            problems.add("spark.sparktap.kafka.bootstrap.servers is not set: add --conf "
                    + "spark.sparktap.kafka.bootstrap.servers=<host:9092> (or spark.sparktap.enabled=false)");
        }
        this.topic = conf.get(KAFKA_PREFIX + "topic", DEFAULT_TOPIC).trim();
        Map<String, String> kafkaConf = new TreeMap<>();
        for (Tuple2<String, String> kv : conf.getAllWithPrefix(KAFKA_PREFIX)) {
            if (!kv._1().equals("topic")) {
                kafkaConf.put(kv._1(), kv._2());
            }
        }
        this.kafka = Collections.unmodifiableMap(kafkaConf);
        this.queueCapacity = (int) longValue(conf, PREFIX + "queueCapacity", 100_000, 1, 50_000_000, problems);
        this.healthIntervalMs = longValue(conf, PREFIX + "healthIntervalMs", 10_000, 100, 86_400_000L, problems);
        String tasks = conf.get(PREFIX + "tasks", "all").trim().toLowerCase(Locale.ROOT);
        TaskMode mode = TaskMode.ALL;
        double fraction = 1.0;
        if (tasks.equals("off") || tasks.equals("none")) {
            mode = TaskMode.OFF;
            fraction = 0.0;
        } else if (tasks.startsWith("sample:")) {
            try {
                fraction = Double.parseDouble(tasks.substring("sample:".length()));
            } catch (NumberFormatException e) {
                fraction = -1;
            }
            if (!(fraction >= 0.0 && fraction <= 1.0)) {
                problems.add("spark.sparktap.tasks=" + tasks + " is invalid: use --conf spark.sparktap.tasks=all, "
                        + "off or sample:<fraction between 0 and 1> (e.g. sample:0.1)");
                fraction = 1.0;
            } else {
                mode = TaskMode.SAMPLE;
            }
        } else if (!tasks.equals("all")) {
            problems.add("spark.sparktap.tasks=" + tasks + " is invalid: use --conf spark.sparktap.tasks=all, off "
                    + "or sample:<fraction> (e.g. sample:0.1)");
        }
        this.taskMode = mode;
        this.taskSampleFraction = fraction;
        String desc = conf.get(PREFIX + "descriptions", "redacted").trim().toLowerCase(Locale.ROOT);
        Descriptions descMode = Descriptions.REDACTED;
        if (desc.equals("off") || desc.equals("full")) {
            descMode = Descriptions.valueOf(desc.toUpperCase(Locale.ROOT));
        } else if (!desc.equals("redacted")) {
            problems.add("spark.sparktap.descriptions=" + desc + " is invalid: use --conf "
                    + "spark.sparktap.descriptions=redacted (the default), off or full");
        }
        this.descriptions = descMode;
        String chosen = conf.get(PREFIX + "transport", DEFAULT_TRANSPORT).trim().toLowerCase(Locale.ROOT);
        if (!chosen.equals("kafka") && !chosen.equals("relay")) {
            problems.add("spark.sparktap.transport=" + chosen + " is invalid: use --conf spark.sparktap.transport="
                    + "kafka (the default: a Kafka producer in the driver JVM) or relay (the Python relay process)");
            chosen = DEFAULT_TRANSPORT;
        }
        this.transport = chosen;
        this.stallMs = longValue(conf, PREFIX + "transport.stallMs", 10_000, 100, 600_000, problems);
        this.relayPython = conf.get(PREFIX + "relay.python", defaultPython());
        String spool = conf.get(PREFIX + "relay.spoolDir", "").trim();
        this.spoolDir = spool.isEmpty() ? null : spool;
        this.spoolMaxBytes = longValue(conf, PREFIX + "relay.spoolMaxBytes", 256L << 20, 0, Long.MAX_VALUE, problems);
        this.bufferMaxEvents = longValue(conf, PREFIX + "relay.bufferMaxEvents", 100_000, 1, 10_000_000, problems);
        this.flushTimeoutMs = longValue(conf, PREFIX + "relay.flushTimeoutMs", 10_000, 0, 600_000, problems);
        this.lateEventsMs = longValue(conf, PREFIX + "lateEventsMs", 10_000, 0, 600_000, problems);
        this.relayStartTimeoutMs = longValue(conf, PREFIX + "relay.startTimeoutMs", 30_000, 100, 600_000, problems);
        this.relayMaxBackoffMs = longValue(conf, PREFIX + "relay.maxBackoffMs", 30_000, 10, 3_600_000, problems);
        this.relayStatusIntervalMs = longValue(conf, PREFIX + "relay.statusIntervalMs", 1_000, 10, 60_000, problems);
        this.maxTaskSamplesPerStage = (int) longValue(conf, PREFIX + "stageQuantileSamples", 100_000, 100,
                10_000_000, problems);
        this.streamingProgressIntervalMs = longValue(conf, PREFIX + "streaming.progressIntervalMs", 1_000, 0,
                3_600_000L, problems);
        this.planMaxNodes = (int) longValue(conf, PREFIX + "plan.maxNodes", 500, 0, 100_000, problems);
        this.tablesMax = (int) longValue(conf, PREFIX + "tables.max", 100, 0, 100_000, problems);
        this.planCodegenStats = bool(conf, PREFIX + "plan.codegenStats", false, problems);
        this.executorMetrics = bool(conf, PREFIX + "executorMetrics.enabled", true, problems);
        this.executorHeartbeatsPerSecond = longValue(conf, PREFIX + "executorMetrics.maxHeartbeatsPerSecond", 200, 1,
                1_000_000, problems);
        this.tagKeys = tagKeys(conf.get(PREFIX + "tags", DEFAULT_TAGS), problems);
        this.problem = problems.first;
    }

    static final String DEFAULT_TAGS =
            "team=spark.sparktap.tag.team,cost_centre=spark.sparktap.tag.cost_centre,job=spark.sparktap.job";

    /** "tag=conf.key,tag2=conf.key2" -> ordered map; a malformed entry is a problem (one line, the fix). */
    static Map<String, String> tagKeys(String raw, Problems problems) {
        Map<String, String> out = new java.util.LinkedHashMap<>();
        for (String part : raw.split(",")) {
            String item = part.trim();
            if (item.isEmpty()) {
                continue;
            }
            int eq = item.indexOf('=');
            String name = eq > 0 ? item.substring(0, eq).trim() : "";
            String key = eq > 0 ? item.substring(eq + 1).trim() : "";
            if (name.isEmpty() || key.isEmpty() || !name.matches("[a-z][a-z0-9_]{0,63}")) {
                problems.add(PREFIX + "tags entry \"" + item + "\" is not tag=conf.key (tag: lower-case letters, digits, "
                        + "_): use e.g. --conf " + PREFIX + "tags=" + DEFAULT_TAGS);
                continue;
            }
            out.put(name, key);
        }
        return out;
    }

    static ListenerConfig from(SparkConf conf) {
        return new ListenerConfig(conf);
    }

    /** Whether a task attempt's task_end event is emitted (stage aggregates always use every task). */
    boolean emitTask(long taskId) {
        switch (taskMode) {
            case ALL:
                return true;
            case OFF:
                return false;
            default:
                // Deterministic per task id: the same tasks are picked on every run.
                long z = taskId + 0x9E3779B97F4A7C15L;
                z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
                z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
                z = z ^ (z >>> 31);
                return (z >>> 11) * 0x1.0p-53 < taskSampleFraction;
        }
    }

    String tasksSetting() {
        return taskMode == TaskMode.SAMPLE ? "sample:" + taskSampleFraction : taskMode.name().toLowerCase(Locale.ROOT);
    }

    /** PYSPARK_DRIVER_PYTHON, then PYSPARK_PYTHON (each only if it names a python), else python3. */
    static String defaultPython() {
        for (String env : new String[] {"PYSPARK_DRIVER_PYTHON", "PYSPARK_PYTHON"}) {
            String value = System.getenv(env);
            if (value != null && !value.trim().isEmpty()) {
                String base = value.trim();
                int slash = base.lastIndexOf('/');
                if (base.substring(slash + 1).startsWith("python")) {
                    return base;
                }
            }
        }
        return "python3";
    }

    private static boolean bool(SparkConf conf, String key, boolean dflt, Problems problems) {
        String raw = conf.get(key, Boolean.toString(dflt)).trim().toLowerCase(Locale.ROOT);
        if (raw.equals("true") || raw.equals("1") || raw.equals("yes")) {
            return true;
        }
        if (raw.equals("false") || raw.equals("0") || raw.equals("no")) {
            return false;
        }
        problems.add(key + "=" + raw + " is not a boolean: use --conf " + key + "=true or false");
        return dflt;
    }

    private static long longValue(SparkConf conf, String key, long dflt, long min, long max, Problems problems) {
        String raw = conf.get(key, "").trim();
        if (raw.isEmpty()) {
            return dflt;
        }
        try {
            long value = parseSize(raw);
            if (value < min || value > max) {
                problems.add(key + "=" + raw + " is out of range [" + min + ", " + max + "]: fix --conf " + key);
                return dflt;
            }
            return value;
        } catch (NumberFormatException e) {
            problems.add(key + "=" + raw + " is not a number: use e.g. --conf " + key + "=" + dflt);
            return dflt;
        }
    }

    /** A plain number, or a size with a k/m/g suffix (binary units, e.g. 64m). */
    static long parseSize(String raw) {
        String s = raw.trim().toLowerCase(Locale.ROOT);
        if (s.endsWith("b")) {
            s = s.substring(0, s.length() - 1);
        }
        long mult = 1;
        if (s.endsWith("k")) {
            mult = 1L << 10;
        } else if (s.endsWith("m")) {
            mult = 1L << 20;
        } else if (s.endsWith("g")) {
            mult = 1L << 30;
        }
        if (mult != 1) {
            s = s.substring(0, s.length() - 1);
        }
        return Math.multiplyExact(Long.parseLong(s.trim()), mult);
    }

    private static final class Problems {
        String first;

        void add(String message) {
            if (first == null) {
                first = message;
            }
        }
    }

    /** app_start.tags: each tag from its conf key (a name a user chose: {@link Redactor#name}); team falls back to the
     * YARN queue, then the k8s namespace. */
    Map<String, String> tags(SparkConf conf) {
        Map<String, String> keys = tagKeys;
        Map<String, String> out = new java.util.TreeMap<>();
        for (Map.Entry<String, String> kv : keys.entrySet()) {
            String value = conf.get(kv.getValue(), "").trim();
            if (value.isEmpty() && kv.getKey().equals("team")) {
                value = conf.get("spark.yarn.queue", "").trim();
                if (value.isEmpty()) {
                    value = conf.get("spark.kubernetes.namespace", "").trim();
                }
            }
            if (!value.isEmpty()) {
                out.put(kv.getKey(), Redactor.name(value));
            }
        }
        return out;
    }
}
