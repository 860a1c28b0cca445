package io.sparktap.listener;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.ArrayList;
import java.util.List;

import org.apache.spark.SparkConf;
import org.junit.jupiter.api.Test;

/** Executor telemetry's pure parts: removal classes, requested sizes from the conf. */
class ExecutorTrackerTest {
    private static ExecutorTracker tracker(SparkConf conf) {
        List<Event> out = new ArrayList<>();
        return new ExecutorTracker(conf, 200, out::add);
    }

    @Test
    void removalReasonsAreClassed() {
        ExecutorTracker t = tracker(new SparkConf(false));
        assertEquals("oom", t.removalClass("1", "Command exited with code 137"));
        assertEquals("oom", t.removalClass("1", "Command exited with code 52"));
        assertEquals("oom", t.removalClass("1", "Container killed by YARN for exceeding memory limits. 5.5 GB of "
                + "5.5 GB physical memory used"));
        assertEquals("oom", t.removalClass("1", "The executor with id 1 exited with exit code 137(SIGKILL, possible "
                + "container OOM).\n The API gave the following container statuses: reason: OOMKilled"));
        assertEquals("oom", t.removalClass("1", "java.lang.OutOfMemoryError: Java heap space"));
        assertEquals("killed", t.removalClass("1", "Executor killed by driver."));
        assertEquals("killed", t.removalClass("1", "Executor decommission."));
        assertEquals("lost", t.removalClass("1", "Remote RPC client disassociated. Likely due to containers "
                + "exceeding thresholds, or network issues."));
        assertEquals("lost", t.removalClass("1", "Executor heartbeat timed out after 120000 ms"));
        assertEquals("lost", t.removalClass("1", "Command exited with code 1"));
        assertEquals("other", t.removalClass("1", ""));
        // a task failed with an OutOfMemoryError on executor 2, which then went away: oom, unless the driver killed it
        t.taskEnd("2", 0L, null, "java.lang.OutOfMemoryError: Java heap space");
        assertEquals("oom", t.removalClass("2", "Remote RPC client disassociated."));
        assertEquals("killed", t.removalClass("2", "Executor killed by driver."));
    }

    @Test
    void requestedSizesComeFromTheConf() {
        assertEquals(1024, ExecutorTracker.mb("1g"));
        assertEquals(512, ExecutorTracker.mb("512"));
        assertEquals(512, ExecutorTracker.mb("512m"));
        assertEquals(2, ExecutorTracker.mb("2048k"));
        assertEquals(-1, ExecutorTracker.mb("lots"));
        ExecutorTracker.Request standalone = ExecutorTracker.fromConf(new SparkConf(false)
                .set("spark.master", "spark://h:7077").set("spark.executor.memory", "2g"));
        assertEquals(2048, standalone.memoryMb);
        assertEquals(-1, standalone.overheadMb); // the standalone cluster adds none
        assertEquals(-1, standalone.pysparkMb);
        ExecutorTracker.Request yarn = ExecutorTracker.fromConf(new SparkConf(false).set("spark.master", "yarn")
                .set("spark.executor.memory", "8g").set("spark.executor.pyspark.memory", "1g"));
        assertEquals(819, yarn.overheadMb); // max(384, 0.1 x 8192)
        assertEquals(1024, yarn.pysparkMb);
        ExecutorTracker.Request explicit = ExecutorTracker.fromConf(new SparkConf(false).set("spark.master", "yarn")
                .set("spark.executor.memoryOverhead", "1500"));
        assertEquals(1500, explicit.overheadMb);
        assertEquals(1024, explicit.memoryMb);
    }
}
