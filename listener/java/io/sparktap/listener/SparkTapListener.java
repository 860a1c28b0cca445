package io.sparktap.listener;

import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.spark.SparkConf;
import org.apache.spark.scheduler.AccumulableInfo;
import org.apache.spark.scheduler.JobFailed;
import org.apache.spark.scheduler.JobResult;
import org.apache.spark.scheduler.SparkListener;
import org.apache.spark.scheduler.SparkListenerApplicationEnd;
import org.apache.spark.scheduler.SparkListenerApplicationStart;
import org.apache.spark.scheduler.SparkListenerEvent;
import org.apache.spark.scheduler.SparkListenerExecutorAdded;
import org.apache.spark.scheduler.SparkListenerExecutorRemoved;
import org.apache.spark.scheduler.SparkListenerJobEnd;
import org.apache.spark.scheduler.SparkListenerJobStart;
import org.apache.spark.scheduler.SparkListenerStageCompleted;
import org.apache.spark.scheduler.SparkListenerStageSubmitted;
import org.apache.spark.scheduler.SparkListenerTaskEnd;
import org.apache.spark.scheduler.StageInfo;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import scala.Option;
import scala.jdk.javaapi.CollectionConverters;

/**
 * sparktap's SparkListener: turns Spark's listener events into compact versioned JSON events and hands them to
 * the relay process that produces them to Kafka.
 *
 * <p>Install with {@code --conf spark.extraListeners=io.sparktap.listener.SparkTapListener} and
 * {@code --conf spark.sparktap.kafka.bootstrap.servers=host:9092}. It never hurts the job: every callback does
 * bounded work (copy values, build a small object, a non-blocking offer to a bounded queue), catches everything
 * but fatal VM errors, and the listener turns itself off with one log line if it cannot run.
 */
public final class SparkTapListener extends SparkListener implements EventWriter.Owner {
    private static final Logger LOG = LoggerFactory.getLogger("io.sparktap.listener.SparkTapListener");

    private volatile boolean active;
    private volatile String offReason;
    private ListenerConfig config;
    private Redactor redactor;
    private EventPipeline pipeline;
    private EventWriter writer;
    private RelayStatus relayStatus;
    private ScheduledExecutorService healthTimer;
    private SqlTracker sql;
    private Map<String, String> properties = Map.of();
    private String master = "";
    private long appStartTime = -1;

    // bus-thread state
    private final Map<Integer, long[]> jobs = new HashMap<>(); // job id -> {start time, sql execution id}
    private final Map<Integer, long[]> stageJob = new HashMap<>(); // stage id -> {job id, sql execution id}
    private final Map<Long, StageStats> stages = new HashMap<>(); // (stage id, attempt) -> stats

    private final Map<String, Boolean> loggedErrors = new ConcurrentHashMap<>();
    private final AtomicLong callbackErrors = new AtomicLong();

    public SparkTapListener(SparkConf conf) {
        try {
            init(conf);
        } catch (Throwable t) {
            rethrowIfFatal(t);
            active = false;
            offReason = "it failed to start: " + t;
            LOG.warn("sparktap: listener is off for this application: it failed to start ({}); the job runs on", t);
        }
    }

    private void init(SparkConf conf) {
        config = ListenerConfig.from(conf);
        if (!config.enabled) {
            offReason = "spark.sparktap.enabled=false";
            LOG.info("sparktap: listener disabled (spark.sparktap.enabled=false)");
            return;
        }
        if (config.problem != null) {
            offReason = config.problem;
            LOG.warn("sparktap: listener is off for this application: {}; the job runs on", config.problem);
            return;
        }
        redactor = Redactor.from(conf);
        properties = redactor.properties(conf);
        master = conf.get("spark.master", "");
        String appId = conf.get("spark.app.id", "unknown-app");
        String attempt = conf.get("spark.app.attempt.id", "");
        String appName = redactor.text(conf.get("spark.app.name", ""), 200);
        JsonOut.Envelope envelope = new JsonOut.Envelope(config.cluster, appId, attempt, appName);
        pipeline = new EventPipeline(config.queueCapacity);
        relayStatus = new RelayStatus();
        try {
            sql = new SqlTracker(redactor, this::submit);
        } catch (LinkageError e) {
            sql = null; // no spark-sql on the class path: no SQL/AQE events
        }
        writer = new EventWriter(config, pipeline, envelope, relayStatus, LOG, this);
        active = true;
        Thread thread = new Thread(writer, "sparktap-writer");
        thread.setDaemon(true);
        thread.start();
        healthTimer = Executors.newSingleThreadScheduledExecutor(r -> {
            Thread t = new Thread(r, "sparktap-health");
            t.setDaemon(true);
            return t;
        });
        healthTimer.scheduleAtFixedRate(this::emitHealth, config.healthIntervalMs, config.healthIntervalMs,
                TimeUnit.MILLISECONDS);
        LOG.info("sparktap: listener on: app_id={} topic={} tasks={} queueCapacity={}", appId, config.topic,
                config.tasksSetting(), config.queueCapacity);
    }

    // ------------------------------------------------------------------------------------------- plumbing

    private void submit(Event e) {
        pipeline.submit(e);
    }

    private void emitHealth() {
        guarded("listener_health", () -> {
            long now = System.currentTimeMillis();
            HealthEvent h = new HealthEvent(now, now - writer.lastHealthAtMs(), relayStatus.totals());
            writer.healthEmitted(now);
            pipeline.submitHealth(h);
        });
    }

    @Override
    public void disable(String oneLine) {
        active = false;
        offReason = oneLine;
        if (pipeline != null) {
            pipeline.close();
            pipeline.queue.clear();
        }
        if (healthTimer != null) {
            healthTimer.shutdownNow();
        }
        LOG.warn("sparktap: listener is off for this application: {}; the job runs on", oneLine);
    }

    @Override
    public void failed(String where, Throwable t) {
        callbackErrors.incrementAndGet();
        String key = where + ":" + t.getClass().getName();
        if (loggedErrors.size() < 100 && loggedErrors.putIfAbsent(key, Boolean.TRUE) == null) {
            LOG.warn("sparktap: {} failed ({}); the listener carries on (logged once per kind)", where, t.toString());
        }
    }

    /** Run one callback's work unless the listener is off: nothing but a fatal VM error escapes into Spark. */
    private void guarded(String where, Runnable work) {
        if (!active) {
            return;
        }
        try {
            work.run();
        } catch (Throwable t) {
            rethrowIfFatal(t);
            failed(where, t);
        }
    }

    private static void rethrowIfFatal(Throwable t) {
        if (t instanceof VirtualMachineError) {
            throw (VirtualMachineError) t;
        }
    }

    /** Number of callback failures so far (each was logged once per kind and swallowed). */
    public long callbackErrors() {
        return callbackErrors.get();
    }

    /** Whether the listener is sending events (false once off, and after the application ended). */
    public boolean isActive() {
        return active;
    }

    /** Why the listener turned itself off (the line it logged), or null. */
    public String offReason() {
        return offReason;
    }

    /** The counters listener_health would report now, as a JSON object (for diagnostics and tests). */
    public String statusJson() {
        if (pipeline == null || relayStatus == null) {
            return "{}";
        }
        RelayStatus.Totals t = relayStatus.totals();
        return "{\"seq\":" + pipeline.seq() + ",\"events_accepted\":" + pipeline.accepted()
                + ",\"events_dropped\":" + pipeline.dropped() + ",\"queue_depth\":" + pipeline.queue.size()
                + ",\"events_written\":" + relayStatus.writtenTotal()
                + ",\"relay_backlog\":" + t.backlog + ",\"relay_restarts\":" + t.restarts
                + ",\"relay_spooled\":" + t.spooled + ",\"kafka_delivery_errors\":" + t.deliveryErrors
                + ",\"kafka_events_lost\":" + t.lost + ",\"callback_errors\":" + callbackErrors.get()
                + ",\"relay_up\":" + writer.relayUp() + "}";
    }

    // ------------------------------------------------------------------------------------------- application

    @Override
    public void onApplicationStart(SparkListenerApplicationStart e) {
        guarded("onApplicationStart", () -> applicationStart(e));
    }

    private void applicationStart(SparkListenerApplicationStart e) {
        appStartTime = e.time();
        String user = e.sparkUser();
        String version = sparkVersion();
        Map<String, String> props = properties;
        String m = master;
        submit(Event.of(EventType.APP_START, e.time(), out -> {
            out.str("spark_version", version);
            out.str("master", m);
            out.str("user", user);
            out.stringMap("properties", props);
        }));
    }

    @Override
    public void onApplicationEnd(SparkListenerApplicationEnd e) {
        if (!active) {
            return;
        }
        try {
            long duration = appStartTime >= 0 ? Math.max(0L, e.time() - appStartTime) : -1L;
            Map<String, String> props = properties;
            long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(config.flushTimeoutMs);
            healthTimer.shutdownNow();
            // The job is over: wait a little for room rather than drop the last event.
            pipeline.submitWaiting(Event.of(EventType.APP_END, e.time(), out -> {
                out.optId("duration_ms", duration);
                out.stringMap("properties", props);
            }), Math.min(2000L, config.flushTimeoutMs / 2));
            writer.requestStop(deadline);
            if (!writer.awaitDone(config.flushTimeoutMs + 500)) {
                LOG.warn("sparktap: the relay did not finish within spark.sparktap.relay.flushTimeoutMs={} ms; "
                        + "not waiting longer", config.flushTimeoutMs);
            }
        } catch (Throwable t) {
            rethrowIfFatal(t);
            failed("onApplicationEnd", t);
        } finally {
            active = false;
            pipeline.close();
            jobs.clear();
            stageJob.clear();
            stages.clear();
            if (sql != null) {
                sql.clear();
            }
        }
    }

    static String sparkVersion() {
        try {
            return org.apache.spark.package$.MODULE$.SPARK_VERSION();
        } catch (Throwable t) {
            rethrowIfFatal(t);
            return "unknown";
        }
    }

    // ------------------------------------------------------------------------------------------- jobs

    @Override
    public void onJobStart(SparkListenerJobStart e) {
        guarded("onJobStart", () -> jobStart(e));
    }

    private void jobStart(SparkListenerJobStart e) {
        Properties props = e.properties();
        long sqlId = parseId(props == null ? null : props.getProperty("spark.sql.execution.id"));
        String group = props == null ? null : props.getProperty("spark.jobGroup.id");
        String description = props == null ? null : props.getProperty("spark.job.description");
        int jobId = e.jobId();
        int[] stageIds = intArray(e.stageIds());
        for (int stageId : stageIds) {
            stageJob.put(stageId, new long[] {jobId, sqlId});
        }
        jobs.put(jobId, new long[] {e.time(), sqlId});
        String safeGroup = redactor.text(group, 200);
        String safeDescription = redactor.text(description, 1000);
        submit(Event.of(EventType.JOB_START, e.time(), out -> {
            out.num("job_id", jobId);
            out.ints("stage_ids", stageIds);
            out.optId("sql_execution_id", sqlId);
            out.opt("job_group", safeGroup);
            out.opt("description", safeDescription);
        }));
    }

    @Override
    public void onJobEnd(SparkListenerJobEnd e) {
        guarded("onJobEnd", () -> jobEnd(e));
    }

    private void jobEnd(SparkListenerJobEnd e) {
        int jobId = e.jobId();
        long[] job = jobs.remove(jobId);
        long duration = job != null ? Math.max(0L, e.time() - job[0]) : -1L;
        JobResult result = e.jobResult();
        boolean failed = result instanceof JobFailed;
        String reason = null;
        if (failed) {
            Exception ex = ((JobFailed) result).exception();
            reason = redactor.text(ex == null ? null : String.valueOf(ex.getMessage()), 500);
        }
        for (Iterator<long[]> it = stageJob.values().iterator(); it.hasNext();) {
            if (it.next()[0] == jobId) {
                it.remove();
            }
        }
        String failureReason = reason;
        submit(Event.of(EventType.JOB_END, e.time(), out -> {
            out.num("job_id", jobId);
            out.str("result", failed ? "failed" : "succeeded");
            out.opt("failure_reason", failureReason);
            out.optId("duration_ms", duration);
        }));
    }

    static long parseId(String value) {
        if (value == null || value.isEmpty()) {
            return -1L;
        }
        try {
            return Long.parseLong(value.trim());
        } catch (NumberFormatException ex) {
            return -1L;
        }
    }

    // ------------------------------------------------------------------------------------------- stages and tasks

    private static long stageKey(int stageId, int attempt) {
        return ((long) stageId << 32) | (attempt & 0xFFFFFFFFL);
    }

    @Override
    public void onStageSubmitted(SparkListenerStageSubmitted e) {
        guarded("onStageSubmitted", () -> stageSubmitted(e));
    }

    private void stageSubmitted(SparkListenerStageSubmitted e) {
        StageInfo info = e.stageInfo();
        int stageId = info.stageId();
        int attempt = info.attemptNumber();
        if (stages.size() >= 10_000) {
            stages.clear(); // stages that never completed: never grow without bound
        }
        stages.put(stageKey(stageId, attempt), new StageStats(config.maxTaskSamplesPerStage));
        long[] job = stageJob.get(stageId);
        long jobId = job != null ? job[0] : -1L;
        long sqlId = job != null ? job[1] : parseId(e.properties() == null ? null
                : e.properties().getProperty("spark.sql.execution.id"));
        int[] parentIds = intArray(info.parentIds());
        long submitted = optionLong(info.submissionTime());
        String name = redactor.text(info.name(), 300);
        int numTasks = info.numTasks();
        submit(Event.of(EventType.STAGE_SUBMITTED, submitted >= 0 ? submitted : System.currentTimeMillis(),
                out -> {
                    out.num("stage_id", stageId);
                    out.count("stage_attempt", attempt);
                    out.str("name", name);
                    out.num("num_tasks", numTasks);
                    out.ints("parent_stage_ids", parentIds);
                    out.optId("job_id", jobId);
                    out.optId("sql_execution_id", sqlId);
                    out.optId("submission_time_ms", submitted);
                }));
    }

    @Override
    public void onTaskEnd(SparkListenerTaskEnd e) {
        guarded("onTaskEnd", () -> taskEnd(e));
    }

    private void taskEnd(SparkListenerTaskEnd e) {
        TaskEndEvent task = new TaskEndEvent(e, redactor);
        StageStats stats = stages.get(stageKey(task.stageId, task.stageAttempt));
        if (stats != null) {
            stats.add(task);
        }
        if (config.emitTask(task.taskId)) {
            pipeline.submit(task);
        }
    }

    @Override
    public void onStageCompleted(SparkListenerStageCompleted e) {
        guarded("onStageCompleted", () -> stageCompleted(e));
    }

    private void stageCompleted(SparkListenerStageCompleted e) {
        StageInfo info = e.stageInfo();
        int stageId = info.stageId();
        int attempt = info.attemptNumber();
        StageStats stats = stages.remove(stageKey(stageId, attempt));
        if (stats == null) {
            stats = new StageStats(1);
        }
        long[] job = stageJob.get(stageId);
        Option<String> failure = info.failureReason();
        long completed = optionLong(info.completionTime());
        submit(new StageCompletedEvent(completed >= 0 ? completed : System.currentTimeMillis(), stageId, attempt,
                redactor.text(info.name(), 300), job != null ? job[0] : -1L, job != null ? job[1] : -1L,
                failure.isEmpty(), failure.isDefined() ? redactor.text(failure.get(), 500) : null,
                optionLong(info.submissionTime()), completed, info.numTasks(), writtenFiles(info), stats));
    }

    /** Sum of the stage's accumulables named "number of written files", or -1 when Spark reports none. */
    static long writtenFiles(StageInfo info) {
        long files = -1L;
        for (AccumulableInfo acc : CollectionConverters.asJava(info.accumulables().values())) {
            Option<String> name = acc.name();
            if (name.isDefined() && name.get().equals("number of written files") && acc.value().isDefined()) {
                Object v = acc.value().get();
                if (v instanceof Number) {
                    files = Math.max(0L, files) + ((Number) v).longValue();
                }
            }
        }
        return files;
    }

    static int[] intArray(scala.collection.Seq<Object> ids) {
        List<Object> list = CollectionConverters.asJava(ids);
        int[] out = new int[list.size()];
        for (int i = 0; i < out.length; i++) {
            out[i] = ((Number) list.get(i)).intValue();
        }
        return out;
    }

    static long optionLong(Option<Object> value) {
        return value != null && value.isDefined() ? ((Number) value.get()).longValue() : -1L;
    }

    // ------------------------------------------------------------------------------------------- executors, SQL

    @Override
    public void onExecutorAdded(SparkListenerExecutorAdded e) {
        guarded("onExecutorAdded", () -> executorAdded(e));
    }

    private void executorAdded(SparkListenerExecutorAdded e) {
        String id = e.executorId();
        String host = e.executorInfo().executorHost();
        int cores = e.executorInfo().totalCores();
        submit(Event.of(EventType.EXECUTOR_ADDED, e.time(), out -> {
            out.str("executor_id", id);
            out.str("host", host);
            out.count("total_cores", cores);
        }));
    }

    @Override
    public void onExecutorRemoved(SparkListenerExecutorRemoved e) {
        guarded("onExecutorRemoved", () -> executorRemoved(e));
    }

    private void executorRemoved(SparkListenerExecutorRemoved e) {
        String id = e.executorId();
        String reason = redactor.text(e.reason(), 500);
        submit(Event.of(EventType.EXECUTOR_REMOVED, e.time(), out -> {
            out.str("executor_id", id);
            out.str("reason", reason);
        }));
    }

    @Override
    public void onOtherEvent(SparkListenerEvent e) {
        if (!active || sql == null) {
            return;
        }
        try {
            sql.handle(e);
        } catch (LinkageError le) {
            sql = null; // spark-sql classes missing or incompatible: keep the rest going
            failed("onOtherEvent", le);
        } catch (Throwable t) {
            rethrowIfFatal(t);
            failed("onOtherEvent " + e.getClass().getSimpleName(), t);
        }
    }
}
