package io.sparktap.listener;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.spark.Partition;
import org.apache.spark.rdd.RDD;
import org.apache.spark.sql.execution.QueryExecution;
import org.apache.spark.sql.execution.SparkPlan;
import org.apache.spark.sql.execution.adaptive.AdaptiveSparkPlanExec;
import org.apache.spark.sql.execution.adaptive.QueryStageExec;
import org.apache.spark.sql.execution.datasources.FilePartition;
import org.apache.spark.sql.execution.datasources.PartitionedFile;
import org.apache.spark.sql.execution.exchange.ReusedExchangeExec;
import org.apache.spark.sql.execution.metric.SQLMetric;

import scala.Option;

/**
 * The files a DSv2 file scan read. {@code BatchScanExec} over a file source (Parquet, ORC, CSV, JSON, text… read
 * through DSv2, e.g. with {@code spark.sql.sources.useV1SourceList} emptied) has no {@code size of files read} or
 * {@code number of files read} metric on any Spark line (3.3 to 4.x: only {@code number of output rows}). What it
 * read is in its input RDD's partitions: each a {@code FilePartition} of {@code PartitionedFile} splits whose lengths
 * add up to the files' bytes (the same figure the V1 scan's {@code size of files read} gives).
 *
 * <p>Read on the listener bus thread from the execution's {@link QueryExecution} while it runs (Spark keeps it in
 * {@code SQLExecution} until the execution ends): the scan node is the one whose {@code numOutputRows} accumulator the
 * finished stage's tasks updated, so its input RDD and partitions were built already (this only reads them). The
 * partition classes differ by line ({@code inputPartitions: Seq} on 3.x, {@code inputPartition: Option} on 4.x) and
 * {@code PartitionedFile.filePath} is a String on 3.3 and a SparkPath after: all read by name, each access guarded by
 * the caller. Sources whose partitions are not {@code FilePartition}s (Kafka, JDBC, table formats with their own
 * partitions) give nothing.
 */
final class V2ScanFiles {
    private static final int MAX_NODES = 20_000;

    private V2ScanFiles() {
    }

    /** Whether a {@code SparkPlanInfo} node name is a DSv2 batch scan ("BatchScan" on 3.x, "BatchScan <table>" on 4). */
    static boolean isBatchScan(String nodeName) {
        return nodeName.equals("BatchScan") || nodeName.startsWith("BatchScan ");
    }

    /**
     * For each DSv2 scan of the executed plan whose {@code numOutputRows} accumulator id is in {@code wanted}: that id
     * -> {bytes, files} of the files its partitions read. Scans that are not file scans are left out.
     */
    static Map<Long, long[]> read(QueryExecution qe, Set<Long> wanted) throws ReflectiveOperationException {
        Map<Long, long[]> out = new HashMap<>();
        SparkPlan root = qe == null ? null : qe.executedPlan();
        if (root == null || wanted.isEmpty()) {
            return out;
        }
        ArrayDeque<SparkPlan> stack = new ArrayDeque<>();
        stack.push(root);
        int seen = 0;
        while (!stack.isEmpty() && seen++ < MAX_NODES && out.size() < wanted.size()) {
            SparkPlan plan = stack.pop();
            if (plan instanceof AdaptiveSparkPlanExec) {
                stack.push(((AdaptiveSparkPlanExec) plan).executedPlan());
                continue;
            }
            if (plan instanceof QueryStageExec) {
                stack.push(((QueryStageExec) plan).plan());
                continue;
            }
            if (plan instanceof ReusedExchangeExec) {
                stack.push(((ReusedExchangeExec) plan).child());
                continue;
            }
            if (plan.getClass().getSimpleName().equals("BatchScanExec")) {
                Option<SQLMetric> rows = plan.metrics().get(PlanStats.NUM_OUTPUT_ROWS);
                if (rows.isDefined() && wanted.contains(rows.get().id())) {
                    long[] files = files(plan);
                    if (files != null) {
                        out.put(rows.get().id(), files);
                    }
                }
                continue;
            }
            for (SparkPlan child : Scala.list(plan.children())) {
                stack.push(child);
            }
            for (SparkPlan sub : Scala.list(plan.subqueries())) {
                stack.push(sub);
            }
        }
        return out;
    }

    /** {bytes, distinct files} of a BatchScanExec's file partitions, or null when it has none (not a file scan). */
    static long[] files(SparkPlan batchScan) throws ReflectiveOperationException {
        Object rdd = Scala.optionalAccessor(batchScan, "inputRDD");
        if (!(rdd instanceof RDD)) {
            return null;
        }
        List<FilePartition> partitions = new ArrayList<>();
        for (Partition p : ((RDD<?>) rdd).partitions()) {
            Object inputs = Scala.optionalAccessor(p, "inputPartitions"); // Spark 3.x: Seq[InputPartition]
            if (inputs == null) {
                inputs = Scala.optionalAccessor(p, "inputPartition"); // Spark 4: Option[InputPartition]
            }
            collect(inputs, partitions);
        }
        if (partitions.isEmpty()) {
            return null;
        }
        long bytes = 0L;
        Set<String> paths = new HashSet<>();
        for (FilePartition fp : partitions) {
            for (PartitionedFile f : fp.files()) {
                bytes += Math.max(0L, f.length()); // a split's bytes: the splits of a file add up to its size
                paths.add(String.valueOf(Scala.optionalAccessor(f, "filePath"))); // String on 3.3, SparkPath after
            }
        }
        return new long[] {bytes, paths.size()};
    }

    private static void collect(Object value, List<FilePartition> out) {
        if (value instanceof FilePartition) {
            out.add((FilePartition) value);
        } else if (value instanceof Option) {
            Option<?> option = (Option<?>) value;
            if (option.isDefined()) {
                collect(option.get(), out);
            }
        } else if (value instanceof scala.collection.Iterable) {
            for (Object item : Scala.list((scala.collection.Iterable<?>) value)) {
                collect(item, out);
            }
        }
    }
}
