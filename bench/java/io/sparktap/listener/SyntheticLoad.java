package io.sparktap.listener;

import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.TimeUnit;

import org.apache.spark.SparkConf;
import org.apache.spark.Success$;
import org.apache.spark.TaskState;
import org.apache.spark.executor.ExecutorMetrics;
import org.apache.spark.executor.TaskMetrics;
import org.apache.spark.scheduler.SparkListenerApplicationEnd;
import org.apache.spark.scheduler.SparkListenerApplicationStart;
import org.apache.spark.scheduler.SparkListenerStageCompleted;
import org.apache.spark.scheduler.SparkListenerStageSubmitted;
import org.apache.spark.scheduler.SparkListenerTaskEnd;
import org.apache.spark.scheduler.StageInfo;
import org.apache.spark.scheduler.TaskInfo;
import org.apache.spark.scheduler.TaskLocality;

import scala.Option;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Benchmark harness (bench/listener_throughput.py), not used by the listener itself.
 *
 * <pre>
 *   serialize N                      event construction + JSON serialisation on one thread
 *   pipeline N RATE key=value...     N task events through a real listener (RATE events/s, 0 = flat out):
 *                                    bus-thread cost, then onApplicationEnd (flush to Kafka) and the counters
 * </pre>
 * Prints one {@code key=value} line per figure.
 */
public final class SyntheticLoad {
    private static final int STAGE_TASKS = 10_000;

    private SyntheticLoad() {}

    public static void main(String[] args) throws Exception {
        if (args.length >= 2 && args[0].equals("serialize")) {
            serialize(Long.parseLong(args[1]));
        } else if (args.length >= 3 && args[0].equals("pipeline")) {
            SparkConf conf = new SparkConf(false);
            for (int i = 3; i < args.length; i++) {
                int eq = args[i].indexOf('=');
                conf.set(args[i].substring(0, eq), args[i].substring(eq + 1));
            }
            pipeline(conf, Long.parseLong(args[1]), Long.parseLong(args[2]));
        } else if (args.length >= 2 && args[0].equals("executors")) {
            executors(Integer.parseInt(args[1]));
        } else {
            System.err.println("usage: SyntheticLoad serialize N | pipeline N RATE key=value... | executors TASKS");
            System.exit(2);
        }
    }

    static SparkListenerTaskEnd taskEnd(int stageId, long taskId, long now) {
        TaskInfo info = new TaskInfo(taskId, (int) (taskId % STAGE_TASKS), 0, (int) (taskId % STAGE_TASKS),
                now - 20 - (taskId % 50), "exec-" + (taskId % 16), "host-" + (taskId % 8) + ".example.com",
                TaskLocality.NODE_LOCAL(), false);
        info.markFinished(TaskState.FINISHED(), now);
        TaskMetrics m = new TaskMetrics();
        m.setExecutorDeserializeTime(2);
        m.setExecutorRunTime(15 + taskId % 7);
        m.setExecutorCpuTime(12_000_000L + taskId);
        m.setResultSize(2_345);
        m.setJvmGCTime(taskId % 3);
        m.setPeakExecutionMemory(262_144);
        m.shuffleReadMetrics().incLocalBlocksFetched(12);
        m.shuffleReadMetrics().incRemoteBlocksFetched(4);
        m.shuffleReadMetrics().incLocalBytesRead(123_456 + taskId % 1000);
        m.shuffleReadMetrics().incRemoteBytesRead(45_678);
        m.shuffleReadMetrics().incFetchWaitTime(1);
        m.shuffleReadMetrics().incRecordsRead(10_000);
        m.shuffleWriteMetrics().incBytesWritten(98_765);
        m.shuffleWriteMetrics().incRecordsWritten(10_000);
        m.shuffleWriteMetrics().incWriteTime(1_234_567);
        return new SparkListenerTaskEnd(stageId, 0, "ShuffleMapTask", Success$.MODULE$, info,
                new ExecutorMetrics(), m);
    }

    static StageInfo stage(int stageId) {
        List<Object> none = new ArrayList<>();
        return new StageInfo(stageId, 0, "synthetic stage " + stageId, STAGE_TASKS,
                CollectionConverters.asScala(new ArrayList<org.apache.spark.storage.RDDInfo>()).toList(),
                CollectionConverters.asScala(none).toList(), "", new TaskMetrics(),
                CollectionConverters.asScala(new ArrayList<scala.collection.immutable.Seq<
                        org.apache.spark.scheduler.TaskLocation>>()).toList(),
                Option.empty(), 0, false, 0);
    }

    /** ExecutorMetrics with every metric set (heap, pools, GC …), varying a little per call. */
    static ExecutorMetrics metrics(long i) {
        int n = org.apache.spark.metrics.ExecutorMetricType$.MODULE$.numMetrics();
        long[] values = new long[n];
        for (int k = 0; k < n; k++) {
            values[k] = 100_000_000L + k * 1_000_000L + (i * 7919L % 50_000_000L);
        }
        return new ExecutorMetrics(values);
    }

    static org.apache.spark.scheduler.SparkListenerExecutorMetricsUpdate heartbeat(String exec, int stageId, long i) {
        scala.collection.immutable.Map<scala.Tuple2<Object, Object>, ExecutorMetrics> updates =
                scala.collection.immutable.Map$.MODULE$.<scala.Tuple2<Object, Object>, ExecutorMetrics>empty()
                        .updated(new scala.Tuple2<Object, Object>(stageId, 0), metrics(i));
        return new org.apache.spark.scheduler.SparkListenerExecutorMetricsUpdate(exec,
                CollectionConverters.asScala(new ArrayList<scala.Tuple4<Object, Object, Object,
                        scala.collection.immutable.Seq<org.apache.spark.scheduler.AccumulableInfo>>>()).toList(),
                updates);
    }

    /**
     * Executor telemetry's own cost: an application of one stage of {@code tasks} tasks on 2 executors, one
     * heartbeat per executor per 100 tasks, driven into two replay cores (no relay) with executor metrics on and off,
     * alternating, best of 5 rounds each; prints ns per task end (on, off), ns per heartbeat, and the JSON bytes of
     * the executor families per application.
     */
    static void executors(int tasks) throws Exception {
        long now = System.currentTimeMillis();
        SparkListenerTaskEnd[] ends = new SparkListenerTaskEnd[tasks];
        for (int i = 0; i < tasks; i++) {
            SparkListenerTaskEnd t = taskEnd(0, i, now);
            TaskInfo info = new TaskInfo(i, i, 0, i, now - 20, String.valueOf(1 + i % 2), "127.0.0.1",
                    TaskLocality.PROCESS_LOCAL(), false);
            info.markFinished(TaskState.FINISHED(), now);
            ends[i] = new SparkListenerTaskEnd(0, 0, t.taskType(), t.reason(), info, metrics(i), t.taskMetrics());
        }
        org.apache.spark.scheduler.SparkListenerExecutorMetricsUpdate[] beats =
                new org.apache.spark.scheduler.SparkListenerExecutorMetricsUpdate[tasks / 50 + 2];
        for (int i = 0; i < beats.length; i++) {
            beats[i] = heartbeat(String.valueOf(1 + i % 2), 0, i);
        }
        long[] best = {Long.MAX_VALUE, Long.MAX_VALUE, Long.MAX_VALUE};
        long bytes = 0;
        long count = 0;
        for (int round = 0; round < 12; round++) {
            boolean on = round % 2 == 0;
            SparkConf conf = new SparkConf(false).set("spark.app.id", "app-20240101000000-" + round)
                    .set("spark.app.name", "bench").set("spark.sparktap.kafka.bootstrap.servers", "127.0.0.1:1")
                    .set("spark.sparktap.executorMetrics.enabled", String.valueOf(on));
            ListenerCore core = new ListenerCore(conf, SparkLine.ofThisJar(), true);
            JsonOut out = new JsonOut(core.envelope());
            long[] written = {0, 0};
            java.util.function.Consumer<Event> sink = e -> {
                try {
                    out.event(e);
                    if (e.type == EventType.EXECUTOR_METRICS || e.type == EventType.EXECUTOR_ADDED
                            || e.type == EventType.EXECUTOR_REMOVED) {
                        written[0] += out.size();
                        written[1]++;
                    }
                } catch (java.io.IOException ex) {
                    throw new RuntimeException(ex);
                }
            };
            core.applicationStart(new SparkListenerApplicationStart("bench", Option.apply("app"), now, "bench",
                    Option.empty(), Option.empty(), Option.empty()));
            for (String id : new String[] {"1", "2"}) {
                core.executorAdded(new org.apache.spark.scheduler.SparkListenerExecutorAdded(now, id,
                        new org.apache.spark.scheduler.cluster.ExecutorInfo("127.0.0.1", 1,
                                scala.collection.immutable.Map$.MODULE$.<String, String>empty())));
            }
            core.stageSubmitted(new SparkListenerStageSubmitted(stage(0), new Properties()));
            long taskNs = 0;
            long beatNs = 0;
            int beat = 0;
            for (int i = 0; i < tasks; i++) {
                long t0 = System.nanoTime();
                core.taskEnd(ends[i]);
                taskNs += System.nanoTime() - t0;
                if (i % 100 == 0) {
                    for (int k = 0; k < 2; k++) {
                        long t1 = System.nanoTime();
                        core.executorMetricsUpdate(beats[beat++ % beats.length]);
                        beatNs += System.nanoTime() - t1;
                    }
                }
                if (i % 1000 == 999) {
                    core.drainReplayed(sink);
                }
            }
            core.stageCompleted(new SparkListenerStageCompleted(stage(0)));
            core.applicationEnd(new SparkListenerApplicationEnd(now + 60_000, Option.empty()));
            core.drainReplayed(sink);
            if (round >= 2) { // rounds 0-1 warm the JIT up
                int slot = on ? 0 : 1;
                best[slot] = Math.min(best[slot], taskNs);
                if (on) {
                    best[2] = Math.min(best[2], beatNs / Math.max(1, beat));
                    bytes = written[0];
                    count = written[1];
                }
            }
        }
        System.out.printf("task_end_ns_on=%.0f%n", (double) best[0] / tasks);
        System.out.printf("task_end_ns_off=%.0f%n", (double) best[1] / tasks);
        System.out.printf("heartbeat_ns=%d%n", best[2]);
        System.out.printf("executor_family_events=%d%n", count);
        System.out.printf("executor_family_bytes=%d%n", bytes);
    }

    static void serialize(long n) throws Exception {
        Redactor redactor = Redactor.withDefaults(ListenerConfig.Descriptions.REDACTED);
        JsonOut out = new JsonOut(new JsonOut.Envelope("bench", "app-20240101000000-0001", "", "synthetic"));
        long now = System.currentTimeMillis();
        SparkListenerTaskEnd[] samples = new SparkListenerTaskEnd[1024];
        for (int i = 0; i < samples.length; i++) {
            samples[i] = taskEnd(1, i, now);
        }
        long bytes = 0;
        for (int round = 0; round < 2; round++) { // round 0 warms the JIT up
            long start = System.nanoTime();
            bytes = 0;
            for (long i = 0; i < n; i++) {
                TaskEndEvent e = new TaskEndEvent(samples[(int) (i & 1023)], redactor);
                e.seq = i + 1;
                out.event(e);
                bytes += out.size();
            }
            double secs = (System.nanoTime() - start) / 1e9;
            if (round == 1) {
                System.out.printf("serialize_events_per_s=%.0f%n", n / secs);
                System.out.printf("task_end_bytes_avg=%.1f%n", (double) bytes / n);
            }
        }
    }

    static void pipeline(SparkConf conf, long n, long rate) throws Exception {
        long now = System.currentTimeMillis();
        conf.setIfMissing("spark.app.id", "synthetic-" + now);
        conf.setIfMissing("spark.app.name", "synthetic");
        SparkTapListener listener = new SparkTapListener(conf);
        listener.onApplicationStart(new SparkListenerApplicationStart("synthetic", Option.apply(conf.get(
                "spark.app.id")), now, "bench", Option.empty(), Option.empty(), Option.empty()));
        // wait for the relay so that start-up is not part of the measurement
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (!listener.statusJson().contains("\"relay_up\":true") && System.nanoTime() < deadline) {
            Thread.sleep(20);
        }
        SparkListenerTaskEnd[] samples = new SparkListenerTaskEnd[1024];
        for (int i = 0; i < samples.length; i++) {
            samples[i] = taskEnd(0, i, now);
        }
        long busNanos = 0;
        long start = System.nanoTime();
        int stageId = -1;
        for (long i = 0; i < n; i++) {
            if (i % STAGE_TASKS == 0) {
                if (stageId >= 0) {
                    listener.onStageCompleted(new SparkListenerStageCompleted(stage(stageId)));
                }
                stageId++;
                listener.onStageSubmitted(new SparkListenerStageSubmitted(stage(stageId), new Properties()));
            }
            SparkListenerTaskEnd sample = samples[(int) (i & 1023)];
            SparkListenerTaskEnd e = new SparkListenerTaskEnd(stageId, 0, sample.taskType(), sample.reason(),
                    sample.taskInfo(), sample.taskExecutorMetrics(), sample.taskMetrics());
            long t0 = System.nanoTime();
            listener.onTaskEnd(e);
            busNanos += System.nanoTime() - t0;
            if (rate > 0) {
                long due = start + (long) ((i + 1) * (1e9 / rate));
                long wait;
                while ((wait = due - System.nanoTime()) > 0) {
                    if (wait > 200_000) {
                        Thread.sleep(0, 100_000);
                    } else {
                        Thread.onSpinWait();
                    }
                }
            }
        }
        listener.onStageCompleted(new SparkListenerStageCompleted(stage(stageId)));
        long offered = System.nanoTime();
        String before = listener.statusJson();
        listener.onApplicationEnd(new SparkListenerApplicationEnd(System.currentTimeMillis(), Option.empty()));
        long end = System.nanoTime();
        System.out.printf("events=%d%n", n);
        System.out.printf("offer_seconds=%.3f%n", (offered - start) / 1e9);
        System.out.printf("bus_ns_per_event=%.0f%n", (double) busNanos / n);
        System.out.printf("bus_events_per_s=%.0f%n", n / (busNanos / 1e9));
        System.out.printf("end_to_end_seconds=%.3f%n", (end - start) / 1e9);
        System.out.printf("end_to_end_events_per_s=%.0f%n", n / ((end - start) / 1e9));
        System.out.printf("status_before_end=%s%n", before);
        System.out.printf("status_after_end=%s%n", listener.statusJson());
    }
}
