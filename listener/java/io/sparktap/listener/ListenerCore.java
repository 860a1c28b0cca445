package io.sparktap.listener;

import java.util.Collections;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;

import org.apache.spark.SparkConf;
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

/**
 * The listener's work, behind the {@link SparkTapListener} facade: turns Spark's listener events into compact
 * versioned JSON events and hands them to the relay process that produces them to Kafka.
 *
 * <p>Every callback does bounded work (copy values, build a small object, a non-blocking offer to a bounded queue).
 * The facade calls it only while {@link #active}, and catches whatever it throws: an ordinary failure is logged once
 * per kind, counted and the listener carries on; a failure to link (a class or method this Spark does not have)
 * turns the listener off after a last {@code listener_health} that carries the error, so no partial data is sent.
 */
final class ListenerCore implements EventWriter.Owner {
    private static final Logger LOG = LoggerFactory.getLogger("io.sparktap.listener.SparkTapListener");
    private static final int MAX_COMPLETED_STAGES = 10_000;

    volatile boolean active;
    /** The application end was posted: events still come until the bus stops ({@link AppEndClose}). */
    volatile boolean ended;
    private volatile String offReason;
    private final SparkLine line;
    private ListenerConfig config;
    private Redactor redactor;
    private EventPipeline pipeline;
    private Transport writer;
    private RelayStatus relayStatus;
    private ScheduledExecutorService healthTimer;
    private SqlTracker sql;
    private StreamingTracker streaming;
    private ExecutorTracker executors;
    private Map<String, String> tags = Collections.emptyMap();
    private Map<String, String> properties = Collections.emptyMap();
    private String master = "";
    private long appStartTime = -1;
    /** Replaying an event log (ReplayMain): no relay, no writer thread, no health timer. */
    private final boolean replay;
    /** Replay: the Spark version that wrote the log (its SparkListenerLogStart), for app_start. */
    volatile String replaySparkVersion;
    private JsonOut.Envelope envelope;

    // bus-thread state
    private JobEvents jobEvents;
    private ConnectTracker connect; // Spark Connect operations and sessions (issue 26)
    private final Map<Long, StageStats> stages = new HashMap<>(); // (stage id, attempt) -> stats
    /** The stage attempts completed most recently (bounded): a task end of one of those is late. */
    private final Map<Long, Boolean> completedStages = new BoundedMap<>(MAX_COMPLETED_STAGES);
    private ExecutorEvents executorEvents;

    private final Map<String, Boolean> loggedErrors = new ConcurrentHashMap<>();
    private final CallbackErrors errors = new CallbackErrors();

    ListenerCore(SparkConf conf, SparkLine line) {
        this(conf, line, false);
    }

    /** {@code replay}: driven by ReplayMain, which takes the queued events itself ({@link #drainReplayed}). */
    ListenerCore(SparkConf conf, SparkLine line, boolean replay) {
        this.line = line;
        this.replay = replay;
        init(conf);
    }

    private void init(SparkConf conf) {
        config = ListenerConfig.from(conf);
        if (!config.enabled) { // "false" never gets here (the facade stops first); "no" or "0" do
            offReason = "spark.sparktap.enabled=false";
            LOG.info("sparktap: listener disabled (spark.sparktap.enabled=false)");
            return;
        }
        if (config.problem != null) {
            offReason = config.problem;
            LOG.warn("sparktap: listener is off for this application: {}; the job runs on", config.problem);
            return;
        }
        try {
            redactor = Redactor.from(conf, config.descriptions);
        } catch (java.io.IOException e) {
            offReason = "its redaction patterns cannot be read (" + e.getMessage() + ")";
            LOG.warn("sparktap: listener is off for this application: {}; the job runs on", offReason);
            return;
        }
        properties = redactor.properties(conf);
        master = conf.get("spark.master", "");
        String appId = conf.get("spark.app.id", "unknown-app");
        String attempt = conf.get("spark.app.attempt.id", "");
        String badId = Identifiers.problem("spark.app.id", appId, "the id Spark's cluster manager gives; do not "
                + "set spark.app.id to anything else");
        if (badId == null && !attempt.isEmpty()) {
            badId = Identifiers.problem("spark.app.attempt.id", attempt, "the attempt id Spark's cluster manager gives");
        }
        if (badId != null) {
            offReason = badId;
            LOG.warn("sparktap: listener is off for this application: {}; the job runs on", badId);
            return;
        }
        String appName = Redactor.name(conf.get("spark.app.name", ""));
        envelope = new JsonOut.Envelope(config.cluster, appId, attempt, appName);
        pipeline = new EventPipeline(config.queueCapacity, errors);
        relayStatus = new RelayStatus();
        try {
            sql = new SqlTracker(redactor, config.planMaxNodes, config.planCodegenStats, this::submit, this::failed);
            sql.livePlans = !replay; // a replayed log has no running QueryExecution (no DSv2 scan files)
            sql.tablesMax = config.tablesMax;
        } catch (LinkageError e) {
            sql = null; // no spark-sql on the class path: no SQL/AQE events
        }
        jobEvents = new JobEvents(redactor, this::submit);
        connect = new ConnectTracker(redactor, this::submit);
        try {
            streaming = new StreamingTracker(redactor, config.streamingProgressIntervalMs, this::submit);
        } catch (LinkageError e) {
            streaming = null; // likewise for Structured Streaming
        }
        if (config.executorMetrics) {
            executors = new ExecutorTracker(conf, config.executorHeartbeatsPerSecond, this::submit);
        }
        executorEvents = new ExecutorEvents(executors, (int) parseId(conf.get("spark.task.cpus", "1")), redactor,
                stages, this::submit);
        tags = config.tags(conf);
        active = true;
        if (replay) {
            return;
        }
        writer = config.transport.equals("kafka") ? new KafkaWriter(config, pipeline, envelope, relayStatus, LOG, this)
                : new EventWriter(config, pipeline, envelope, relayStatus, LOG, this);
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
        LOG.info("sparktap: listener on ({} on {}): app_id={} topic={} transport={} tasks={} descriptions={} "
                + "queueCapacity={}", line.artifact, SparkLine.runtime(), appId, config.topic, writer.name(),
                config.tasksSetting(),
                config.descriptions.name().toLowerCase(java.util.Locale.ROOT), config.queueCapacity);
    }

    // ------------------------------------------------------------------------------------------- plumbing

    private void submit(Event e) {
        pipeline.submit(e);
    }

    private void emitHealth() {
        if (!active) {
            return;
        }
        try {
            long now = System.currentTimeMillis();
            HealthEvent h = new HealthEvent(now, now - writer.lastHealthAtMs(), relayStatus.totals());
            writer.healthEmitted(now);
            pipeline.submitHealth(h);
        } catch (Throwable t) {
            SparkTapListener.rethrowIfFatal(t);
            callbackFailed("listener_health", t);
        }
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
        errors.record(where, t, redactor);
        String key = where + ":" + t.getClass().getName();
        if (loggedErrors.size() < 100 && loggedErrors.putIfAbsent(key, Boolean.TRUE) == null) {
            LOG.warn("sparktap: {} failed ({}); the listener carries on (logged once per kind)", where, t.toString());
        }
    }

    /** A callback threw: a failure to link turns the listener off (see the class comment), anything else is counted. */
    void callbackFailed(String where, Throwable t) {
        if (!(t instanceof LinkageError)) {
            failed(where, t);
            return;
        }
        synchronized (this) {
            if (!active) {
                return;
            }
            active = false;
        }
        errors.record(where, t, redactor);
        offReason = where + " failed to link (" + t + ") on " + SparkLine.runtime() + ": this jar is " + line.artifact
                + ".jar; `sparktap listener-jar --spark-version X.Y` prints the one for this Spark";
        LOG.error("sparktap: listener is off for this application: {}; the events sent so far end with a "
                + "listener_health carrying the error; the job runs on", offReason);
        if (healthTimer != null) {
            healthTimer.shutdownNow();
        }
        if (writer != null) {
            // drain what was accepted before the failure, then the final listener_health (with the error), EOF
            writer.requestStop(System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(config.flushTimeoutMs));
        }
    }

    /** Number of callback failures so far (each was logged once per kind and swallowed). */
    long callbackErrors() {
        return errors.count();
    }

    /** Why the listener turned itself off (the line it logged), or null. */
    String offReason() {
        return offReason;
    }

    /** The counters listener_health would report now, as a JSON object (for diagnostics and tests). */
    String statusJson() {
        if (pipeline == null || relayStatus == null) {
            return "{}";
        }
        RelayStatus.Totals t = relayStatus.totals();
        String first = errors.first();
        return "{\"seq\":" + pipeline.seq() + ",\"events_accepted\":" + pipeline.accepted()
                + ",\"events_dropped\":" + pipeline.dropped() + ",\"queue_depth\":" + pipeline.queue.size()
                + ",\"events_written\":" + relayStatus.writtenTotal()
                + ",\"relay_backlog\":" + t.backlog + ",\"relay_restarts\":" + t.restarts
                + ",\"relay_spooled\":" + t.spooled + ",\"kafka_delivery_errors\":" + t.deliveryErrors
                + ",\"kafka_events_lost\":" + t.lost + ",\"callback_errors\":" + errors.count()
                + ",\"first_error\":" + (first == null ? "null" : CallbackErrors.quote(first))
                + ",\"relay_up\":" + writer.relayUp() + "}";
    }

    /** Replay only: the attempt's envelope (null when the core is off). */
    JsonOut.Envelope envelope() {
        return envelope;
    }

    /** Replay only: hand every queued event to {@code out}, in seq order (nothing else drains the queue). */
    void drainReplayed(java.util.function.Consumer<Event> out) {
        if (pipeline == null) {
            return;
        }
        Event e;
        while ((e = pipeline.queue.poll()) != null) {
            out.accept(e);
        }
    }

    // ------------------------------------------------------------------------------------------- application

    void applicationStart(SparkListenerApplicationStart e) {
        appStartTime = e.time();
        String user = Redactor.name(e.sparkUser());
        String version = replay && replaySparkVersion != null ? replaySparkVersion : SparkLine.sparkVersion();
        Map<String, String> props = properties;
        Map<String, String> appTags = tags;
        String m = Redactor.name(master);
        submit(Event.of(EventType.APP_START, e.time(), out -> {
            out.str("spark_version", version);
            out.str("master", m);
            out.str("user", user);
            out.stringMap("properties", props);
            out.stringMap("tags", appTags);
        }));
    }

    void applicationEnd(SparkListenerApplicationEnd e) {
        try {
            long duration = appStartTime >= 0 ? Math.max(0L, e.time() - appStartTime) : -1L;
            Map<String, String> props = properties;
            long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(config.flushTimeoutMs);
            closeLifetimes(e.time());
            if (healthTimer != null) {
                healthTimer.shutdownNow();
            }
            // The job is over: wait a little for room rather than drop the last event.
            pipeline.submitWaiting(Event.of(EventType.APP_END, e.time(), out -> {
                out.optId("duration_ms", duration);
                out.stringMap("properties", props);
            }), Math.min(2000L, config.flushTimeoutMs / 2));
            if (writer == null) {
                return; // replay: ReplayMain drains the queue, to the end of the log
            }
            ended = true;
            AppEndClose close = new AppEndClose(writer, config, LOG, this, this::endOfApplication);
            if (!close.afterBus(Thread.currentThread())) {
                close.now(deadline, true); // on the bus thread: its state can go
            } // else the close comes once the bus has delivered what SparkContext.stop() cancels
        } catch (Throwable t) {
            SparkTapListener.rethrowIfFatal(t);
            failed("onApplicationEnd", t);
            if (!replay) {
                endOfApplication(true);
            }
        }
    }

    /**
     * Nothing more is sent live (a replay goes on to the end of the log: ReplayMain). The bus-thread state is cleared
     * only when no callback can run any more; after a close that did not wait for the bus, it goes with the listener.
     */
    private void endOfApplication(boolean busStopped) {
        active = false;
        pipeline.close();
        if (!busStopped) {
            return;
        }
        jobEvents.clear();
        stages.clear();
        completedStages.clear();
        if (connect != null) {
            connect.clear();
        }
        if (sql != null) {
            sql.clear();
        }
        if (executors != null) {
            executors.clear();
        }
    }

    // ------------------------------------------------------------------------------------------- jobs

    void jobStart(SparkListenerJobStart e) {
        jobEvents.started(e);
    }

    void jobEnd(SparkListenerJobEnd e) {
        jobEvents.ended(e);
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

    static long stageKey(int stageId, int attempt) {
        return ((long) stageId << 32) | (attempt & 0xFFFFFFFFL);
    }

    void stageSubmitted(SparkListenerStageSubmitted e) {
        StageInfo info = e.stageInfo();
        int stageId = info.stageId();
        int attempt = info.attemptNumber();
        if (stages.size() >= 10_000) {
            stages.clear(); // stages that never completed: never grow without bound
        }
        StageStats fresh = new StageStats(config.maxTaskSamplesPerStage);
        long slots = executorEvents.slots();
        fresh.seeSlots(slots);
        stages.put(stageKey(stageId, attempt), fresh);
        if (executors != null) {
            executors.stageSubmitted(stageKey(stageId, attempt));
        }
        StageOwner owner = jobEvents.owner(stageId);
        long jobId = owner != null ? owner.jobId : -1L;
        long sqlId = owner != null ? owner.sqlExecutionId : parseId(e.properties() == null ? null
                : e.properties().getProperty("spark.sql.execution.id"));
        int[] parentIds = Scala.ints(info.parentIds());
        long submitted = Scala.optionLong(info.submissionTime());
        ConnectTracker.Who who = owner != null ? owner.who : ConnectTracker.Who.NONE;
        String name = StageCompletedEvent.name(info, who, redactor);
        int numTasks = info.numTasks();
        submit(Event.of(EventType.STAGE_SUBMITTED, submitted >= 0 ? submitted : Clock.now(),
                out -> {
                    out.num("stage_id", stageId);
                    out.count("stage_attempt", attempt);
                    out.str("name", name);
                    out.num("num_tasks", numTasks);
                    out.ints("parent_stage_ids", parentIds);
                    out.optId("job_id", jobId);
                    out.optId("sql_execution_id", sqlId);
                    out.optId("submission_time_ms", submitted);
                    out.count("slots", slots);
                    who.write(out);
                }));
    }

    void taskEnd(SparkListenerTaskEnd e) {
        TaskEndEvent task = new TaskEndEvent(e, redactor);
        StageOwner owner = jobEvents.owner(task.stageId);
        if (owner != null) {
            task.who = owner.who;
        }
        StageStats stats = stages.get(stageKey(task.stageId, task.stageAttempt));
        task.late = stats == null && completedStages.containsKey(stageKey(task.stageId, task.stageAttempt));
        if (stats != null) {
            stats.add(task);
            try {
                StageSqlSums.addTask(stats.sqlSums, e.taskInfo());
            } catch (RuntimeException | LinkageError ex) {
                failed("task_end SQL metric updates", ex); // its stage's SQL totals go without this task's
            }
        }
        if (executors != null) {
            executors.taskEnd(task.executorId, stageKey(task.stageId, task.stageAttempt), e.taskExecutorMetrics(),
                    task.failureMessage);
        }
        if (task.late || config.emitTask(task.taskId)) {
            pipeline.submit(task); // a late one whatever the sampling: its stage's totals are corrected from it
        }
    }

    void stageCompleted(SparkListenerStageCompleted e) {
        StageInfo info = e.stageInfo();
        int stageId = info.stageId();
        int attempt = info.attemptNumber();
        StageStats stats = stages.remove(stageKey(stageId, attempt));
        completedStages.put(stageKey(stageId, attempt), Boolean.TRUE);
        if (stats == null) {
            stats = new StageStats(1);
        }
        StageOwner owner = jobEvents.owner(stageId);
        Option<String> failure = info.failureReason();
        long completed = Scala.optionLong(info.completionTime());
        if (executors != null) {
            executors.stageCompleted(stageId, attempt, stageKey(stageId, attempt), completed >= 0 ? completed
                    : Clock.now());
        }
        long sqlId = owner != null ? owner.sqlExecutionId : -1L;
        ConnectTracker.Who who = owner != null ? owner.who : ConnectTracker.Who.NONE;
        submit(new StageCompletedEvent(completed >= 0 ? completed : Clock.now(), stageId, attempt,
                StageCompletedEvent.name(info, who, redactor), owner != null ? owner.jobId : -1L, sqlId,
                failure.isEmpty(), failure.isDefined() ? redactor.text(failure.get()) : null,
                Scala.optionLong(info.submissionTime()), completed, info.numTasks(),
                StageSqlSums.of(info, stats.sqlSums, this::failed), sql == null ? null : sql.stageInput(info, sqlId),
                stats, who));
    }

    // ------------------------------------------------------------------------------------------- executors, SQL

    void executorAdded(SparkListenerExecutorAdded e) {
        executorEvents.added(e);
    }

    void executorRemoved(SparkListenerExecutorRemoved e) {
        executorEvents.removed(e);
    }

    /** At app end: the lifetimes still open close; a failure loses their last figures only (counted, logged). */
    private void closeLifetimes(long time) {
        try {
            executorEvents.closeLifetimes(time, LOG);
        } catch (RuntimeException ex) {
            failed("onApplicationEnd", ex);
        }
    }

    void resourceProfileAdded(org.apache.spark.scheduler.SparkListenerResourceProfileAdded e) {
        if (executors != null) {
            executors.profileAdded(e.resourceProfile());
        }
    }

    void executorMetricsUpdate(org.apache.spark.scheduler.SparkListenerExecutorMetricsUpdate e) {
        if (executors != null) {
            executors.heartbeat(e);
        }
    }

    void otherEvent(SparkListenerEvent e) throws ReflectiveOperationException {
        if (sql != null && sql.handle(e)) {
            return;
        }
        if (connect != null && connect.handle(e)) {
            return;
        }
        if (streaming != null) {
            streaming.handle(e);
        }
    }
}
