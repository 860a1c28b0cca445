package io.sparktap.listener;

import java.io.IOException;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;
import java.util.function.ToIntFunction;

import org.apache.spark.sql.catalyst.catalog.CatalogStatistics;
import org.apache.spark.sql.catalyst.catalog.CatalogTable;
import org.apache.spark.sql.catalyst.catalog.HiveTableRelation;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Statistics;
import org.apache.spark.sql.execution.CodegenSupport;
import org.apache.spark.sql.execution.InputAdapter;
import org.apache.spark.sql.execution.QueryExecution;
import org.apache.spark.sql.execution.SparkPlan;
import org.apache.spark.sql.execution.WholeStageCodegenExec;
import org.apache.spark.sql.execution.adaptive.AdaptiveSparkPlanExec;
import org.apache.spark.sql.execution.adaptive.QueryStageExec;
import org.apache.spark.sql.execution.datasources.LogicalRelation;
import org.apache.spark.sql.execution.exchange.ReusedExchangeExec;
import org.apache.spark.sql.execution.metric.SQLMetric;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.MapType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

import scala.Option;

/**
 * {@code sql_plan_stats}: per physical plan node of a finished SQL execution, the optimizer's estimate (rows, size)
 * beside the actual output rows, and whole-stage codegen membership with the reason a node was left out.
 *
 * <p>Read from {@code SparkListenerSQLExecutionEnd.qe()} on the listener bus thread: values are copied into
 * {@link Node}s and no reference to the plan is kept. The walk mirrors Spark's UI ({@code SparkPlanInfo}):
 * adaptive plans show their final plan, query stages and reused exchanges their child. At most {@code maxNodes}
 * nodes (pre-order); the rest are counted.
 *
 * <p>Estimates: the statistics the optimizer computed for the node (cached on its logical plan; nodes it never
 * estimated have none) give the size, and rows when the cost-based optimizer (or
 * {@code spark.sql.cbo.planStats.enabled}) put them there; for a table scan without plan rows, the catalog's
 * statistics from the last {@code ANALYZE} ({@code est_source = catalog}): exactly what goes stale.
 *
 * <p>Codegen: a WholeStageCodegen node carries its largest generated method ({@link CodegenSize}) when asked for;
 * over {@code spark.sql.codegen.hugeMethodLimit}, or not compiling, Spark ran the stage interpreted although the
 * plan still shows it, so its operators get that as their fallback reason.
 */
final class PlanStats {
    static final String NUM_OUTPUT_ROWS = "numOutputRows";
    static final String PIPELINE_TIME = "pipelineTime";
    /**
     * SQL metrics (by display name) of shuffle and spill: Spark's exchange ("shuffle bytes written", "remote/local
     * bytes read") and sort or aggregate ("spill size"), which Comet's exchanges reuse, and Photon's shuffle sink and
     * source ("num bytes written", "num bytes spilled to disk due to memory pressure"). The stage completion sums them
     * too ({@link StageSqlSums}): the shuffle of an engine that keeps it out of the task metrics.
     */
    static final java.util.List<String> SHUFFLE_WRITTEN = java.util.Arrays.asList("shuffle bytes written",
            "num bytes written");
    static final java.util.List<String> SHUFFLE_READ = java.util.Arrays.asList("remote bytes read", "local bytes read");
    static final java.util.List<String> SPILLED = java.util.Arrays.asList("spill size",
            "num bytes spilled to disk due to memory pressure");

    static final class Node {
        final int nodeId;
        final int parentId;
        final String operator;
        long estRows = -1L;
        long estBytes = -1L;
        String estSource;
        long actualRows = -1L;
        int codegenStage = -1;
        String codegenFallback;
        long codegenDurationMs = -1L;
        long codegenMethodBytes = -1L;
        long timeMs = -1L;
        long shuffleWriteBytes = -1L;
        long shuffleReadBytes = -1L;
        long spillBytes = -1L;

        Node(int nodeId, int parentId, String operator) {
            this.nodeId = nodeId;
            this.parentId = parentId;
            this.operator = operator;
        }
    }

    final List<Node> nodes = new ArrayList<>();
    int omitted;
    boolean wholeStage;
    int maxFields;
    int hugeMethodLimit;

    PlanStats() {
    }

    /**
     * The statistics of this execution's executed plan, or null when Spark kept no QueryExecution. {@code methodBytes}
     * (or null: not asked for) gives a codegen stage's largest generated method, -1 when unknown,
     * {@link CodegenSize#COMPILE_ERROR} when its code did not compile.
     */
    static PlanStats of(QueryExecution qe, int maxNodes, ToIntFunction<WholeStageCodegenExec> methodBytes) {
        if (qe == null) {
            return null;
        }
        SparkPlan root = qe.executedPlan();
        if (root == null) {
            return null;
        }
        PlanStats out = new PlanStats();
        SQLConf conf = root.conf();
        out.wholeStage = conf.wholeStageEnabled();
        out.maxFields = conf.wholeStageMaxNumFields();
        out.hugeMethodLimit = conf.hugeMethodLimit();
        // {plan, parent node id, codegen stage, why that stage ran interpreted (or null)}
        ArrayDeque<Object[]> stack = new ArrayDeque<>();
        stack.push(new Object[] {root, -1, -1, null});
        while (!stack.isEmpty()) {
            Object[] top = stack.pop();
            SparkPlan plan = (SparkPlan) top[0];
            int parent = (Integer) top[1];
            int stage = (Integer) top[2];
            String interpreted = (String) top[3];
            if (plan instanceof AdaptiveSparkPlanExec) {
                stack.push(new Object[] {((AdaptiveSparkPlanExec) plan).executedPlan(), parent, stage, interpreted});
                continue;
            }
            if (plan instanceof QueryStageExec) {
                stack.push(new Object[] {((QueryStageExec) plan).plan(), parent, stage, interpreted});
                continue;
            }
            if (plan instanceof ReusedExchangeExec) {
                stack.push(new Object[] {((ReusedExchangeExec) plan).child(), parent, stage, interpreted});
                continue;
            }
            if (out.nodes.size() >= maxNodes) {
                out.omitted++;
                pushChildren(stack, plan, parent, stage, interpreted);
                continue;
            }
            Node node = new Node(plan.id(), parent, plan.nodeName());
            out.nodes.add(node);
            estimate(plan, node);
            node.actualRows = metric(plan, NUM_OUTPUT_ROWS);
            node.timeMs = ownTimeMs(plan);
            node.shuffleWriteBytes = named(plan, SHUFFLE_WRITTEN);
            node.shuffleReadBytes = named(plan, SHUFFLE_READ);
            node.spillBytes = named(plan, SPILLED);
            int childStage = stage;
            String childInterpreted = interpreted;
            if (plan instanceof WholeStageCodegenExec) {
                childStage = ((WholeStageCodegenExec) plan).codegenStageId();
                node.codegenStage = childStage;
                node.codegenDurationMs = metric(plan, PIPELINE_TIME);
                childInterpreted = methodBytes == null ? null
                        : interpreted(methodBytes.applyAsInt((WholeStageCodegenExec) plan), node, out);
            } else if (plan instanceof InputAdapter) {
                childStage = -1; // the boundary below a fused stage
                childInterpreted = null;
                node.codegenStage = stage;
            } else {
                node.codegenStage = stage;
                if (stage < 0 && plan instanceof CodegenSupport && ((CodegenSupport) plan).supportCodegen()) {
                    node.codegenFallback = fallbackReason(plan, out);
                } else if (stage >= 0 && interpreted != null && plan instanceof CodegenSupport) {
                    node.codegenFallback = interpreted;
                }
            }
            pushChildren(stack, plan, node.nodeId, childStage, childInterpreted);
        }
        return out;
    }

    /** Records a stage's largest method on its node; why Spark ran the stage interpreted, or null when it did not. */
    private static String interpreted(int methodBytes, Node node, PlanStats out) {
        if (methodBytes == CodegenSize.COMPILE_ERROR) {
            return "compile error: the generated code did not compile (spark.sql.codegen.fallback)";
        }
        if (methodBytes < 0) {
            return null;
        }
        node.codegenMethodBytes = methodBytes;
        if (methodBytes > out.hugeMethodLimit) {
            return "huge method: " + methodBytes + " bytes > spark.sql.codegen.hugeMethodLimit=" + out.hugeMethodLimit;
        }
        return null;
    }

    private static void pushChildren(ArrayDeque<Object[]> stack, SparkPlan plan, int parent, int stage,
            String interpreted) {
        List<SparkPlan> children = Scala.list(plan.children());
        for (int i = children.size() - 1; i >= 0; i--) {
            // pre-order: first child on top
            stack.push(new Object[] {children.get(i), parent, stage, interpreted});
        }
    }

    /** Why an operator that can take part in whole-stage codegen runs without it (Spark does not say). */
    static String fallbackReason(SparkPlan plan, PlanStats out) {
        if (!out.wholeStage) {
            return "spark.sql.codegen.wholeStage=false";
        }
        int fields = nestedFields(plan.schema());
        for (SparkPlan child : Scala.list(plan.children())) {
            fields = Math.max(fields, nestedFields(child.schema()));
        }
        if (fields > out.maxFields) {
            return "too many fields: " + fields + " > spark.sql.codegen.maxFields=" + out.maxFields;
        }
        return "not fused: an expression without code generation, or a plan boundary";
    }

    /** Spark's count of fields for the codegen limit (WholeStageCodegenExec.numOfNestedFields). */
    static int nestedFields(DataType type) {
        if (type instanceof StructType) {
            int n = 0;
            for (StructField f : ((StructType) type).fields()) {
                n += nestedFields(f.dataType());
            }
            return n;
        }
        if (type instanceof MapType) {
            return nestedFields(((MapType) type).keyType()) + nestedFields(((MapType) type).valueType());
        }
        if (type instanceof ArrayType) {
            return nestedFields(((ArrayType) type).elementType());
        }
        return 1;
    }

    private static void estimate(SparkPlan plan, Node node) {
        Option<LogicalPlan> link = plan.logicalLink();
        if (link == null || link.isEmpty()) {
            return;
        }
        LogicalPlan logical = link.get();
        if (plan.children().isEmpty()) {
            // a scan is linked to the top of the operators it absorbed (a Filter or Project over the relation), whose
            // estimate is after the filter; the scan's own output is the relation's rows: estimate it by the relation
            List<LogicalPlan> leaves = Scala.list(logical.collectLeaves());
            if (leaves.size() == 1) {
                logical = leaves.get(0);
            }
        }
        // what the optimizer computed (cached on the plan); a node it never estimated gets no estimate here:
        // computing one now would cost the listener-bus thread milliseconds per execution
        Option<Statistics> cached = logical.statsCache();
        if (cached != null && cached.isDefined()) {
            Statistics stats = cached.get();
            node.estBytes = toLong(stats.sizeInBytes());
            if (stats.rowCount().isDefined()) {
                node.estRows = toLong(stats.rowCount().get());
                node.estSource = "plan";
                return;
            }
        }
        CatalogTable table = plan.children().isEmpty() ? scannedTable(logical) : null;
        if (table != null && table.stats().isDefined()) {
            CatalogStatistics catalog = table.stats().get();
            if (catalog.rowCount().isDefined()) {
                node.estRows = toLong(catalog.rowCount().get());
                node.estSource = "catalog";
            }
        }
        if (node.estBytes >= 0 && node.estSource == null) {
            node.estSource = "plan";
        }
    }

    /**
     * The catalog table a scan reads: the planner links a scan to the top of the logical operators it absorbed
     * (a Project or Filter over the relation), so look for the one relation leaf below.
     */
    private static CatalogTable scannedTable(LogicalPlan logical) {
        List<LogicalPlan> leaves = Scala.list(logical.collectLeaves());
        if (leaves.size() != 1) {
            return null;
        }
        LogicalPlan leaf = leaves.get(0);
        if (leaf instanceof LogicalRelation && ((LogicalRelation) leaf).catalogTable().isDefined()) {
            return ((LogicalRelation) leaf).catalogTable().get();
        }
        if (leaf instanceof HiveTableRelation) {
            return ((HiveTableRelation) leaf).tableMeta();
        }
        return null;
    }

    /**
     * The node's own time from its SQL timing metrics, in ms, or -1 when it has none: what the native-vs-JVM split and
     * the native_fallback rule add up. A Photon operator reports both "cumulative time" (its subtree) and "exclusive
     * time" (itself): only the latter. Otherwise the sum of its timing metrics ("timing" in ms, "nsTiming" in ns), less
     * those that cover more than the node: cumulative times, a Photon stage marker's "stage duration", and the
     * driver's planning times ("driver time - …").
     */
    static long ownTimeMs(SparkPlan plan) {
        OwnTime time = new OwnTime();
        scala.collection.Iterator<scala.Tuple2<String, SQLMetric>> it = plan.metrics().iterator();
        while (it.hasNext()) {
            scala.Tuple2<String, SQLMetric> kv = it.next();
            SQLMetric m = kv._2();
            time.add(m.name().isDefined() ? m.name().get() : kv._1(), m.metricType(), m.value());
        }
        return time.ms();
    }

    /** A node's own time from its timing metrics, one (display name, metric type, value) at a time (ownTimeMs). */
    static final class OwnTime {
        private double ms = -1;
        private long exclusive = -1L;

        void add(String name, String type, long raw) {
            boolean ns = "nsTiming".equals(type);
            if (!ns && !"timing".equals(type)) {
                return;
            }
            double value = Math.max(raw, 0L) / (ns ? 1_000_000.0 : 1.0);
            if ("exclusive time".equals(name)) {
                exclusive = Math.round(value);
            } else if (!name.contains("cumulative") && !name.equals("stage duration")
                    && !name.startsWith("driver time")) {
                ms = Math.max(ms, 0) + value;
            }
        }

        long ms() {
            return exclusive >= 0 ? exclusive : ms < 0 ? -1L : Math.round(ms);
        }
    }

    /** The sum of the node's SQL metrics whose display name is one of {@code names}; -1 when it has none. */
    static long named(SparkPlan plan, java.util.List<String> names) {
        long sum = -1L;
        scala.collection.Iterator<SQLMetric> it = plan.metrics().valuesIterator();
        while (it.hasNext()) {
            SQLMetric m = it.next();
            if (m.name().isDefined() && names.contains(m.name().get())) {
                sum = Math.max(sum, 0L) + Math.max(m.value(), 0L);
            }
        }
        return sum;
    }

    private static long metric(SparkPlan plan, String key) {
        Option<SQLMetric> m = plan.metrics().get(key);
        return m.isDefined() ? m.get().value() : -1L;
    }

    /** A Scala BigInt as a long; -1 when it does not fit (Spark's "unknown" size is Long.MaxValue + 1). */
    static long toLong(scala.math.BigInt value) {
        java.math.BigInteger big = value.bigInteger();
        return big.signum() >= 0 && big.bitLength() < 63 ? big.longValue() : -1L;
    }

    void write(JsonOut out, long executionId, Redactor redactor) throws IOException {
        out.num("execution_id", executionId);
        out.flag("whole_stage_codegen", wholeStage);
        out.num("codegen_max_fields", maxFields);
        out.num("codegen_huge_method_limit", hugeMethodLimit);
        out.count("nodes_omitted", omitted);
        if (nodes.isEmpty()) {
            return;
        }
        out.gen().writeArrayFieldStart("nodes");
        for (Node n : nodes) {
            out.gen().writeStartObject();
            out.num("node_id", n.nodeId);
            out.optId("parent_id", n.parentId);
            out.str("operator", redactor.text(n.operator, 200));
            out.optId("est_rows", n.estRows);
            out.optId("est_bytes", n.estBytes);
            out.opt("est_source", n.estSource);
            out.optId("actual_rows", n.actualRows);
            out.optId("codegen_stage", n.codegenStage);
            out.opt("codegen_fallback", n.codegenFallback);
            out.optId("codegen_duration_ms", n.codegenDurationMs);
            out.optId("codegen_method_bytes", n.codegenMethodBytes);
            out.optId("time_ms", n.timeMs);
            out.optId("shuffle_write_bytes", n.shuffleWriteBytes);
            out.optId("shuffle_read_bytes", n.shuffleReadBytes);
            out.optId("spill_bytes", n.spillBytes);
            out.gen().writeEndObject();
        }
        out.gen().writeEndArray();
    }
}
