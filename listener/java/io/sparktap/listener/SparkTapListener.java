package io.sparktap.listener;

import org.apache.spark.SparkConf;
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
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * sparktap's SparkListener, the class Spark loads: install with
 * {@code --conf spark.extraListeners=io.sparktap.listener.SparkTapListener} and
 * {@code --conf spark.sparktap.kafka.bootstrap.servers=host:9092}.
 *
 * <p>A thin facade, compiled for Java 8 in every artifact and linking on every Spark line: before anything else
 * it checks that the running Spark, Scala and Java are the ones this jar was built for ({@link SparkLine}); if not,
 * it logs one line naming the versions and the jar to install instead, and stays off. Otherwise it hands each
 * callback to {@link ListenerCore}, catching everything but fatal VM errors, so nothing ever throws into Spark.
 */
public final class SparkTapListener extends SparkListener {
    private static final Logger LOG = LoggerFactory.getLogger("io.sparktap.listener.SparkTapListener");

    private final ListenerCore core;
    private final String startProblem;

    /**
     * One callback's work. It takes no {@link ListenerCore} parameter on purpose: building the lambda must not load
     * ListenerCore, a Java 17 class in the Spark 4 jar, on a JVM that cannot load it (the line check has already
     * turned the listener off there, and {@link #guarded} never runs the body).
     */
    private interface Callback {
        void run() throws Exception;
    }

    public SparkTapListener(SparkConf conf) {
        ListenerCore c = null;
        String problem = null;
        try {
            if (!"false".equalsIgnoreCase(conf.get("spark.sparktap.enabled", "true").trim())) {
                // spark.sparktap.lineCheck=false: for diagnosis only; a jar of the wrong line then sends what links
                // and turns itself off at the first callback that does not (see ListenerCore)
                boolean check = !"false".equalsIgnoreCase(conf.get("spark.sparktap.lineCheck", "true").trim());
                problem = check ? SparkLine.ofThisJar().problem() : null;
                if (problem != null) {
                    LOG.error("sparktap: listener is off for this application: {}; the job runs on", problem);
                } else {
                    c = new ListenerCore(conf, SparkLine.ofThisJar());
                }
            } else {
                problem = "spark.sparktap.enabled=false";
                LOG.info("sparktap: listener disabled (spark.sparktap.enabled=false)");
            }
        } catch (Throwable t) {
            rethrowIfFatal(t);
            c = null;
            problem = "it failed to start on " + SparkLine.runtime() + ": " + t;
            LOG.error("sparktap: listener is off for this application: {}; the job runs on", problem);
        }
        core = c;
        startProblem = problem;
    }

    /** {@link ReplayMain}: the same callbacks, driving a core that replays an event log instead of a live bus. */
    SparkTapListener(ListenerCore replayCore) {
        core = replayCore;
        startProblem = null;
    }

    private void guarded(String where, Callback work) {
        ListenerCore c = core;
        if (c == null || !c.active) {
            return;
        }
        try {
            work.run();
        } catch (Throwable t) {
            rethrowIfFatal(t);
            try {
                c.callbackFailed(where, t);
            } catch (Throwable inner) {
                rethrowIfFatal(inner); // never into Spark
            }
        }
    }

    static void rethrowIfFatal(Throwable t) {
        if (t instanceof VirtualMachineError) {
            throw (VirtualMachineError) t;
        }
    }

    /** Number of callback failures so far (each was logged once per kind and swallowed). */
    public long callbackErrors() {
        return core == null ? 0L : core.callbackErrors();
    }

    /** Whether the listener is sending events (false once off, and after the application ended). */
    public boolean isActive() {
        return core != null && core.active && !core.ended;
    }

    /** Why the listener turned itself off (the line it logged), or null. */
    public String offReason() {
        return core == null ? startProblem : core.offReason();
    }

    /** The counters listener_health would report now, as a JSON object (for diagnostics and tests). */
    public String statusJson() {
        return core == null ? "{}" : core.statusJson();
    }

    @Override
    public void onApplicationStart(SparkListenerApplicationStart e) {
        guarded("onApplicationStart", () -> core.applicationStart(e));
    }

    @Override
    public void onApplicationEnd(SparkListenerApplicationEnd e) {
        guarded("onApplicationEnd", () -> core.applicationEnd(e));
    }

    @Override
    public void onJobStart(SparkListenerJobStart e) {
        guarded("onJobStart", () -> core.jobStart(e));
    }

    @Override
    public void onJobEnd(SparkListenerJobEnd e) {
        guarded("onJobEnd", () -> core.jobEnd(e));
    }

    @Override
    public void onStageSubmitted(SparkListenerStageSubmitted e) {
        guarded("onStageSubmitted", () -> core.stageSubmitted(e));
    }

    @Override
    public void onTaskEnd(SparkListenerTaskEnd e) {
        guarded("onTaskEnd", () -> core.taskEnd(e));
    }

    @Override
    public void onStageCompleted(SparkListenerStageCompleted e) {
        guarded("onStageCompleted", () -> core.stageCompleted(e));
    }

    @Override
    public void onExecutorAdded(SparkListenerExecutorAdded e) {
        guarded("onExecutorAdded", () -> core.executorAdded(e));
    }

    @Override
    public void onExecutorRemoved(SparkListenerExecutorRemoved e) {
        guarded("onExecutorRemoved", () -> core.executorRemoved(e));
    }

    @Override
    public void onResourceProfileAdded(org.apache.spark.scheduler.SparkListenerResourceProfileAdded e) {
        guarded("onResourceProfileAdded", () -> core.resourceProfileAdded(e));
    }

    @Override
    public void onExecutorMetricsUpdate(org.apache.spark.scheduler.SparkListenerExecutorMetricsUpdate e) {
        guarded("onExecutorMetricsUpdate", () -> core.executorMetricsUpdate(e));
    }

    @Override
    public void onOtherEvent(SparkListenerEvent e) {
        guarded("onOtherEvent", () -> core.otherEvent(e));
    }
}
