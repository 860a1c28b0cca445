package io.sparktap.listener;

import java.io.IOException;
import java.util.List;
import java.util.Locale;

/**
 * One {@code table_access}: a table or bare path a scan or write node of a SQL execution touched (schemas/
 * table_events.py). Built live from the executed plan ({@link TablesLive}) or from the plan an event log recorded
 * ({@link TablesReplay}); written by {@link #emit}, which applies the per-execution cap and the name path.
 *
 * <p>Locations are untrusted: a path such as {@code s3a://AKIA…:secret@bucket/p?X-Amz-Signature=…} carries its
 * credentials in the user info and a presigned token in the query string. {@link #scrubLocation} drops both (and the
 * fragment) before the Redactor sees the rest.
 */
final class TableAccess {
    static final String READ = "read";
    static final String WRITE = "write";
    /** Schemes whose user-info position holds the storage container, not a credential. */
    private static final java.util.Set<String> AZURE = new java.util.HashSet<>(
            java.util.Arrays.asList("abfs", "abfss", "wasb", "wasbs"));

    final int nodeId;
    final String role;
    final String operator;
    String catalog = "";
    String table = "";
    String format = "";
    String location = "";
    String writeMode = "";
    long files = -1L;
    long bytes = -1L;
    long rows = -1L;
    long partitions = -1L;
    String metricsSource = "";
    String version = "";

    TableAccess(int nodeId, String role, String operator) {
        this.nodeId = nodeId;
        this.role = role;
        this.operator = operator == null ? "" : operator;
    }

    /** A qualified name split into catalog and table: {@code [catalog, db.t]} when it has three or more parts. */
    void qualifiedName(String name, boolean firstPartIsCatalog) {
        if (name == null || name.isEmpty()) {
            return;
        }
        String clean = unquote(name);
        int dot = clean.indexOf('.');
        if (firstPartIsCatalog && dot > 0 && clean.indexOf('.', dot + 1) > 0) {
            catalog = clean.substring(0, dot);
            table = clean.substring(dot + 1);
        } else {
            table = clean;
        }
    }

    /** {@code `spark_catalog`.`db`.`t`} -> {@code spark_catalog.db.t} (a doubled backquote is one backquote). */
    static String unquote(String name) {
        if (name.indexOf('`') < 0) {
            return name;
        }
        StringBuilder out = new StringBuilder(name.length());
        for (int i = 0; i < name.length(); i++) {
            char c = name.charAt(i);
            if (c == '`') {
                if (i + 1 < name.length() && name.charAt(i + 1) == '`') {
                    out.append('`');
                    i++;
                }
                continue;
            }
            out.append(c);
        }
        return out.toString();
    }

    /**
     * A location without user info, query string or fragment: {@code scheme://user:secret@host/p?sig=…#f} ->
     * {@code scheme://host/p}. An {@code @} before the first {@code /} of the authority, or one whose prefix holds a
     * {@code :} (an AWS secret key may itself hold {@code /}), ends user info, except Azure's
     * {@code abfss://container@account} (a container, not a credential); a bare path loses only its query and
     * fragment.
     */
    static String scrubLocation(String raw) {
        if (raw == null) {
            return "";
        }
        String value = raw.trim();
        int cut = firstOf(value, '?', '#');
        if (cut >= 0) {
            value = value.substring(0, cut);
        }
        int sep = value.indexOf("://");
        if (sep > 0 && isScheme(value.substring(0, sep))) {
            String rest = value.substring(sep + 3);
            int at = rest.lastIndexOf('@');
            if (at >= 0) {
                String before = rest.substring(0, at);
                boolean container = AZURE.contains(value.substring(0, sep).toLowerCase(Locale.ROOT))
                        && before.indexOf(':') < 0 && before.indexOf('/') < 0; // abfss://container@account/…
                if (!container && (before.indexOf('/') < 0 || before.indexOf(':') >= 0)) {
                    rest = rest.substring(at + 1);
                }
            }
            value = value.substring(0, sep + 3) + rest;
        }
        return value;
    }

    private static int firstOf(String s, char a, char b) {
        int i = s.indexOf(a);
        int j = s.indexOf(b);
        return i < 0 ? j : (j < 0 ? i : Math.min(i, j));
    }

    private static boolean isScheme(String s) {
        if (s.isEmpty() || !Character.isLetter(s.charAt(0))) {
            return false;
        }
        for (int i = 1; i < s.length(); i++) {
            char c = s.charAt(i);
            if (!(Character.isLetterOrDigit(c) || c == '+' || c == '-' || c == '.' || c == ':')) { // jdbc:pg
                return false;
            }
        }
        return true;
    }

    /**
     * The contract's format (delta, iceberg, hudi, parquet, orc, csv, json, text, avro, hive, jdbc, other) of what a
     * plan calls it: a provider ("delta"), a file format's name or class ("Parquet", "DeltaParquetFileFormat",
     * "HiveFileFormat"), Iceberg's "iceberg/parquet"; "" for nothing.
     */
    static String format(String raw) {
        if (raw == null || raw.trim().isEmpty()) {
            return "";
        }
        String s = raw.toLowerCase(Locale.ROOT);
        String[] known = {"delta", "iceberg", "hudi", "hive", "parquet", "orc", "csv", "json", "avro", "jdbc"};
        for (String k : known) {
            if (s.contains(k)) {
                return k;
            }
        }
        if (s.contains("text")) {
            return "text";
        }
        return "other";
    }

    /** The catalog Iceberg 1.12 writes a compacted file group through (Iceberg 1.10: a table named …#rewrite). */
    static final String ICEBERG_REWRITE_CATALOG = "default_rewrite_catalog";

    /**
     * Iceberg's {@code rewrite_data_files} writes each file group it compacts to a staged file set (Iceberg 1.10: a
     * table named {@code <group id>#rewrite}; 1.12: the group id in {@code default_rewrite_catalog}), in an execution
     * that scans that group of the table: such a write is the table's compaction ({@code rewrite_data_files},
     * schemas/rollups.py's COMPACTION_MODES), named after the table its execution read, never after the file set (a
     * new name per compaction). Its figures are the procedure's commit, made after the execution: none here.
     * {@code stagedScan}: the execution's scan is known to read a staged file set (a replayed Iceberg 1.12 log's
     * {@code IcebergStagedScan}, whose write names the table itself).
     */
    static void icebergRewrites(List<TableAccess> accesses, boolean stagedScan) {
        for (TableAccess w : accesses) {
            boolean staged = stagedScan || w.table.endsWith("#rewrite") || w.catalog.equals(ICEBERG_REWRITE_CATALOG);
            if (!w.role.equals(WRITE) || !w.format.equals("iceberg") || !staged) {
                continue;
            }
            w.catalog = "";
            w.table = "";
            w.writeMode = "rewrite_data_files";
            for (TableAccess r : accesses) {
                if (r.role.equals(READ) && r.format.equals("iceberg") && !r.table.isEmpty()) {
                    w.catalog = r.catalog;
                    w.table = r.table;
                    w.location = r.location;
                    break;
                }
            }
        }
    }

    /** The accesses of one execution as events: at most {@code max}, each with its index and the total. */
    static void emit(List<TableAccess> accesses, long executionId, long time, int max, Redactor redactor,
            java.util.function.Consumer<Event> sink) {
        int of = accesses.size();
        for (int i = 0; i < of && i < max; i++) {
            TableAccess a = accesses.get(i);
            int index = i;
            String location = redactor.text(scrubLocation(a.location), 1000);
            sink.accept(Event.of(EventType.TABLE_ACCESS, time, out -> {
                out.num("execution_id", executionId);
                out.num("node_id", Math.max(-1, a.nodeId));
                out.str("role", a.role);
                out.str("operator", Redactor.name(a.operator));
                out.str("catalog", Redactor.name(a.catalog));
                out.str("table", Redactor.name(a.table));
                out.str("format", a.format);
                out.str("location", location);
                out.str("write_mode", Redactor.name(a.writeMode));
                optCount(out, "files", a.files);
                optCount(out, "bytes", a.bytes);
                optCount(out, "rows", a.rows);
                optCount(out, "partitions", a.partitions);
                out.str("metrics_source", a.metricsSource);
                out.str("version", Redactor.name(a.version));
                out.num("index", index);
                out.num("of", of);
            }));
        }
    }

    private static void optCount(JsonOut out, String name, long value) throws IOException {
        if (value >= 0) {
            out.num(name, value);
        }
    }
}
