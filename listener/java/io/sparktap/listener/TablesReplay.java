package io.sparktap.listener;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.apache.spark.sql.execution.SparkPlanInfo;
import org.apache.spark.sql.execution.metric.SQLMetricInfo;

import scala.Tuple2;

/**
 * The tables of a replayed SQL execution (an event log: no QueryExecution runs here), from the plan the log recorded
 * (its {@code SparkListenerSQLExecutionStart}, then each {@code SparkListenerSQLAdaptiveExecutionUpdate}: the last
 * wins) and the driver-side metric values the log carries ({@code SparkListenerDriverAccumUpdates}: a file scan's
 * {@code number of files read}/{@code size of files read}, a file write's {@code number of written files}/
 * {@code written output}/{@code number of output rows}/{@code number of dynamic part}), emitted at its end.
 *
 * <p>What a node names is read from its strings: a scan's {@code metadata} ({@code Location}, {@code Format}) and node
 * name ({@code Scan parquet spark_catalog.db.t}); a V1 write's simple string ({@code Execute
 * InsertIntoHadoopFsRelationCommand <path>, false, Parquet, [options], Append, `spark_catalog`.`db`.`t`, …}); a DSv2
 * write's ({@code AppendData …, IcebergWrite(table=cat.db.t, format=PARQUET)}); Delta's commands ({@code Execute
 * WriteIntoDeltaCommand}, {@code Execute SaveIntoDataSourceCommand …DeltaDataSource…, Map(path -> …)}).
 * A log has no Delta commit or Iceberg snapshot: those writes carry the figures their node's metrics posted, if any.
 *
 * <p>Delta's MERGE, UPDATE and DELETE are a plan of one node, {@code Execute MergeIntoCommand}; the execution's plan
 * description holds its arguments ({@code (2) MergeIntoCommand\nArguments: SubqueryAlias s, SubqueryAlias t,
 * `spark_catalog`.`db`.`t`, Delta[version=1, file:/w/t], …}), where the table's name and location are, and the
 * command posts its own metrics from the driver: the files, bytes and rows it added (Delta 3.3's and 4.3's names,
 * {@link #DELTA_FIGURES}), which equal its commit's add actions. A DELETE's arguments carry no location: it is the
 * one this application's scans of that table named ({@link #locations}). Spark 4.1 shows an Iceberg write
 * ({@code AppendData}) without its table in the node's simple string, and in the description of the execution's start
 * only (its adaptive updates show the node bare): the write read at the start is kept.
 */
final class TablesReplay {
    private static final int MAX_EXECUTIONS = 1000;
    private static final int MAX_VALUES = 10_000;
    private static final String[] SAVE_MODES = {"Append", "Overwrite", "ErrorIfExists", "Ignore"};
    /** Delta's commands and the operation their commit records (the live write's mode: DeltaCommits.mode). */
    private static final Map<String, String> DELTA_MODES = new HashMap<>();

    static {
        DELTA_MODES.put("MergeIntoCommand", "merge");
        DELTA_MODES.put("UpdateCommand", "update");
        DELTA_MODES.put("DeleteCommand", "delete");
        DELTA_MODES.put("OptimizeTableCommand", "optimize");
    }

    /**
     * A Delta row-level command's figures as its metrics name them (Delta 3.3 and 4.3): files added, bytes added, and
     * the rows of the files it added (all of a command's row metrics, summed: MERGE writes the rows it inserted,
     * updated and copied unchanged; UPDATE the rows it updated and copied; DELETE the rows it copied).
     */
    static final Map<String, Figures> DELTA_FIGURES = new HashMap<>();

    static {
        DELTA_FIGURES.put("MergeIntoCommand", new Figures("number of files added to target",
                "number of target bytes added",
                "number of inserted rows", "number of updated rows", "number of target rows rewritten unmodified"));
        DELTA_FIGURES.put("UpdateCommand", new Figures("number of files added.", "number of bytes added",
                "number of rows touched (copied + updated)"));
        DELTA_FIGURES.put("DeleteCommand", new Figures("number of files added.", "number of bytes added",
                "number of rows copied"));
    }

    /** The names of a node's metrics of files, bytes and rows written (the rows: the sum of these). */
    static final class Figures {
        final String files;
        final String bytes;
        final String[] rows;

        Figures(String files, String bytes, String... rows) {
            this.files = files;
            this.bytes = bytes;
            this.rows = rows;
        }
    }

    private static final int MAX_ARGUMENTS = 64 * 1024;
    /** DSv2 write nodes, whose write (an Iceberg table's name) Spark 4.1 shows in the plan description only. */
    private static final java.util.Set<String> V2_WRITES = new java.util.HashSet<>(java.util.Arrays.asList(
            "AppendData", "OverwriteByExpression", "OverwritePartitionsDynamic", "ReplaceData", "WriteDelta"));

    /** A table node of the plan and the accumulator ids of its figures (-1: none). */
    static final class Node {
        final TableAccess access;
        long filesAcc = -1L;
        long bytesAcc = -1L;
        /** the rows written: the sum of these (one for a file write, several for a Delta command; none: no figure) */
        long[] rowsAccs = {};
        long partsAcc = -1L;
        /** an Iceberg scan of a staged file set (IcebergStagedScan: rewrite_data_files' read of a file group) */
        boolean staged;

        Node(TableAccess access) {
            this.access = access;
        }
    }

    private static final class Execution {
        List<Node> nodes = new ArrayList<>();
        final Map<Long, Long> values = new HashMap<>();
    }

    private final Map<Long, Execution> executions = new BoundedMap<>(MAX_EXECUTIONS);
    /** catalog.table -> the location this application's accesses named for it (a DELETE's logged plan has none) */
    private final Map<String, String> locations = new BoundedMap<>(MAX_EXECUTIONS);

    /** The execution's plan as the log recorded it (its start's, then each adaptive update's), with its description. */
    void plan(long id, SparkPlanInfo root, String description) {
        Execution ex = executions.computeIfAbsent(id, k -> new Execution());
        List<Node> nodes = nodes(root, description);
        if (!hasWrite(nodes)) { // Spark 4.1's adaptive updates show a DSv2 write without its write (the start had it)
            for (Node n : ex.nodes) {
                if (n.access.role.equals(TableAccess.WRITE)) {
                    nodes.add(n);
                }
            }
        }
        ex.nodes = nodes;
    }

    private static boolean hasWrite(List<Node> nodes) {
        for (Node n : nodes) {
            if (n.access.role.equals(TableAccess.WRITE)) {
                return true;
            }
        }
        return false;
    }

    void accumUpdates(long id, scala.collection.Iterable<Tuple2<Object, Object>> updates) {
        Execution ex = executions.get(id);
        if (ex == null) {
            return;
        }
        for (Tuple2<Object, Object> kv : Scala.list(updates)) {
            if (ex.values.size() < MAX_VALUES && kv._1() instanceof Number && kv._2() instanceof Number) {
                ex.values.put(((Number) kv._1()).longValue(), ((Number) kv._2()).longValue()); // the last value
            }
        }
    }

    /** The execution's accesses with the figures the log posted; forgets it. */
    List<TableAccess> end(long id) {
        Execution ex = executions.remove(id);
        List<TableAccess> out = new ArrayList<>();
        if (ex == null) {
            return out;
        }
        boolean stagedScan = false; // Iceberg 1.12 logs the staged scan of a rewrite; 1.10 a plain one
        for (Node n : ex.nodes) {
            stagedScan |= n.staged;
            TableAccess a = n.access;
            a.files = value(ex, n.filesAcc);
            a.bytes = value(ex, n.bytesAcc);
            a.rows = sum(ex, n.rowsAccs);
            a.partitions = value(ex, n.partsAcc);
            if (a.role.equals(TableAccess.WRITE) && (a.files >= 0 || a.bytes >= 0 || a.rows >= 0)) {
                a.metricsSource = "plan";
            }
            String key = a.table.isEmpty() ? "" : a.catalog + "." + a.table;
            if (!key.isEmpty() && !a.location.isEmpty()) {
                locations.put(key, a.location);
            } else if (!key.isEmpty()) {
                a.location = locations.getOrDefault(key, "");
            }
            out.add(a);
        }
        TableAccess.icebergRewrites(out, stagedScan);
        return out;
    }

    private static long value(Execution ex, long acc) {
        Long v = acc < 0 ? null : ex.values.get(acc);
        return v == null ? -1L : v;
    }

    /** The sum of the accumulators' values, or -1 unless there are some and each has one (a part of a sum is none). */
    private static long sum(Execution ex, long[] accs) {
        if (accs.length == 0) {
            return -1L;
        }
        long total = 0;
        for (long acc : accs) {
            long v = value(ex, acc);
            if (v < 0) {
                return -1L;
            }
            total += v;
        }
        return total;
    }

    /** The table nodes of a plan, pre-order (the pre-order index is the node id: the log has no SparkPlan.id). */
    static List<Node> nodes(SparkPlanInfo root, String description) {
        List<Node> out = new ArrayList<>();
        ArrayDeque<SparkPlanInfo> stack = new ArrayDeque<>();
        if (root != null) {
            stack.push(root);
        }
        int index = 0;
        while (!stack.isEmpty() && index < 20_000) {
            SparkPlanInfo node = stack.pop();
            Node n = node(node, index++, description);
            if (n != null) {
                out.add(n);
            }
            List<SparkPlanInfo> children = Scala.list(node.children());
            for (int i = children.size() - 1; i >= 0; i--) {
                stack.push(children.get(i));
            }
        }
        return out;
    }

    static Node node(SparkPlanInfo info, int index, String description) {
        String name = info.nodeName() == null ? "" : info.nodeName();
        String simple = info.simpleString() == null ? "" : info.simpleString();
        Map<String, String> meta = metadata(info);
        Map<String, Long> metrics = new HashMap<>();
        for (SQLMetricInfo m : Scala.list(info.metrics())) {
            metrics.put(m.name(), m.accumulatorId());
        }
        if (name.startsWith("Scan ")) {
            return scan(name, meta, metrics, index);
        }
        if (V2ScanFiles.isBatchScan(name)) {
            return batchScan(name, simple, meta, metrics, index);
        }
        if (name.startsWith("Execute ")) {
            return command(name, simple, metrics, index, description);
        }
        int delta = simple.indexOf("DeltaTableV2(");
        if (delta >= 0 && (name.startsWith("AppendData") || name.startsWith("OverwriteByExpression"))) {
            return deltaV1Fallback(name, simple.substring(delta + "DeltaTableV2(".length()), index);
        }
        String written = simple.contains("IcebergWrite(table=") ? simple
                : V2_WRITES.contains(name) ? arguments(description, name) : ""; // Spark 4.1: only the description
        int write = written.indexOf("IcebergWrite(table=");
        if (write >= 0) {
            Node n = new Node(new TableAccess(index, TableAccess.WRITE, name));
            String rest = written.substring(write + "IcebergWrite(table=".length());
            int comma = rest.indexOf(", format=");
            n.access.qualifiedName(comma >= 0 ? rest.substring(0, comma) : rest, true);
            n.access.format = "iceberg";
            n.access.writeMode = v2Mode(name);
            return n;
        }
        return null;
    }

    private static Node scan(String name, Map<String, String> meta, Map<String, Long> metrics, int index) {
        String[] parts = name.split(" ", 3); // Scan <format> [<catalog.db.table>]
        TableAccess a = new TableAccess(index, TableAccess.READ, name);
        String location = meta.get("Location");
        if (location != null && location.startsWith("DeltaLogFileIndex")) {
            return null; // Delta reading its own log, not a table
        }
        if (parts.length > 1 && parts[1].equals("hive")) {
            a.format = "hive";
        } else if (location == null && meta.get("Format") == null) {
            return null; // not a file scan (Scan ExistingRDD, Scan OneRowRelation…)
        } else {
            boolean delta = location != null && (location.contains("Delta") || location.contains("Tahoe"));
            a.format = delta ? "delta" : TableAccess.format(meta.getOrDefault("Format", parts[1]));
        }
        if (parts.length > 2 && !parts[2].trim().isEmpty()) {
            a.qualifiedName(parts[2].trim(), true);
            if (a.catalog.isEmpty()) {
                a.catalog = "spark_catalog"; // Spark 3.3 names a V1 table without its catalog
            }
        }
        a.location = firstPath(location);
        Node n = new Node(a);
        n.filesAcc = metrics.getOrDefault(PlanWalker.FILES_NUM, -1L);
        n.bytesAcc = metrics.getOrDefault(PlanWalker.FILES_SIZE, -1L);
        return n;
    }

    private static Node batchScan(String name, String simple, Map<String, String> meta, Map<String, Long> metrics,
            int index) {
        TableAccess a = new TableAccess(index, TableAccess.READ, name);
        String table = name.length() > "BatchScan ".length() ? name.substring("BatchScan ".length()).trim() : "";
        if (table.isEmpty() && simple.startsWith("BatchScan ")) {
            int bracket = simple.indexOf('[');
            table = bracket > 10 ? simple.substring(10, bracket).trim() : "";
        }
        boolean staged = simple.contains("IcebergStagedScan(");
        boolean iceberg = simple.contains("(branch=") || simple.contains("IcebergScan") || staged;
        a.format = iceberg ? "iceberg" : TableAccess.format(meta.get("Format"));
        a.qualifiedName(table, iceberg);
        a.location = firstPath(meta.get("Location"));
        Node n = new Node(a);
        n.staged = staged;
        n.filesAcc = metrics.getOrDefault("number of result data files", -1L); // Iceberg's scan report
        n.bytesAcc = metrics.getOrDefault("total data file size (bytes)", -1L);
        return n;
    }

    /** {@code Execute <Command> args…}: file writes, Hive inserts, Delta's commands. */
    private static Node command(String name, String simple, Map<String, Long> metrics, int index,
            String description) {
        String command = name.substring("Execute ".length()).trim();
        String args = simple.startsWith(name) ? simple.substring(name.length()).trim() : "";
        List<String> tokens = split(args);
        TableAccess a = new TableAccess(index, TableAccess.WRITE, name);
        if (command.equals("InsertIntoHadoopFsRelationCommand") || command.equals("InsertIntoHiveTable")
                || command.endsWith("TableAsSelectCommand") && metrics.containsKey("number of written files")) {
            for (int i = 0; i < tokens.size(); i++) {
                String t = tokens.get(i);
                if (i == 0 && command.equals("InsertIntoHadoopFsRelationCommand")) {
                    a.location = t;
                } else if (t.startsWith("`") && a.table.isEmpty()) {
                    a.qualifiedName(t, true);
                } else if (a.writeMode.isEmpty() && isSaveMode(t)) {
                    a.writeMode = TablesLive.mode(t);
                } else if (a.format.isEmpty() && isFormat(t)) {
                    a.format = TableAccess.format(t);
                }
            }
            if (command.contains("Hive")) {
                a.format = "hive";
            }
            if (!a.table.isEmpty() && a.catalog.isEmpty()) {
                a.catalog = "spark_catalog";
            }
            Node n = new Node(a);
            n.filesAcc = metrics.getOrDefault("number of written files", -1L);
            n.bytesAcc = metrics.getOrDefault("written output", -1L);
            n.rowsAccs = new long[] {metrics.getOrDefault("number of output rows", -1L)};
            n.partsAcc = metrics.getOrDefault("number of dynamic part", -1L);
            return n;
        }
        if (command.equals("SaveIntoDataSourceCommand") && args.contains("DeltaDataSource")) {
            a.format = "delta";
            int path = args.indexOf("path -> ");
            if (path >= 0) {
                String rest = args.substring(path + "path -> ".length());
                int end = firstOf(rest, ',', ')');
                a.location = end >= 0 ? rest.substring(0, end) : rest;
            }
            for (String t : tokens) {
                if (isSaveMode(t)) {
                    a.writeMode = TablesLive.mode(t);
                }
            }
            return new Node(a);
        }
        if (command.equals("OptimizeTableCommand")) {
            return optimize(name, description, index);
        }
        if (TablesLive.DELTA_WRITES.contains(command)) {
            a.format = "delta";
            a.writeMode = DELTA_MODES.getOrDefault(command, "");
            deltaTable(a, arguments(description, command));
            Node n = new Node(a);
            Figures figures = DELTA_FIGURES.get(command);
            if (figures != null) {
                n.filesAcc = metrics.getOrDefault(figures.files, -1L);
                n.bytesAcc = metrics.getOrDefault(figures.bytes, -1L);
                n.rowsAccs = new long[figures.rows.length];
                for (int i = 0; i < figures.rows.length; i++) {
                    n.rowsAccs[i] = metrics.getOrDefault(figures.rows[i], -1L);
                }
            }
            return n;
        }
        return null;
    }

    /**
     * Delta's OPTIMIZE: its table is its child's ({@code (2) ResolvedTable\nArguments: <catalog>, db.t,
     * DeltaTableV2(<session>,<location>,Some(CatalogTable(\nCatalog: …\nDatabase: …\nTable: …}); a compaction
     * ({@code optimize}) without figures: the command posts no metric and the log has no commit.
     */
    static Node optimize(String name, String description, int index) {
        String resolved = section(description, "ResolvedTable");
        int delta = resolved.indexOf("DeltaTableV2(");
        Node n = delta >= 0 ? deltaV1Fallback(name, resolved.substring(delta + "DeltaTableV2(".length()), index)
                : new Node(new TableAccess(index, TableAccess.WRITE, name));
        n.access.format = "delta";
        n.access.writeMode = "optimize";
        return n;
    }

    /**
     * A node's arguments in the execution's plan description: the {@code Arguments:} line of its section
     * ({@code (2) MergeIntoCommand\nArguments: …}; {@code (5) AppendData\nInput [2]: […]\nArguments:
     * IcebergWrite(…)}), at most 64 KiB of it, or "".
     */
    static String arguments(String description, String node) {
        String all = section(description, node);
        int end = all.indexOf('\n');
        return end < 0 ? all : all.substring(0, end);
    }

    /**
     * A node's arguments from its {@code Arguments:} line to the end of its section (an argument may print on several
     * lines: a {@code CatalogTable}'s {@code Catalog: …}, {@code Database: …}), at most 64 KiB, or "".
     */
    static String section(String description, String node) {
        String key = ") " + node + "\n";
        int at = description == null ? -1 : description.indexOf(key);
        if (at < 0) {
            return "";
        }
        int header = at + key.length() - 1; // the node's lines, up to the blank line after them
        int sectionEnd = description.indexOf("\n\n", header);
        sectionEnd = sectionEnd < 0 ? description.length() : sectionEnd;
        int start = description.indexOf("\nArguments: ", header);
        if (start < 0 || start >= sectionEnd) {
            return "";
        }
        start += "\nArguments: ".length();
        return description.substring(start, Math.min(sectionEnd, start + MAX_ARGUMENTS));
    }

    /** A Delta command's table: its first backquoted name and its {@code Delta[version=N, <location>]}. */
    static void deltaTable(TableAccess a, String arguments) {
        for (String t : split(arguments)) {
            if (t.startsWith("`") && a.table.isEmpty()) {
                a.qualifiedName(t, true);
            } else if (t.startsWith("Delta[version=") && t.endsWith("]") && a.location.isEmpty()) {
                int comma = t.indexOf(", ");
                a.location = comma > 0 ? t.substring(comma + 2, t.length() - 1).trim() : "";
            }
        }
        if (!a.table.isEmpty() && a.catalog.isEmpty()) {
            a.catalog = "spark_catalog"; // Spark 3.3 names a V1 table without its catalog
        }
    }

    /**
     * {@code AppendDataExecV1 DeltaTableV2(<session>,<path>,Some(CatalogTable(\nCatalog: spark_catalog\nDatabase:
     * default\nTable: t\n…} (a Delta table written through the session catalog): its path and name.
     */
    private static Node deltaV1Fallback(String name, String args, int index) {
        TableAccess a = new TableAccess(index, TableAccess.WRITE, name);
        a.format = "delta";
        a.writeMode = v2Mode(name);
        int first = args.indexOf(',');
        if (first >= 0) {
            String rest = args.substring(first + 1);
            int end = firstOf(rest, ',', ')');
            a.location = (end >= 0 ? rest.substring(0, end) : rest).trim();
        }
        String catalog = line(args, "\nCatalog: ");
        String db = line(args, "\nDatabase: ");
        String table = line(args, "\nTable: ");
        if (!table.isEmpty()) {
            a.catalog = catalog.isEmpty() ? "spark_catalog" : catalog;
            a.table = db.isEmpty() ? table : db + "." + table;
        }
        return new Node(a);
    }

    private static String line(String text, String key) {
        int at = text.indexOf(key);
        if (at < 0) {
            return "";
        }
        int start = at + key.length();
        int end = text.indexOf('\n', start);
        return (end >= 0 ? text.substring(start, end) : text.substring(start)).trim();
    }

    private static String v2Mode(String name) {
        return name.startsWith("Append") ? "append" : name.startsWith("Overwrite") ? "overwrite"
                : name.startsWith("ReplaceData") ? "replace data" : name.startsWith("WriteDelta") ? "write delta"
                : name.contains("CreateTableAsSelect") ? "create" : name.contains("ReplaceTableAsSelect") ? "replace"
                : "";
    }

    private static boolean isSaveMode(String token) {
        for (String m : SAVE_MODES) {
            if (m.equals(token)) {
                return true;
            }
        }
        return false;
    }

    private static boolean isFormat(String token) {
        if (token.endsWith("FileFormat") || token.contains("FileFormat@")) {
            return true;
        }
        String f = TableAccess.format(token);
        return !f.equals("other") && token.indexOf(' ') < 0 && token.indexOf('/') < 0 && token.indexOf('[') < 0
                && token.length() <= 12;
    }

    /** The first path of a file index's description: {@code InMemoryFileIndex(2 paths)[file:/a, file:/b]}. */
    static String firstPath(String location) {
        if (location == null) {
            return "";
        }
        int open = location.indexOf('[');
        String rest = open >= 0 ? location.substring(open + 1) : location;
        int end = firstOf(rest, ',', ']');
        return (end >= 0 ? rest.substring(0, end) : rest).trim();
    }

    private static int firstOf(String s, char a, char b) {
        int i = s.indexOf(a);
        int j = s.indexOf(b);
        return i < 0 ? j : (j < 0 ? i : Math.min(i, j));
    }

    /** A simple string's arguments split at top-level ", " (not inside brackets, parentheses or backquotes). */
    static List<String> split(String args) {
        List<String> out = new ArrayList<>();
        int depth = 0;
        boolean quoted = false;
        int start = 0;
        for (int i = 0; i < args.length(); i++) {
            char c = args.charAt(i);
            if (c == '`') {
                quoted = !quoted;
            } else if (!quoted && (c == '[' || c == '(' || c == '{')) {
                depth++;
            } else if (!quoted && (c == ']' || c == ')' || c == '}')) {
                depth = Math.max(0, depth - 1);
            } else if (!quoted && depth == 0 && c == ',' && i + 1 < args.length() && args.charAt(i + 1) == ' ') {
                out.add(args.substring(start, i).trim());
                start = i + 2;
                i++;
            }
        }
        if (start < args.length()) {
            out.add(args.substring(start).trim());
        }
        return out;
    }

    private static Map<String, String> metadata(SparkPlanInfo info) {
        Map<String, String> out = new HashMap<>();
        for (Tuple2<String, String> kv : Scala.list(info.metadata())) {
            out.put(kv._1(), kv._2());
        }
        return out;
    }
}
