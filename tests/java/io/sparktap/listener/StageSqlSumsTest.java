package io.sparktap.listener;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.ArrayList;
import java.util.List;

import org.apache.spark.executor.TaskMetrics;
import org.apache.spark.scheduler.AccumulableInfo;
import org.apache.spark.scheduler.StageInfo;
import org.apache.spark.scheduler.TaskInfo;
import org.apache.spark.scheduler.TaskLocality;
import org.apache.spark.scheduler.TaskLocation;
import org.apache.spark.storage.RDDInfo;
import org.junit.jupiter.api.Test;

import scala.Option;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;

/** A stage's SQL metric totals: its tasks' updates of Spark's and Photon's shuffle and spill metrics, by name. */
class StageSqlSumsTest {
    private long next = 500;

    private AccumulableInfo acc(String name, Object update) {
        long id = next++;
        return new AccumulableInfo(id, Option.apply(name), Option.apply(update), Option.apply(update), false, false,
                Option.apply("sql"));
    }

    @SuppressWarnings("unchecked")
    private static <T> Seq<T> seq(List<? extends T> items) {
        return (Seq<T>) CollectionConverters.asScala((List<T>) items).toList();
    }

    private static TaskInfo task(List<AccumulableInfo> updates) {
        TaskInfo info = new TaskInfo(1L, 0, 0, 0, 0L, "1", "host", TaskLocality.PROCESS_LOCAL(), false);
        info.setAccumulables(seq(updates));
        return info;
    }

    @Test
    void shuffleAndSpillOfBothEnginesAreSummedOverTheTasks() {
        long[] sums = StageSqlSums.none();
        List<AccumulableInfo> first = new ArrayList<>();
        first.add(acc("shuffle bytes written", 100L)); // a Spark exchange
        first.add(acc("num bytes written", 50L)); // a Photon shuffle sink
        first.add(acc("remote bytes read", 30L));
        first.add(acc("local bytes read", 20L));
        first.add(acc("number of output rows", 1_000L)); // not summed
        first.add(acc("spill size", "not a number")); // a value not recorded as a number: left out
        StageSqlSums.addTask(sums, task(first));
        List<AccumulableInfo> second = new ArrayList<>();
        second.add(acc("remote bytes read", "5")); // as an event log stores a SQL metric's update
        second.add(acc("num bytes spilled to disk due to memory pressure", 7L));
        StageSqlSums.addTask(sums, task(second));
        assertArrayEquals(new long[] {-1L, 150L, 55L, 35L, 7L}, sums);
    }

    @Test
    void tasksWithoutThoseMetricsLeaveNone() {
        long[] sums = StageSqlSums.none();
        List<AccumulableInfo> updates = new ArrayList<>();
        updates.add(acc("number of output rows", 10L));
        StageSqlSums.addTask(sums, task(updates));
        assertArrayEquals(StageSqlSums.none(), sums);
    }

    @Test
    void writtenFilesAreTheStagesAccumulablesWhetherNumberOrString() {
        StageInfo info = new StageInfo(3, 0, "stage", 4, seq(new ArrayList<RDDInfo>()), seq(new ArrayList<Object>()),
                "", TaskMetrics.empty(), seq(new ArrayList<Seq<TaskLocation>>()), Option.empty(), 0, false, 0);
        assertEquals(-1L, StageSqlSums.writtenFiles(info));
        AccumulableInfo live = acc("number of written files", 3L);
        AccumulableInfo logged = acc("number of written files", "2");
        info.accumulables().put(live.id(), live);
        info.accumulables().put(logged.id(), logged);
        assertEquals(5L, StageSqlSums.writtenFiles(info));
    }
}
