package io.sparktap.listener;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.apache.spark.scheduler.AccumulableInfo;
import org.apache.spark.scheduler.StageInfo;
import org.apache.spark.sql.execution.SparkPlanInfo;
import org.apache.spark.sql.execution.metric.SQLMetricInfo;

import scala.Tuple2;

/**
 * {@code sql_plan_stats} of a replayed SQL execution (an event log: no QueryExecution runs here), from the plans the
 * log recorded (its {@code SparkListenerSQLExecutionStart}, then each {@code SparkListenerSQLAdaptiveExecutionUpdate}:
 * the last is the executed plan) and the values of their SQL metrics, as Spark's SQL tab reads them:
 *
 * <ul>
 * <li>a stage completion's accumulables: a metric's total on the driver when the stage ended (the last wins: a
 * metric's accumulator sums every stage that ran its node);
 * <li>for a metric no stage reported, the driver's own value ({@code SparkListenerDriverAccumUpdates}).
 * </ul>
 *
 * <p>Node ids are positions in a pre-order walk of the recorded plan (the log has no {@code SparkPlan.id}); like the
 * live walk ({@link PlanStats}), adaptive plans, query stages and reused exchanges give their place to their child,
 * and a cached relation's scan stops there (the log records the cached plan below it, run by an earlier execution,
 * whose metrics add up every execution that ran it).
 * The log has no optimizer statistics and no generated code: no estimates, no codegen fallback reasons; the codegen
 * stage of a node comes from its {@code WholeStageCodegen (N)} parent. Memory: the metric ids of at most
 * {@value #MAX_EXECUTIONS} running executions and {@value #MAX_METRICS} values.
 */
final class ReplayPlanStats {
    static final int MAX_EXECUTIONS = 1000;
    static final int MAX_METRICS = 200_000;
    private static final String CODEGEN = "WholeStageCodegen (";
    /** The display names of a node's {@code numOutputRows}: Spark's and Photon's, RAPIDS'. */
    static final List<String> OUTPUT_ROWS = java.util.Arrays.asList("number of output rows", "output rows");

    private static final class Execution {
        SparkPlanInfo plan;
        final List<Long> metricIds = new ArrayList<>();
    }

    private final Map<Long, Execution> executions = new LinkedHashMap<>();
    /** metric accumulator id of a running execution's plans -> the execution */
    private final Map<Long, Long> owners = new HashMap<>();
    private final Map<Long, Long> stageValues = new HashMap<>();
    private final Map<Long, Long> driverValues = new HashMap<>();

    /** The execution's latest plan; its metrics' values are kept from now on. */
    void plan(long id, SparkPlanInfo root) {
        Execution ex = executions.get(id);
        if (ex == null) {
            ex = new Execution();
            executions.put(id, ex);
            if (executions.size() > MAX_EXECUTIONS) {
                Iterator<Execution> it = executions.values().iterator();
                forget(it.next());
                it.remove();
            }
        }
        ex.plan = root;
        ArrayDeque<SparkPlanInfo> stack = new ArrayDeque<>();
        stack.push(root);
        while (!stack.isEmpty() && owners.size() < MAX_METRICS) {
            SparkPlanInfo node = stack.pop();
            for (SQLMetricInfo m : Scala.list(node.metrics())) {
                if (owners.putIfAbsent(m.accumulatorId(), id) == null) {
                    ex.metricIds.add(m.accumulatorId());
                }
            }
            for (SparkPlanInfo child : Scala.list(node.children())) {
                stack.push(child);
            }
        }
    }

    /**
     * A stage completion: the values of the running executions' metrics it reports. A stage of a running execution
     * (its jobs' {@code spark.sql.execution.id}) keeps all its SQL metrics: a subquery's plan (a dynamic pruning
     * filter's aggregate) may reach the log only in a plan update after its stages ran.
     */
    void stage(StageInfo info, long executionId) {
        Execution running = executions.get(executionId);
        if (owners.isEmpty() && running == null) {
            return;
        }
        for (AccumulableInfo acc : Scala.list(info.accumulables().values())) {
            long id = acc.id();
            if (!acc.value().isDefined() || !(owners.containsKey(id) || running != null && sqlMetric(acc))) {
                continue;
            }
            long value = number(acc.value().get());
            if (value == Long.MIN_VALUE || stageValues.size() >= MAX_METRICS) {
                continue;
            }
            if (!owners.containsKey(id)) {
                owners.put(id, executionId);
                running.metricIds.add(id);
            }
            stageValues.put(id, value);
        }
    }

    /** Not one of the task metrics' own accumulators (Spark's {@code internal.metrics.} names). */
    private static boolean sqlMetric(AccumulableInfo acc) {
        return acc.name().isDefined() && !acc.name().get().startsWith("internal.metrics.");
    }

    /** The driver's updates of the execution's metrics (those no stage runs: a scan's file listing, a broadcast). */
    void driver(long id, scala.collection.Iterable<Tuple2<Object, Object>> updates) {
        Execution running = executions.get(id);
        if (running == null) {
            return;
        }
        for (Tuple2<Object, Object> kv : Scala.list(updates)) {
            if (kv._1() instanceof Number && kv._2() instanceof Number && driverValues.size() < MAX_METRICS) {
                long acc = ((Number) kv._1()).longValue();
                Long owner = owners.putIfAbsent(acc, id);
                if (owner == null) {
                    running.metricIds.add(acc);
                } else if (owner != id) {
                    continue;
                }
                driverValues.put(acc, ((Number) kv._2()).longValue());
            }
        }
    }

    /** The execution's statistics (null when no plan of it was recorded); forgets it. */
    PlanStats end(long id, int maxNodes) {
        Execution ex = executions.remove(id);
        if (ex == null) {
            return null;
        }
        try {
            return ex.plan == null ? null : stats(ex.plan, maxNodes);
        } finally {
            forget(ex);
        }
    }

    void clear() {
        executions.clear();
        owners.clear();
        stageValues.clear();
        driverValues.clear();
    }

    private void forget(Execution ex) {
        for (Long acc : ex.metricIds) {
            owners.remove(acc);
            stageValues.remove(acc);
            driverValues.remove(acc);
        }
    }

    private PlanStats stats(SparkPlanInfo root, int maxNodes) {
        PlanStats out = new PlanStats();
        // {plan, its pre-order index, parent node id, codegen stage}
        ArrayDeque<Object[]> stack = new ArrayDeque<>();
        stack.push(new Object[] {root, -1, -1});
        int index = 0;
        while (!stack.isEmpty() && index < 20_000) {
            Object[] top = stack.pop();
            SparkPlanInfo plan = (SparkPlanInfo) top[0];
            int parent = (Integer) top[1];
            int stage = (Integer) top[2];
            int nodeId = index++;
            String name = plan.nodeName() == null ? "" : plan.nodeName();
            List<SparkPlanInfo> children = Scala.list(plan.children());
            if (wrapper(name) || out.nodes.size() >= maxNodes) {
                out.omitted += wrapper(name) ? 0 : 1;
                push(stack, children, parent, stage);
                continue;
            }
            PlanStats.Node node = new PlanStats.Node(nodeId, parent, name);
            out.nodes.add(node);
            PlanStats.OwnTime time = new PlanStats.OwnTime();
            for (SQLMetricInfo m : Scala.list(plan.metrics())) {
                long value = value(m.accumulatorId());
                String metric = m.name();
                if (OUTPUT_ROWS.contains(metric)) {
                    node.actualRows = value;
                }
                time.add(metric, m.metricType(), value);
                if (PlanStats.SHUFFLE_WRITTEN.contains(metric)) {
                    node.shuffleWriteBytes = Math.max(node.shuffleWriteBytes, 0L) + value;
                } else if (PlanStats.SHUFFLE_READ.contains(metric)) {
                    node.shuffleReadBytes = Math.max(node.shuffleReadBytes, 0L) + value;
                } else if (PlanStats.SPILLED.contains(metric)) {
                    node.spillBytes = Math.max(node.spillBytes, 0L) + value;
                }
            }
            node.timeMs = time.ms();
            int childStage = stage;
            if (name.startsWith(CODEGEN) && name.endsWith(")")) {
                childStage = codegenStage(name);
                node.codegenStage = childStage;
                node.codegenDurationMs = node.timeMs;
            } else if (name.equals("InputAdapter")) {
                childStage = -1; // the boundary below a fused stage
                node.codegenStage = stage;
            } else {
                node.codegenStage = stage;
            }
            if (!name.startsWith("InMemoryTableScan")) { // its children are the cached plan, which ran before
                push(stack, children, nodeId, childStage);
            }
        }
        return out;
    }

    /** Plan structure the live walk passes through to its child (PlanStats.of). */
    static boolean wrapper(String name) {
        return name.equals("AdaptiveSparkPlan") || name.endsWith("QueryStage") || name.equals("ReusedExchange");
    }

    private static void push(ArrayDeque<Object[]> stack, List<SparkPlanInfo> children, int parent, int stage) {
        for (int i = children.size() - 1; i >= 0; i--) {
            stack.push(new Object[] {children.get(i), parent, stage}); // pre-order: first child on top
        }
    }

    private long value(long acc) {
        Long v = stageValues.get(acc);
        if (v == null) {
            v = driverValues.get(acc);
        }
        return v == null ? 0L : Math.max(v, 0L); // a metric never updated shows 0, as in Spark's UI
    }

    private static int codegenStage(String name) {
        try {
            return Integer.parseInt(name.substring(CODEGEN.length(), name.length() - 1).trim());
        } catch (NumberFormatException e) {
            return -1;
        }
    }

    /** An accumulable's value: a number, or the string a log stores a SQL metric's value as; MIN_VALUE if neither. */
    static long number(Object value) {
        if (value instanceof Number) {
            return ((Number) value).longValue();
        }
        if (value instanceof String) {
            try {
                return Long.parseLong(((String) value).trim());
            } catch (NumberFormatException e) {
                return Long.MIN_VALUE;
            }
        }
        return Long.MIN_VALUE;
    }
}
