package io.sparktap.listener;

import java.util.Arrays;
import java.util.SplittableRandom;

/**
 * Per stage attempt: the task metrics needed for the stage_completed aggregates, kept in growable primitive
 * arrays (one long per metric per task). Filled on the bus thread; handed to the writer thread (which sorts for
 * the quantiles) when the stage completes, after which the bus thread never touches it again.
 *
 * <p>Min, max and sum are always exact. Quantiles are exact (nearest rank) up to {@code maxSamples} tasks; beyond
 * that the arrays hold a uniform reservoir sample of the tasks, so memory stays bounded for huge stages.
 */
final class StageStats {
    static final int DURATION = 0;
    static final int RUN_TIME = 1;
    static final int GC_TIME = 2;
    static final int INPUT = 3;
    static final int SHUFFLE_READ = 4;
    static final int SHUFFLE_LOCAL = 5;
    static final int SHUFFLE_REMOTE = 6;
    static final int SHUFFLE_WRITE = 7;
    static final int MEMORY_SPILL = 8;
    static final int DISK_SPILL = 9;
    static final int SHUFFLE_RECORDS = 10;
    static final int INPUT_RECORDS = 11;
    static final int METRICS = 12;
    static final String[] NAMES = {
        "task_duration_ms", "run_time_ms", "gc_time_ms", "input_bytes", "shuffle_read_bytes",
        "shuffle_read_local_bytes", "shuffle_read_remote_bytes", "shuffle_write_bytes", "memory_spill_bytes",
        "disk_spill_bytes", "shuffle_read_records", "input_records_per_task",
    };

    final int maxSamples;
    final long[][] values = new long[METRICS][];
    final long[] min = new long[METRICS];
    final long[] max = new long[METRICS];
    final long[] sum = new long[METRICS];
    /** Tasks that reported metrics. */
    long measured;
    /** Slots used in the value arrays (≤ maxSamples). */
    int samples;
    private SplittableRandom random;
    private final long[] row = new long[METRICS];

    long succeeded;
    long failed;
    long killed;
    /** Of the failed: Spark's Resubmitted markers (a task that had succeeded, re-queued after its executor was lost). */
    long resubmitted;
    /** Of the failed: denied commits (a speculative copy whose twin committed first): no failure of the task. */
    long commitDenied;
    final long[] locality = new long[5];
    long localBlocks;
    long remoteBlocks;
    long fetchWait;
    long remoteBytesToDisk;
    long recordsRead;
    long recordsWritten;
    long inputRecords;
    long outputBytes;
    long outputRecords;
    long cpuTimeNs;
    long peakExecutionMemoryMax;
    /** The most task slots (executor cores / spark.task.cpus) registered while the stage ran. */
    long slots;
    /** Its tasks' updates of the SQL metrics {@link StageSqlSums} sums, by its indexes; -1 where none. */
    final long[] sqlSums = StageSqlSums.none();

    StageStats(int maxSamples) {
        this.maxSamples = maxSamples;
        for (int i = 0; i < METRICS; i++) {
            values[i] = new long[16];
            min[i] = Long.MAX_VALUE;
        }
    }

    void add(TaskEndEvent t) {
        switch (t.status) {
            case TaskEndEvent.SUCCESS:
                succeeded++;
                break;
            case TaskEndEvent.KILLED:
                killed++;
                break;
            default:
                failed++;
                if ("Resubmitted".equals(t.failureClass)) {
                    resubmitted++;
                } else if ("TaskCommitDenied".equals(t.failureClass)) {
                    commitDenied++;
                }
        }
        locality[TaskEndEvent.LOCALITY_TO_HISTOGRAM[t.locality]]++;
        if (!t.hasMetrics) {
            return;
        }
        row[DURATION] = t.duration;
        row[RUN_TIME] = t.runTime;
        row[GC_TIME] = t.gcTime;
        row[INPUT] = t.inputBytes;
        row[SHUFFLE_READ] = t.localBytes + t.remoteBytes;
        row[SHUFFLE_LOCAL] = t.localBytes;
        row[SHUFFLE_REMOTE] = t.remoteBytes;
        row[SHUFFLE_WRITE] = t.writeBytes;
        row[MEMORY_SPILL] = t.memorySpill;
        row[DISK_SPILL] = t.diskSpill;
        row[SHUFFLE_RECORDS] = t.recordsRead;
        row[INPUT_RECORDS] = t.inputRecords;
        measure(row);
        localBlocks += t.localBlocks;
        remoteBlocks += t.remoteBlocks;
        fetchWait += t.fetchWait;
        remoteBytesToDisk += t.remoteBytesToDisk;
        recordsRead += t.recordsRead;
        recordsWritten += t.writeRecords;
        inputRecords += t.inputRecords;
        outputBytes += t.outputBytes;
        outputRecords += t.outputRecords;
        cpuTimeNs += t.cpuTimeNs;
        peakExecutionMemoryMax = Math.max(peakExecutionMemoryMax, t.peakExecutionMemory);
    }

    /** One measured task's {@link #METRICS} values (negative ones count as 0): min, max, sum, the sample. */
    void measure(long[] metrics) {
        measured++;
        int slot;
        if (samples < maxSamples) {
            slot = samples++;
            if (slot == values[0].length) {
                int grown = (int) Math.min((long) maxSamples, (long) slot * 2);
                for (int i = 0; i < METRICS; i++) {
                    values[i] = Arrays.copyOf(values[i], grown);
                }
            }
        } else {
            if (random == null) {
                random = new SplittableRandom(0x5EED);
            }
            long j = random.nextLong(measured);
            slot = j < maxSamples ? (int) j : -1;
        }
        for (int i = 0; i < METRICS; i++) {
            long v = Math.max(0L, metrics[i]);
            if (slot >= 0) {
                values[i][slot] = v;
            }
            if (v < min[i]) {
                min[i] = v;
            }
            if (v > max[i]) {
                max[i] = v;
            }
            sum[i] += v;
        }
    }

    /** Executors came or went while the stage ran: keep the most slots it could use (bus thread). */
    void seeSlots(long now) {
        slots = Math.max(slots, now);
    }

    /** One metric's quantiles; sorts that metric's array in place (writer thread). */
    Quantiles quantiles(int metric) {
        if (measured == 0) {
            return Quantiles.NONE;
        }
        long[] v = values[metric];
        Arrays.sort(v, 0, samples);
        return new Quantiles(min[metric], nearestRank(v, samples, 0.50), nearestRank(v, samples, 0.75),
                nearestRank(v, samples, 0.95), max[metric], sum[metric]);
    }

    /** One metric over a stage's tasks: exact min, max and sum; nearest-rank p50, p75, p95 (of the sample). */
    static final class Quantiles {
        static final Quantiles NONE = new Quantiles(0, 0, 0, 0, 0, 0);

        final long min;
        final long p50;
        final long p75;
        final long p95;
        final long max;
        final long sum;

        Quantiles(long min, long p50, long p75, long p95, long max, long sum) {
            this.min = min;
            this.p50 = p50;
            this.p75 = p75;
            this.p95 = p95;
            this.max = max;
            this.sum = sum;
        }

        @Override
        public boolean equals(Object o) {
            if (!(o instanceof Quantiles)) {
                return false;
            }
            Quantiles q = (Quantiles) o;
            return min == q.min && p50 == q.p50 && p75 == q.p75 && p95 == q.p95 && max == q.max && sum == q.sum;
        }

        @Override
        public int hashCode() {
            long h = min;
            for (long v : new long[] {p50, p75, p95, max, sum}) {
                h = 31 * h + v;
            }
            return Long.hashCode(h);
        }

        @Override
        public String toString() {
            return "{min=" + min + ", p50=" + p50 + ", p75=" + p75 + ", p95=" + p95 + ", max=" + max + ", sum=" + sum
                    + "}";
        }
    }

    /** Nearest-rank quantile of the first n sorted values: the value at rank ceil(p * n). */
    static long nearestRank(long[] sorted, int n, double p) {
        if (n == 0) {
            return 0;
        }
        int rank = (int) Math.ceil(p * n);
        return sorted[Math.min(n, Math.max(1, rank)) - 1];
    }
}
