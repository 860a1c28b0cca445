package io.sparktap.listener;

import java.util.HashMap;
import java.util.Map;
import java.util.function.Consumer;

import org.apache.spark.scheduler.SparkListenerExecutorAdded;
import org.apache.spark.scheduler.SparkListenerExecutorRemoved;
import org.slf4j.Logger;

/**
 * {@code executor_added} and {@code executor_removed}, the cores registered executors offer (a stage's slots), and
 * the lifetimes still open at the application end, closed with a synthetic {@code executor_removed}. Executor
 * telemetry (requested sizes, removal classes, peaks) comes from the {@link ExecutorTracker} when it is on. Bus
 * thread only.
 */
final class ExecutorEvents {
    /** null: executor telemetry off (spark.sparktap.executorMetrics=false) */
    private final ExecutorTracker tracker;
    private final Redactor redactor;
    private final Map<Long, StageStats> runningStages;
    private final Consumer<Event> submit;
    private final Map<String, Integer> cores = new HashMap<>(); // registered executors -> their cores
    private final int taskCpus;
    private long registeredCores;

    ExecutorEvents(ExecutorTracker tracker, int taskCpus, Redactor redactor, Map<Long, StageStats> runningStages,
            Consumer<Event> submit) {
        this.tracker = tracker;
        this.taskCpus = Math.max(1, taskCpus);
        this.redactor = redactor;
        this.runningStages = runningStages;
        this.submit = submit;
    }

    /** Tasks the registered executors can run at once. */
    long slots() {
        return registeredCores / taskCpus;
    }

    /** The lifetimes closed at the application end: later executor events are not sent. */
    private boolean closed() {
        return tracker != null && tracker.ended();
    }

    void added(SparkListenerExecutorAdded e) {
        if (closed()) {
            return;
        }
        String id = e.executorId();
        String host = e.executorInfo().executorHost();
        int total = e.executorInfo().totalCores();
        Integer before = cores.put(id, total);
        registeredCores += total - (before == null ? 0 : before);
        for (StageStats running : runningStages.values()) {
            running.seeSlots(slots());
        }
        int profileId = tracker != null ? e.executorInfo().resourceProfileId() : -1;
        ExecutorTracker.Request req = tracker != null ? tracker.request(profileId) : null;
        if (tracker != null) {
            tracker.executorAdded(id);
        }
        submit.accept(Event.of(EventType.EXECUTOR_ADDED, e.time(), out -> {
            out.str("executor_id", id);
            out.str("host", host);
            out.count("total_cores", total);
            if (req != null) {
                out.optId("memory_mb", req.memoryMb);
                out.optId("memory_overhead_mb", req.overheadMb);
                out.optId("pyspark_memory_mb", req.pysparkMb);
                out.optId("resource_profile_id", profileId);
            }
        }));
    }

    void removed(SparkListenerExecutorRemoved e) {
        if (closed()) {
            return; // each executor still open at the end got its executor_removed then
        }
        String id = e.executorId();
        String reason = redactor.text(e.reason());
        Integer had = cores.remove(id);
        registeredCores -= had == null ? 0 : had;
        String removalClass = tracker != null ? tracker.removalClass(id, e.reason()) : null;
        if (tracker != null) {
            tracker.executorRemoved(id, e.time());
        }
        submit.accept(removedEvent(id, e.time(), reason, removalClass));
    }

    private static Event removedEvent(String id, long time, String reason, String removalClass) {
        return Event.of(EventType.EXECUTOR_REMOVED, time, out -> {
            out.str("executor_id", id);
            out.str("reason", reason);
            if (removalClass != null && !removalClass.equals("other")) {
                out.str("removal_class", removalClass);
            }
        });
    }

    /** At app end: the lifetimes still open close (their metrics, a synthetic executor_removed), then the driver's. */
    void closeLifetimes(long time, Logger log) {
        if (tracker == null) {
            return;
        }
        for (String id : tracker.openExecutors()) {
            tracker.executorRemoved(id, time);
            submit.accept(removedEvent(id, time, "still running when the application ended", "app_end"));
        }
        tracker.applicationEnd(time);
        if (tracker.heartbeatsSkipped > 0) {
            log.info("sparktap: {} executor heartbeats skipped over spark.sparktap.executorMetrics."
                    + "maxHeartbeatsPerSecond ({} read); raise it if the peaks look low", tracker.heartbeatsSkipped,
                    tracker.heartbeatsRead);
        }
    }
}
