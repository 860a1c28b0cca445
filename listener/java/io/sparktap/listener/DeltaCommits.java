package io.sparktap.listener;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

/**
 * What a Delta write committed, read from the table's own log without Delta on the class path: each commit is
 * {@code <table>/_delta_log/<20-digit version>.json}, one JSON action per line, one of them {@code commitInfo} with
 * the commit's {@code timestamp}, {@code operation}, {@code operationParameters} and {@code operationMetrics} (the
 * figures {@code DESCRIBE HISTORY} shows: {@code numFiles}, {@code numOutputBytes}, {@code numOutputRows} for a write;
 * {@code numTargetFilesAdded}, {@code numTargetBytesAdded} … for MERGE, {@code numAddedFiles}, {@code numAddedBytes}
 * for UPDATE and DELETE; rows: {@link #rowsWritten}).
 *
 * <p>A commit belongs to an execution when its {@code timestamp} (the driver's clock at commit) lies within the
 * execution's start and end: Delta's commitInfo names no application, and this listener runs in that driver. The
 * newest commits are read first and the walk stops at the first older than the execution; {@link #seen} keeps a
 * nested execution from counting its parent's commit twice.
 */
final class DeltaCommits {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final int MAX_COMMITS_READ = 50;
    private static final int MAX_SEEN = 10_000;
    private final Map<String, Boolean> seen = new LinkedHashMap<String, Boolean>(64, 0.75f, false) {
        @Override
        protected boolean removeEldestEntry(Map.Entry<String, Boolean> eldest) {
            return size() > MAX_SEEN;
        }
    };

    /** The commits of {@code location}'s log within [start, end] ms, each as a filled copy of {@code base}. */
    List<TableAccess> commits(TableAccess base, Configuration conf, long startMs, long endMs) throws Exception {
        List<TableAccess> out = new ArrayList<>();
        Path log = new Path(base.location, "_delta_log");
        FileSystem fs = log.getFileSystem(conf);
        if (!fs.exists(log)) {
            return out;
        }
        List<Long> versions = new ArrayList<>();
        for (FileStatus st : fs.listStatus(log)) {
            String name = st.getPath().getName();
            if (name.length() == 25 && name.endsWith(".json") && isDigits(name.substring(0, 20))) {
                versions.add(Long.parseLong(name.substring(0, 20)));
            }
        }
        versions.sort(java.util.Collections.reverseOrder());
        int read = 0;
        for (long version : versions) {
            if (read++ >= MAX_COMMITS_READ) {
                break;
            }
            JsonNode info = commitInfo(fs, new Path(log, String.format(Locale.ROOT, "%020d.json", version)));
            if (info == null) {
                continue;
            }
            long ts = info.path("timestamp").asLong(-1L);
            if (ts < startMs) {
                break;
            }
            String key = base.location + '#' + version;
            if (ts > endMs || seen.containsKey(key)) {
                continue;
            }
            seen.put(key, Boolean.TRUE);
            out.add(0, fill(base, info, version));
        }
        return out;
    }

    private static TableAccess fill(TableAccess base, JsonNode info, long version) {
        TableAccess a = new TableAccess(base.nodeId, TableAccess.WRITE, base.operator);
        a.catalog = base.catalog;
        a.table = base.table;
        a.format = "delta";
        a.location = base.location;
        JsonNode m = info.path("operationMetrics");
        a.files = first(m, "numFiles", "numTargetFilesAdded", "numAddedFiles");
        a.bytes = first(m, "numOutputBytes", "numTargetBytesAdded", "numAddedBytes");
        a.rows = rowsWritten(m);
        a.metricsSource = "delta";
        a.version = Long.toString(version);
        a.writeMode = mode(info);
        return a;
    }

    /**
     * Rows in the files the commit added: a write's or a MERGE's {@code numOutputRows}; an UPDATE rewrites its updated
     * and its copied rows, a DELETE its copied ones (the deleted are the rows it leaves out).
     */
    static long rowsWritten(JsonNode m) {
        long output = first(m, "numOutputRows");
        if (output >= 0) {
            return output;
        }
        long updated = first(m, "numUpdatedRows");
        long copied = first(m, "numCopiedRows");
        if (updated >= 0) {
            return updated + Math.max(copied, 0L);
        }
        return copied >= 0 ? copied : first(m, "numTargetRowsInserted");
    }

    /** append / overwrite for a WRITE (its mode), else the operation: create table as select, merge, update … */
    static String mode(JsonNode info) {
        String op = info.path("operation").asText("").toLowerCase(Locale.ROOT);
        String mode = info.path("operationParameters").path("mode").asText("").toLowerCase(Locale.ROOT);
        if ((op.equals("write") || op.equals("streaming update")) && !mode.isEmpty()) {
            return mode.equals("errorifexists") ? "append" : mode;
        }
        if (op.contains("create or replace") || op.startsWith("replace")) {
            return "replace";
        }
        if (op.startsWith("create")) {
            return "create";
        }
        return op;
    }

    private static long first(JsonNode metrics, String... keys) {
        for (String k : keys) {
            JsonNode v = metrics.get(k);
            if (v != null) {
                try {
                    return Long.parseLong(v.asText().trim()); // Delta writes its metrics as strings
                } catch (NumberFormatException e) {
                    return -1L;
                }
            }
        }
        return -1L;
    }

    private static JsonNode commitInfo(FileSystem fs, Path file) throws Exception {
        try (BufferedReader in = new BufferedReader(new InputStreamReader(fs.open(file), StandardCharsets.UTF_8))) {
            for (String line = in.readLine(); line != null; line = in.readLine()) {
                if (line.contains("\"commitInfo\"")) {
                    JsonNode node = JSON.readTree(line).get("commitInfo");
                    if (node != null) {
                        return node;
                    }
                }
            }
        }
        return null;
    }

    private static boolean isDigits(String s) {
        for (int i = 0; i < s.length(); i++) {
            if (!Character.isDigit(s.charAt(i))) {
                return false;
            }
        }
        return true;
    }
}
