package io.sparktap.listener;

import java.lang.reflect.Method;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;

import org.apache.hadoop.conf.Configuration;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.connector.catalog.Identifier;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCatalog;
import org.apache.spark.sql.execution.QueryExecution;
import org.apache.spark.sql.execution.SparkPlan;
import org.apache.spark.sql.execution.adaptive.AdaptiveSparkPlanExec;
import org.apache.spark.sql.execution.adaptive.QueryStageExec;
import org.apache.spark.sql.execution.metric.SQLMetric;

import scala.Option;

/**
 * The tables a finished SQL execution read and wrote, from its {@link QueryExecution} (live, at SQL end).
 *
 * <p>Only Spark's own classes are compiled against; Delta, Iceberg and Hudi objects are read by name through
 * reflection, each access guarded by the caller (a failure loses this execution's table events, never Spark's).
 * Scans: {@code FileSourceScanExec} (root paths, file format, catalog table, its {@code numFiles}/{@code filesSize}/
 * {@code numOutputRows}), {@code BatchScanExec} (the DSv2 table's name and properties), {@code HiveTableScanExec}.
 * Writes: {@code DataWritingCommandExec} (the command's catalog table, output path, format, mode and its
 * {@code numFiles}/{@code numOutputBytes}/{@code numOutputRows}/{@code numParts}: metrics_source plan); DSv2 writes
 * (their target from the analysed plan's write command, or the CTAS's catalog and identifier) where an Iceberg table
 * gives its committed snapshot's summary (metrics_source iceberg) and a Delta table its commits' operation metrics
 * ({@link DeltaCommits}); Delta's own commands ({@code WriteIntoDelta}, MERGE, UPDATE, DELETE, and a
 * {@code SaveIntoDataSourceCommand} to Delta) likewise.
 */
final class TablesLive {
    private static final int MAX_NODES = 20_000;
    /** DSv2 write nodes whose target is in the logical plan's V2 write command. */
    private static final Set<String> V2_WRITES = new HashSet<>(java.util.Arrays.asList("AppendDataExec",
            "OverwriteByExpressionExec", "OverwritePartitionsDynamicExec", "ReplaceDataExec", "WriteDeltaExec",
            "AppendDataExecV1", "OverwriteByExpressionExecV1"));
    private static final Set<String> V2_CTAS = new HashSet<>(java.util.Arrays.asList("AtomicCreateTableAsSelectExec",
            "CreateTableAsSelectExec", "AtomicReplaceTableAsSelectExec", "ReplaceTableAsSelectExec"));
    /** Logical DSv2 write commands (their {@code table()} is the target relation). */
    private static final Set<String> V2_COMMANDS = new HashSet<>(java.util.Arrays.asList("AppendData",
            "OverwriteByExpression", "OverwritePartitionsDynamic", "ReplaceData", "WriteDelta"));

    /** Delta's commands that commit data (DESCRIBE HISTORY, VACUUM … do not). */
    static final Set<String> DELTA_WRITES = new HashSet<>(java.util.Arrays.asList("WriteIntoDelta",
            "WriteIntoDeltaCommand", "MergeIntoCommand", "UpdateCommand", "DeleteCommand", "OptimizeTableCommand",
            "CreateDeltaTableCommand"));

    private final DeltaCommits delta;

    TablesLive(DeltaCommits delta) {
        this.delta = delta;
    }

    /** The accesses of the execution, pre-order (writes come first: they are the plan's root). */
    List<TableAccess> read(QueryExecution qe, List<QueryExecution> enclosing, long startMs, long endMs)
            throws Exception {
        List<TableAccess> out = new ArrayList<>();
        SparkPlan root = qe == null ? null : qe.executedPlan();
        if (root == null) {
            return out;
        }
        Context ctx = new Context(qe, startMs, endMs);
        ctx.enclosing = enclosing;
        ArrayDeque<SparkPlan> stack = new ArrayDeque<>();
        stack.push(root);
        int seen = 0;
        while (!stack.isEmpty() && seen++ < MAX_NODES) {
            SparkPlan plan = stack.pop();
            if (plan instanceof AdaptiveSparkPlanExec) {
                stack.push(((AdaptiveSparkPlanExec) plan).executedPlan());
                continue;
            }
            if (plan instanceof QueryStageExec) {
                stack.push(((QueryStageExec) plan).plan());
                continue;
            }
            if (plan.getClass().getSimpleName().equals("ReusedExchangeExec")) {
                continue; // its scans ran once, under the exchange it reuses
            }
            node(plan, ctx, out);
            List<SparkPlan> children = Scala.list(plan.children());
            for (int i = children.size() - 1; i >= 0; i--) {
                stack.push(children.get(i));
            }
        }
        TableAccess.icebergRewrites(out, false);
        return out;
    }

    private static final class Context {
        final QueryExecution qe;
        final long startMs;
        final long endMs;
        List<Object> v2Targets;
        /** running executions this one is nested in, nearest first (a CTAS whose insert runs as its own execution) */
        List<QueryExecution> enclosing = Collections.emptyList();

        Context(QueryExecution qe, long startMs, long endMs) {
            this.qe = qe;
            this.startMs = startMs;
            this.endMs = endMs;
        }

        Configuration hadoopConf() {
            return qe.sparkSession().sparkContext().hadoopConfiguration();
        }

        String appId() {
            return qe.sparkSession().sparkContext().applicationId();
        }
    }

    private void node(SparkPlan plan, Context ctx, List<TableAccess> out) throws Exception {
        String cls = plan.getClass().getSimpleName();
        int id = plan.id();
        String op = plan.nodeName();
        if (cls.equals("FileSourceScanExec")) {
            TableAccess a = new TableAccess(id, TableAccess.READ, op);
            Object relation = get(plan, "relation");
            Object index = get(relation, "location");
            if (index != null && index.getClass().getSimpleName().equals("DeltaLogFileIndex")) {
                return; // Delta reading its own log, not a table
            }
            identifier(a, unwrap(get(plan, "tableIdentifier")));
            Object format = get(relation, "fileFormat");
            a.format = format(format);
            List<Object> roots = list(get(index, "rootPaths"));
            if (a.location.isEmpty() && !roots.isEmpty()) {
                a.location = String.valueOf(roots.get(0));
            }
            a.files = metric(plan, "numFiles");
            a.bytes = metric(plan, "filesSize");
            a.rows = metric(plan, "numOutputRows");
            out.add(a);
        } else if (cls.equals("BatchScanExec")) {
            TableAccess a = new TableAccess(id, TableAccess.READ, op);
            Object table = get(plan, "table"); // Spark 3.4+
            Object scan = get(plan, "scan");
            if (table instanceof Table) {
                v2Table(a, (Table) table, null);
            } else if (scan != null) {
                a.format = TableAccess.format(scan.getClass().getName().contains("iceberg") ? "iceberg" : "");
            }
            a.files = metric(plan, "resultDataFiles"); // Iceberg's scan report (driver-side custom metrics)
            a.bytes = metric(plan, "totalFileSize");
            a.rows = metric(plan, "numOutputRows");
            out.add(a);
        } else if (cls.equals("HiveTableScanExec")) {
            TableAccess a = new TableAccess(id, TableAccess.READ, op);
            catalogTable(a, get(get(plan, "relation"), "tableMeta"));
            a.format = "hive";
            a.rows = metric(plan, "numOutputRows");
            out.add(a);
        } else if (cls.equals("DataWritingCommandExec")) {
            dataWriting(plan, get(plan, "cmd"), ctx, out);
        } else if (cls.equals("ExecutedCommandExec")) {
            command(plan, get(plan, "cmd"), ctx, out);
        } else if (V2_WRITES.contains(cls)) {
            Object table = get(plan, "table"); // the V1-fallback nodes carry their table
            TableAccess a = new TableAccess(id, TableAccess.WRITE, op);
            a.writeMode = cls.startsWith("Append") ? "append" : cls.startsWith("Overwrite") ? "overwrite"
                    : cls.startsWith("ReplaceData") ? "replace data" : cls.startsWith("WriteDelta") ? "write delta" : "";
            Object target = table instanceof Table ? null : v2Target(ctx);
            Object relationTable = target != null ? get(target, "table") : table;
            Object catalog = target != null ? unwrap(get(target, "catalog")) : null;
            Object ident = target != null ? unwrap(get(target, "identifier")) : null;
            if (ident instanceof Identifier && catalog instanceof TableCatalog) {
                a.catalog = ((TableCatalog) catalog).name();
                a.table = identName((Identifier) ident);
            }
            if (relationTable instanceof Table) {
                v2Table(a, (Table) relationTable, a.table.isEmpty() ? null : a.table);
            }
            committed(a, relationTable, plan, ctx, out);
        } else if (V2_CTAS.contains(cls)) {
            TableAccess a = new TableAccess(id, TableAccess.WRITE, op);
            a.writeMode = cls.contains("Replace") ? "replace" : "create";
            Object catalog = get(plan, "catalog");
            Object ident = get(plan, "ident");
            Table table = null;
            if (catalog instanceof TableCatalog && ident instanceof Identifier) {
                a.catalog = ((TableCatalog) catalog).name();
                a.table = identName((Identifier) ident);
                table = ((TableCatalog) catalog).loadTable((Identifier) ident); // created by now
                v2Table(a, table, a.table);
            }
            committed(a, table, plan, ctx, out);
        }
    }

    /** A DataWritingCommand: InsertIntoHadoopFsRelationCommand, InsertIntoHiveTable, the CTAS commands… */
    private static void dataWriting(SparkPlan plan, Object cmd, Context ctx, List<TableAccess> out) throws Exception {
        if (cmd == null) {
            return;
        }
        TableAccess a = new TableAccess(plan.id(), TableAccess.WRITE, plan.nodeName());
        Object table = unwrap(get(cmd, "catalogTable"));
        if (table == null) {
            table = get(cmd, "table"); // InsertIntoHiveTable, CreateDataSourceTableAsSelectCommand (3.3)
        }
        if (table == null) {
            table = get(cmd, "tableDesc"); // CreateHiveTableAsSelectCommand
        }
        for (QueryExecution outer : ctx.enclosing) {
            if (table != null) {
                break;
            }
            table = ctasTable(outer); // CreateDataSourceTableAsSelectCommand's insert names no table
        }
        catalogTable(a, table);
        Object path = get(cmd, "outputPath");
        if (path != null) {
            a.location = String.valueOf(path);
        }
        Object format = get(cmd, "fileFormat");
        if (format != null) {
            a.format = format(format);
        } else if (a.format.isEmpty() && cmd.getClass().getSimpleName().contains("Hive")) {
            a.format = "hive";
        }
        Object mode = get(cmd, "mode");
        Object overwrite = get(cmd, "overwrite");
        a.writeMode = mode != null ? mode(String.valueOf(mode))
                : overwrite instanceof Boolean ? ((Boolean) overwrite ? "overwrite" : "append") : "";
        a.files = metric(plan, "numFiles");
        a.bytes = metric(plan, "numOutputBytes");
        a.rows = metric(plan, "numOutputRows");
        a.partitions = metric(plan, "numParts");
        a.metricsSource = "plan";
        out.add(a);
    }

    /** The CatalogTable of a running CTAS command (the root of {@code parent}'s executed plan), or null. */
    private static Object ctasTable(QueryExecution parent) throws Exception {
        SparkPlan root = parent.executedPlan();
        Object cmd = root != null && root.getClass().getSimpleName().equals("ExecutedCommandExec")
                ? get(root, "cmd") : null;
        return cmd != null && cmd.getClass().getSimpleName().endsWith("TableAsSelectCommand") ? get(cmd, "table")
                : null;
    }

    /**
     * A RunnableCommand: Delta's own (WriteIntoDelta, MERGE, UPDATE, DELETE, OPTIMIZE), SaveIntoDataSourceCommand to
     * Delta.
     */
    private void command(SparkPlan plan, Object cmd, Context ctx, List<TableAccess> out) throws Exception {
        if (cmd == null) {
            return;
        }
        String cls = cmd.getClass().getName();
        boolean deltaCommand = cls.startsWith("org.apache.spark.sql.delta.")
                && DELTA_WRITES.contains(cmd.getClass().getSimpleName());
        boolean save = cls.endsWith(".SaveIntoDataSourceCommand");
        if (!deltaCommand && !save) {
            return; // CreateDataSourceTableAsSelectCommand & co. write in a nested execution, which reports it
        }
        TableAccess a = new TableAccess(plan.id(), TableAccess.WRITE, plan.nodeName());
        if (save) {
            Object source = get(cmd, "dataSource");
            Object options = get(cmd, "options");
            a.format = TableAccess.format(source == null ? "" : source.getClass().getName());
            if (!a.format.equals("delta")) {
                a.format = a.format.equals("other") ? "" : a.format;
                a.writeMode = mode(String.valueOf(get(cmd, "mode")));
                out.add(a); // JDBC and other relation providers: no files to count
                return;
            }
            Object p = options instanceof scala.collection.Map ? unwrap(((scala.collection.Map<?, ?>) options)
                    .get(pathKey())) : null;
            a.location = p == null ? "" : String.valueOf(p);
        } else {
            Object log = get(cmd, "deltaLog");
            Object dataPath = log == null ? null : get(log, "dataPath");
            if (dataPath == null) {
                Object target = get(cmd, "target"); // MERGE: the target's plan, a LogicalRelation over Delta
                dataPath = target == null ? null : get(get(get(target, "relation"), "location"), "path");
            }
            // OPTIMIZE: its child, a ResolvedTable over the table (a DeltaTableV2: its log and its catalog entry)
            Object resolved = dataPath == null && cmd.getClass().getSimpleName().equals("OptimizeTableCommand")
                    ? get(get(cmd, "child"), "table") : null;
            if (resolved != null) {
                dataPath = get(get(resolved, "deltaLog"), "dataPath");
            }
            a.location = dataPath == null ? "" : String.valueOf(dataPath);
            catalogTable(a, unwrap(get(cmd, "catalogTableOpt")));
            if (a.table.isEmpty()) {
                catalogTable(a, unwrap(get(cmd, "catalogTable")));
            }
            if (a.table.isEmpty() && resolved != null) {
                catalogTable(a, unwrap(get(resolved, "catalogTable")));
            }
            a.format = "delta";
        }
        committed(a, null, plan, ctx, out);
    }

    @SuppressWarnings("unchecked")
    private static <K> K pathKey() {
        return (K) "path";
    }

    /** Fill files/bytes/rows from the table's own commit (Delta's log, Iceberg's snapshot), else the plan's. */
    private void committed(TableAccess a, Object table, SparkPlan plan, Context ctx, List<TableAccess> out)
            throws Exception {
        if (a.format.equals("delta") && !a.location.isEmpty()) {
            List<TableAccess> commits = delta.commits(a, ctx.hadoopConf(), ctx.startMs, ctx.endMs);
            if (!commits.isEmpty()) {
                out.addAll(commits);
                return;
            }
        }
        if (a.format.equals("iceberg") && table != null && iceberg(a, get(table, "table"), ctx)) {
            out.add(a);
            return;
        }
        a.rows = metric(plan, "numOutputRows");
        a.files = metric(plan, "numFiles");
        a.bytes = metric(plan, "numOutputBytes");
        a.metricsSource = a.rows >= 0 || a.files >= 0 || a.bytes >= 0 ? "plan" : "";
        out.add(a);
    }

    /**
     * The Iceberg snapshots this application committed to {@code table} during the execution, from the newest back:
     * their summaries' {@code added-data-files}, {@code added-files-size}, {@code added-records} summed, the newest's
     * id as the version. A summary's {@code spark.app.id} says which application committed it.
     */
    private static boolean iceberg(TableAccess a, Object table, Context ctx) throws Exception {
        if (table == null) {
            return false;
        }
        call(table, "refresh");
        Object snapshot = get(table, "currentSnapshot");
        String app = ctx.appId();
        long files = 0L;
        long bytes = 0L;
        long rows = 0L;
        String version = null;
        for (int n = 0; snapshot != null && n < 100; n++) {
            Object ts = get(snapshot, "timestampMillis");
            if (!(ts instanceof Number) || ((Number) ts).longValue() < ctx.startMs) {
                break;
            }
            Object summary = get(snapshot, "summary");
            Map<?, ?> s = summary instanceof Map ? (Map<?, ?>) summary : Collections.emptyMap();
            if (app.equals(s.get("spark.app.id")) && ((Number) ts).longValue() <= ctx.endMs) {
                files += parse(s.get("added-data-files"));
                bytes += parse(s.get("added-files-size"));
                rows += parse(s.get("added-records"));
                if (version == null) {
                    version = String.valueOf(get(snapshot, "snapshotId"));
                }
            }
            Object parent = get(snapshot, "parentId");
            snapshot = parent instanceof Number ? call(table, "snapshot", ((Number) parent).longValue()) : null;
        }
        if (version == null) {
            return false;
        }
        a.files = files;
        a.bytes = bytes;
        a.rows = rows;
        a.version = version;
        a.metricsSource = "iceberg";
        return true;
    }

    private static long parse(Object value) {
        try {
            return value == null ? 0L : Long.parseLong(value.toString().trim());
        } catch (NumberFormatException e) {
            return 0L;
        }
    }

    /** The target relation (a DataSourceV2Relation) of the analysed plan's first DSv2 write command. */
    private static Object v2Target(Context ctx) throws Exception {
        if (ctx.v2Targets == null) {
            ctx.v2Targets = new ArrayList<>();
            ArrayDeque<LogicalPlan> stack = new ArrayDeque<>();
            stack.push(ctx.qe.analyzed());
            int seen = 0;
            while (!stack.isEmpty() && seen++ < MAX_NODES) {
                LogicalPlan p = stack.pop();
                if (V2_COMMANDS.contains(p.getClass().getSimpleName())) {
                    Object t = get(p, "table");
                    if (t != null) {
                        ctx.v2Targets.add(t);
                    }
                }
                for (LogicalPlan child : Scala.list(p.children())) {
                    stack.push(child);
                }
            }
        }
        return ctx.v2Targets.isEmpty() ? null : ctx.v2Targets.get(0);
    }

    /** Name (unless known), format and location of a DSv2 table, from its properties and class. */
    private static void v2Table(TableAccess a, Table table, String knownName) {
        Map<String, String> props = table.properties();
        String cls = table.getClass().getName();
        if (knownName == null) {
            a.qualifiedName(table.name(), true);
        }
        String provider = props == null ? null : props.get("provider");
        String format = props == null ? null : props.get("format");
        if (cls.contains("iceberg")) {
            a.format = "iceberg";
        } else if (cls.contains("delta")) {
            a.format = "delta";
        } else {
            a.format = TableAccess.format(provider != null ? provider : format);
        }
        String location = props == null ? null : props.get("location");
        if (location == null && a.format.equals("delta")) {
            try {
                Object path = get(table, "path");
                location = path == null ? null : path.toString();
            } catch (Exception e) {
                location = null;
            }
        }
        if (location != null) {
            a.location = location;
        }
    }

    /** Catalog, name, location and provider of a CatalogTable (null: nothing). */
    private static void catalogTable(TableAccess a, Object table) throws Exception {
        if (table == null) {
            return;
        }
        identifier(a, get(table, "identifier"));
        Object location = unwrap(get(get(table, "storage"), "locationUri")); // location() throws when unset
        if (location != null && !location.toString().isEmpty()) {
            a.location = location.toString();
        }
        Object provider = unwrap(get(table, "provider"));
        if (provider != null) {
            a.format = TableAccess.format(provider.toString());
        }
    }

    /** Catalog and name of a TableIdentifier (null: nothing); Spark 3.3's has no catalog: spark_catalog. */
    private static void identifier(TableAccess a, Object ident) throws Exception {
        if (ident == null) {
            return;
        }
        Object catalog = unwrap(get(ident, "catalog")); // Spark 3.4+
        Object db = unwrap(get(ident, "database"));
        Object name = get(ident, "table");
        a.catalog = catalog != null ? catalog.toString() : "spark_catalog";
        a.table = (db != null ? db + "." : "") + name;
    }

    private static String identName(Identifier ident) {
        StringBuilder b = new StringBuilder();
        for (String part : ident.namespace()) {
            b.append(part).append('.');
        }
        return b.append(ident.name()).toString();
    }

    /** A FileFormat's name: its {@code shortName()} (parquet, orc…) or class (DeltaParquetFileFormat → delta). */
    private static String format(Object fileFormat) throws Exception {
        if (fileFormat == null) {
            return "";
        }
        String cls = fileFormat.getClass().getName().toLowerCase(Locale.ROOT);
        if (cls.contains("delta") || cls.contains("hudi") || cls.contains("hive")) {
            return TableAccess.format(cls);
        }
        Object shortName = get(fileFormat, "shortName");
        return TableAccess.format(shortName != null ? shortName.toString() : fileFormat.toString());
    }

    static String mode(String saveMode) {
        String m = saveMode.toLowerCase(Locale.ROOT);
        return m.equals("errorifexists") ? "create" : m;
    }

    private static long metric(SparkPlan plan, String key) {
        Option<SQLMetric> m = plan.metrics().get(key);
        return m.isDefined() ? m.get().value() : -1L;
    }

    private static List<Object> list(Object value) {
        List<Object> out = new ArrayList<>();
        if (value instanceof scala.collection.Iterable) {
            out.addAll(Scala.list((scala.collection.Iterable<Object>) value));
        }
        return out;
    }

    static Object unwrap(Object value) {
        if (value instanceof Option) {
            return ((Option<?>) value).isDefined() ? ((Option<?>) value).get() : null;
        }
        return value;
    }

    /** A no-argument method's value by name (public or not: Iceberg's classes are package-private), or null. */
    static Object get(Object target, String name) throws Exception {
        return target == null ? null : call(target, name);
    }

    private static Object call(Object target, String name, Object... args) throws Exception {
        for (Class<?> c = target.getClass(); c != null; c = c.getSuperclass()) {
            for (Method m : c.getDeclaredMethods()) {
                if (fits(m, name, args)) {
                    m.setAccessible(true);
                    return m.invoke(target, args);
                }
            }
        }
        for (Method m : target.getClass().getMethods()) {
            if (fits(m, name, args)) {
                m.setAccessible(true);
                return m.invoke(target, args);
            }
        }
        return null;
    }

    /** Whether {@code m} is {@code name} taking {@code args} (a Long argument fits a long parameter). */
    private static boolean fits(Method m, String name, Object[] args) {
        if (!m.getName().equals(name) || m.getParameterCount() != args.length || m.isBridge()) {
            return false;
        }
        Class<?>[] types = m.getParameterTypes();
        for (int i = 0; i < args.length; i++) {
            Class<?> t = types[i] == long.class ? Long.class : types[i] == int.class ? Integer.class : types[i];
            if (args[i] != null && !t.isInstance(args[i])) {
                return false;
            }
        }
        return true;
    }

}
