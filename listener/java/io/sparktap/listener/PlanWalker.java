package io.sparktap.listener;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import org.apache.spark.sql.execution.SparkPlanInfo;
import org.apache.spark.sql.execution.metric.SQLMetricInfo;


/**
 * Reads a {@link SparkPlanInfo} tree: the join operators (normalised names, pre-order) and every AQE shuffle
 * read node ({@code AQEShuffleRead}, whose simple string says {@code coalesced}, {@code skewed},
 * {@code coalesced and skewed} or {@code local}) with the accumulator ids of its metrics, and every file scan (a node
 * with a {@code size of files read} metric: FileSourceScanExec) with the accumulator ids of its file metrics (set on
 * the driver) and of its other metrics (updated by the tasks of the stage that runs it), and every DSv2 batch scan
 * with the accumulator id of its only metric, {@code number of output rows} (its files: {@link V2ScanFiles}).
 */
final class PlanWalker {
    static final int PARTITIONS = 0;
    static final int DATA_SIZE = 1;
    static final int SKEWED_PARTITIONS = 2;
    static final int SKEWED_SPLITS = 3;
    static final int COALESCED_PARTITIONS = 4;
    /** SQL metric display names of AQEShuffleReadExec (Spark 3.2+), by kind. */
    static final Map<String, Integer> METRIC_KINDS;

    static {
        Map<String, Integer> kinds = new HashMap<>();
        kinds.put("number of partitions", PARTITIONS);
        kinds.put("partition data size", DATA_SIZE);
        kinds.put("number of skewed partitions", SKEWED_PARTITIONS);
        kinds.put("number of skewed partition splits", SKEWED_SPLITS);
        kinds.put("number of coalesced partitions", COALESCED_PARTITIONS);
        METRIC_KINDS = Collections.unmodifiableMap(kinds);
    }
    private static final int MAX_NODES = 20_000;

    static final class ShuffleRead {
        final int nodeId;
        final boolean coalesced;
        final boolean skewed;
        final boolean local;
        final String description;
        final Map<String, Long> metricAccumulators;

        ShuffleRead(int nodeId, String description, Map<String, Long> metricAccumulators) {
            this.nodeId = nodeId;
            this.description = description;
            String flags = description.startsWith("AQEShuffleRead") ? description.substring(14) : description;
            this.local = flags.contains("local");
            this.coalesced = flags.contains("coalesced");
            this.skewed = flags.contains("skewed");
            this.metricAccumulators = metricAccumulators;
        }
    }

    static final class MetricRef {
        final long executionId;
        final ShuffleRead read;
        final int kind;

        MetricRef(long executionId, ShuffleRead read, int kind) {
            this.executionId = executionId;
            this.read = read;
            this.kind = kind;
        }
    }

    /** SQL metric display names of a file scan's own figures, set on the driver when it lists its files. */
    static final String FILES_SIZE = "size of files read";
    static final String FILES_NUM = "number of files read";

    /**
     * A file scan node of one execution: what its files weigh, once the driver has posted it (-1 until then). A DSv2
     * batch scan ({@code v2}) has no file metrics: its files are read from the running plan ({@link V2ScanFiles}) the
     * first time a finished stage ran it ({@code looked}), found by its {@code number of output rows} accumulator.
     */
    static final class Scan {
        final long executionId;
        final int nodeId;
        final boolean v2;
        long rowsAccumulatorId = -1L;
        boolean looked;
        long filesBytes = -1L;
        long files = -1L;

        Scan(long executionId, int nodeId, boolean v2) {
            this.executionId = executionId;
            this.nodeId = nodeId;
            this.v2 = v2;
        }
    }

    static final String OUTPUT_ROWS = "number of output rows";

    static final class Result {
        final List<String> joins = new ArrayList<>();
        final List<ShuffleRead> reads = new ArrayList<>();
        final Map<Long, MetricRef> metrics = new HashMap<>();
        /** accumulator id of a scan's {@code size of files read} or {@code number of files read} -> the scan */
        final Map<Long, Scan> scanFileMetrics = new HashMap<>();
        /** accumulator id of any other metric of a scan (its rows, scan time…) -> the scan */
        final Map<Long, Scan> scanTaskMetrics = new HashMap<>();
        /** accumulator ids of the size metrics (the rest of scanFileMetrics count files) */
        final java.util.Set<Long> scanSizeIds = new java.util.HashSet<>();
        /** whether the plan has a DSv2 batch scan (whose files only the running plan knows) */
        boolean v2Scans;
        boolean finalPlan;
    }

    private PlanWalker() {}

    static Result walk(SparkPlanInfo root, long executionId) {
        Result result = new Result();
        if (root == null) {
            return result;
        }
        boolean sawAdaptive = false;
        ArrayDeque<SparkPlanInfo> stack = new ArrayDeque<>();
        stack.push(root);
        int nodeId = 0;
        while (!stack.isEmpty() && nodeId < MAX_NODES) {
            SparkPlanInfo node = stack.pop();
            String name = node.nodeName() == null ? "" : node.nodeName();
            if (name.equals("AdaptiveSparkPlan") && !sawAdaptive) {
                sawAdaptive = true;
                String s = node.simpleString();
                result.finalPlan = s != null && s.contains("isFinalPlan=true");
            }
            String join = joinStrategy(name);
            if (join != null) {
                result.joins.add(join);
            }
            if (name.equals("AQEShuffleRead") || name.equals("CustomShuffleReader")) {
                Map<String, Long> accs = new TreeMap<>();
                for (SQLMetricInfo m : Scala.list(node.metrics())) {
                    accs.put(m.name(), m.accumulatorId());
                }
                String description = node.simpleString() == null ? name : node.simpleString();
                ShuffleRead read = new ShuffleRead(nodeId, description, Collections.unmodifiableMap(accs));
                result.reads.add(read);
                for (Map.Entry<String, Long> m : accs.entrySet()) {
                    Integer kind = METRIC_KINDS.get(m.getKey());
                    if (kind != null) {
                        result.metrics.put(m.getValue(), new MetricRef(executionId, read, kind));
                    }
                }
            }
            scan(node, name, nodeId, executionId, result);
            nodeId++;
            List<SparkPlanInfo> children = Scala.list(node.children());
            for (int i = children.size() - 1; i >= 0; i--) {
                stack.push(children.get(i)); // pre-order: first child on top
            }
        }
        return result;
    }

    private static void scan(SparkPlanInfo node, String name, int nodeId, long executionId, Result result) {
        List<SQLMetricInfo> metrics = Scala.list(node.metrics());
        boolean isScan = false;
        for (SQLMetricInfo m : metrics) {
            isScan |= FILES_SIZE.equals(m.name());
        }
        if (!isScan && V2ScanFiles.isBatchScan(name)) {
            Scan scan = new Scan(executionId, nodeId, true);
            for (SQLMetricInfo m : metrics) {
                if (OUTPUT_ROWS.equals(m.name())) {
                    scan.rowsAccumulatorId = m.accumulatorId();
                    result.scanTaskMetrics.put(m.accumulatorId(), scan);
                    result.v2Scans = true;
                }
            }
            return;
        }
        if (!isScan) {
            return;
        }
        Scan scan = new Scan(executionId, nodeId, false);
        for (SQLMetricInfo m : metrics) {
            if (FILES_SIZE.equals(m.name()) || FILES_NUM.equals(m.name())) {
                result.scanFileMetrics.put(m.accumulatorId(), scan);
                if (FILES_SIZE.equals(m.name())) {
                    result.scanSizeIds.add(m.accumulatorId());
                }
            } else {
                result.scanTaskMetrics.put(m.accumulatorId(), scan);
            }
        }
    }

    /** SortMergeJoin, BroadcastHashJoin, ShuffledHashJoin, BroadcastNestedLoopJoin, CartesianProduct…; else null. */
    static String joinStrategy(String nodeName) {
        int paren = nodeName.indexOf('(');
        String base = (paren > 0 ? nodeName.substring(0, paren) : nodeName).trim();
        if (base.endsWith("Join") || base.equals("CartesianProduct")) {
            return base;
        }
        return null;
    }
}
