package io.sparktap.listener;

import java.util.HashMap;
import java.util.Map;

import org.apache.spark.scheduler.AccumulableInfo;
import org.apache.spark.scheduler.StageInfo;
import org.apache.spark.scheduler.TaskInfo;

import scala.Option;

/**
 * A stage's SQL metric totals that Spark's task metrics may lack: the shuffle and spill of its operators' own metrics
 * ({@link PlanStats#SHUFFLE_WRITTEN}, {@link PlanStats#SHUFFLE_READ}, {@link PlanStats#SPILLED}), and the files its
 * writes committed ("number of written files"). Spark's own exchanges report the same shuffle in both; an engine that
 * keeps its shuffle or spill out of the task metrics reports it here only, and the stage rules read it from here then
 * (detection/stage_rows.py).
 *
 * <p>Shuffle and spill are the sums of the stage's task updates, by metric name: a stage completion's accumulables
 * hold each accumulator's total so far, which repeats an exchange's bytes in every stage that reads it (Photon's q88:
 * 874,204 bytes read summed over its stage completions, 402,796 over its tasks' updates, as its task metrics say).
 * A failed task's updates of a SQL metric are not reported, as Spark's SQL tab does not count them.
 */
final class StageSqlSums {
    static final int WRITTEN_FILES = 0;
    static final int SHUFFLE_WRITTEN = 1;
    static final int SHUFFLE_READ = 2;
    static final int SHUFFLE_READ_REMOTE = 3;
    static final int SPILLED = 4;
    static final int SUMS = 5;
    private static final Map<String, int[]> SUMMED = new HashMap<>();

    static {
        for (String name : PlanStats.SHUFFLE_WRITTEN) {
            SUMMED.put(name, new int[] {SHUFFLE_WRITTEN});
        }
        SUMMED.put("local bytes read", new int[] {SHUFFLE_READ});
        SUMMED.put("remote bytes read", new int[] {SHUFFLE_READ, SHUFFLE_READ_REMOTE});
        for (String name : PlanStats.SPILLED) {
            SUMMED.put(name, new int[] {SPILLED});
        }
    }

    private StageSqlSums() {
    }

    /** Totals none of which is known yet. */
    static long[] none() {
        long[] sums = new long[SUMS];
        java.util.Arrays.fill(sums, -1L);
        return sums;
    }

    /** Whether a task's update of an accumulator of this name is summed (the replay keeps only those). */
    static boolean summed(String name) {
        return SUMMED.containsKey(name);
    }

    /** Adds a finished task's updates of the summed SQL metrics to {@code sums}. */
    static void addTask(long[] sums, TaskInfo task) {
        for (AccumulableInfo acc : Scala.list(task.accumulables())) {
            Option<String> name = acc.name();
            int[] into = name.isDefined() ? SUMMED.get(name.get()) : null;
            // live a number; an event log stores a SQL metric's update as a string
            long update = into != null && acc.update().isDefined() ? ReplayPlanStats.number(acc.update().get())
                    : Long.MIN_VALUE;
            if (update == Long.MIN_VALUE) {
                continue;
            }
            for (int i : into) {
                sums[i] = Math.max(0L, sums[i]) + Math.max(0L, update);
            }
        }
    }

    /** A finished stage's totals: its tasks' sums, and the files its writes wrote (a failure loses those only). */
    static long[] of(StageInfo info, long[] taskSums, java.util.function.BiConsumer<String, Throwable> failed) {
        long[] sums = taskSums.clone();
        try {
            sums[WRITTEN_FILES] = writtenFiles(info);
        } catch (RuntimeException | LinkageError e) {
            failed.accept("stage_completed output_files", e); // the stage goes without it
        }
        return sums;
    }

    /** The sum of the stage's accumulables named "number of written files", or -1 when Spark reports none. */
    static long writtenFiles(StageInfo info) {
        long files = -1L;
        for (AccumulableInfo acc : Scala.list(info.accumulables().values())) {
            Option<String> name = acc.name();
            if (name.isDefined() && name.get().equals("number of written files") && acc.value().isDefined()) {
                long v = ReplayPlanStats.number(acc.value().get());
                if (v != Long.MIN_VALUE) {
                    files = Math.max(0L, files) + Math.max(0L, v);
                }
            }
        }
        return files;
    }
}
