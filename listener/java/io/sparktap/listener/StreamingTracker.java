package io.sparktap.listener;

import java.io.IOException;
import java.time.Instant;
import java.time.format.DateTimeParseException;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.function.Consumer;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import org.apache.spark.scheduler.SparkListenerEvent;
import org.apache.spark.sql.streaming.SinkProgress;
import org.apache.spark.sql.streaming.SourceProgress;
import org.apache.spark.sql.streaming.StateOperatorProgress;
import org.apache.spark.sql.streaming.StreamingQueryListener;
import org.apache.spark.sql.streaming.StreamingQueryProgress;

/**
 * Structured Streaming queries, from the {@code StreamingQueryListener} events Spark posts to the listener bus
 * (they reach every SparkListener's {@code onOtherEvent}: no listener of our own to register, no extra conf).
 *
 * <p>Progress events are rate-limited per query ({@code spark.sparktap.streaming.progressIntervalMs}): one closer
 * than that to the previous one sent is skipped and counted in the next one sent ({@code progress_skipped}).
 * Offsets are kept as Spark writes them (JSON text, truncated); a source's backlog is derived where its latest and
 * end offsets are JSON objects of the same numeric positions (Kafka, sparktap-kafka, rate sources).
 */
final class StreamingTracker {
    private static final int MAX_QUERIES = 1000;
    private static final int MAX_OFFSET_CHARS = 2000;
    private static final ObjectMapper JSON = new ObjectMapper();

    private final Redactor redactor;
    private final Consumer<Event> sink;
    private final long minIntervalMs;
    /** query id -> {last sent at (ms), progress events skipped since} */
    private final Map<String, Throttle> queries = new LinkedHashMap<>();
    private final Map<String, String> names = new LinkedHashMap<>();

    StreamingTracker(Redactor redactor, long minIntervalMs, Consumer<Event> sink) {
        this.redactor = redactor;
        this.minIntervalMs = minIntervalMs;
        this.sink = sink;
    }

    /** Handle the event if it is a streaming query event; false otherwise. */
    boolean handle(SparkListenerEvent event) throws ReflectiveOperationException {
        if (event instanceof StreamingQueryListener.QueryProgressEvent) {
            progress(((StreamingQueryListener.QueryProgressEvent) event).progress());
        } else if (event instanceof StreamingQueryListener.QueryStartedEvent) {
            started((StreamingQueryListener.QueryStartedEvent) event);
        } else if (event instanceof StreamingQueryListener.QueryTerminatedEvent) {
            terminated((StreamingQueryListener.QueryTerminatedEvent) event);
        } else {
            return false;
        }
        return true;
    }

    private void started(StreamingQueryListener.QueryStartedEvent e) {
        String id = e.id().toString();
        String runId = e.runId().toString();
        String name = redactor.text(e.name(), 200);
        remember(id, name);
        queries.put(id, new Throttle());
        sink.accept(Event.of(EventType.STREAMING_QUERY_START, epochMs(e.timestamp()), out -> {
            out.str("query_id", id);
            out.str("run_id", runId);
            out.opt("name", name);
        }));
    }

    private void terminated(StreamingQueryListener.QueryTerminatedEvent e) throws ReflectiveOperationException {
        String id = e.id().toString();
        String runId = e.runId().toString();
        String name = names.remove(id);
        Throttle state = queries.remove(id);
        long skipped = state == null ? 0L : state.skipped;
        String exception = e.exception().isDefined() ? redactor.text(e.exception().get(), 1000) : null;
        Object errorClass = Scala.optionalValue(e, "errorClassOnException"); // Spark 3.5+
        String errorClassText = errorClass == null ? null : redactor.text(errorClass.toString(), 200);
        sink.accept(Event.of(EventType.STREAMING_QUERY_END, Clock.now(), out -> {
            out.str("query_id", id);
            out.str("run_id", runId);
            out.opt("name", name);
            out.opt("exception", exception);
            out.opt("error_class", errorClassText);
            out.count("progress_skipped", skipped);
        }));
    }

    private void progress(StreamingQueryProgress p) {
        String id = p.id().toString();
        long now = Clock.now();
        Throttle state = queries.get(id);
        if (state == null) {
            state = new Throttle();
            queries.put(id, state);
            trim();
        }
        if (minIntervalMs > 0 && state.lastSentMs > 0 && now - state.lastSentMs < minIntervalMs) {
            state.skipped++;
            return;
        }
        long skipped = state.skipped;
        state.lastSentMs = now;
        state.skipped = 0;
        String runId = p.runId().toString();
        String name = redactor.text(p.name(), 200);
        remember(id, name);
        long batchId = p.batchId();
        long batchTime = epochMs(p.timestamp());
        long inputRows = p.numInputRows();
        double inputRate = p.inputRowsPerSecond();
        double processedRate = p.processedRowsPerSecond();
        Map<String, Long> durations = new TreeMap<>();
        if (p.durationMs() != null) {
            for (Map.Entry<String, Long> d : p.durationMs().entrySet()) {
                if (d.getValue() != null) {
                    durations.put(d.getKey(), d.getValue());
                }
            }
        }
        Map<String, String> eventTime = p.eventTime();
        String watermark = eventTime == null ? null : eventTime.get("watermark");
        long watermarkMs = watermark == null ? -1L : epochMs(watermark);
        List<Source> sources = new ArrayList<>();
        for (SourceProgress s : p.sources()) {
            sources.add(new Source(s, redactor));
        }
        List<StateOperator> states = new ArrayList<>();
        for (StateOperatorProgress op : p.stateOperators()) {
            states.add(new StateOperator(op));
        }
        SinkProgress sinkProgress = p.sink();
        String sinkDescription = sinkProgress == null ? null : redactor.text(sinkProgress.description(), 500);
        long sinkRows = sinkProgress == null ? -1L : sinkProgress.numOutputRows();
        sink.accept(Event.of(EventType.STREAMING_QUERY_PROGRESS, batchTime > 0 ? batchTime : now, out -> {
            out.str("query_id", id);
            out.str("run_id", runId);
            out.opt("name", name);
            out.num("batch_id", batchId);
            out.count("num_input_rows", inputRows);
            out.real("input_rows_per_second", inputRate);
            out.real("processed_rows_per_second", processedRate);
            out.longMap("duration_ms", durations);
            out.optId("watermark_ms", watermarkMs);
            if (!sources.isEmpty()) {
                out.gen().writeArrayFieldStart("sources");
                for (Source s : sources) {
                    s.write(out);
                }
                out.gen().writeEndArray();
            }
            if (!states.isEmpty()) {
                out.gen().writeArrayFieldStart("state_operators");
                for (StateOperator op : states) {
                    op.write(out);
                }
                out.gen().writeEndArray();
            }
            out.opt("sink", sinkDescription);
            out.optId("sink_num_output_rows", sinkRows);
            out.count("progress_skipped", skipped);
        }));
    }

    private void remember(String id, String name) {
        if (name != null) {
            names.put(id, name);
        }
        trim();
    }

    private void trim() {
        trim(queries);
        trim(names);
    }

    private static void trim(Map<String, ?> map) {
        Iterator<String> it = map.keySet().iterator();
        while (map.size() > MAX_QUERIES && it.hasNext()) {
            it.next();
            it.remove(); // the oldest query first
        }
    }

    /** Spark's ISO-8601 timestamps ("2026-11-23T22:40:01.123Z") as epoch milliseconds; -1 when unparsable. */
    static long epochMs(String iso) {
        if (iso == null || iso.isEmpty()) {
            return -1L;
        }
        try {
            return Instant.parse(iso).toEpochMilli();
        } catch (DateTimeParseException e) {
            return -1L;
        }
    }

    /** One source of a progress event, copied out of Spark's object. */
    static final class Source {
        final String description;
        final String startOffset;
        final String endOffset;
        final String latestOffset;
        final long numInputRows;
        final double inputRate;
        final double processedRate;
        final long backlog;

        Source(SourceProgress s, Redactor redactor) {
            description = redactor.text(s.description(), 500);
            startOffset = Redactor.truncate(s.startOffset(), MAX_OFFSET_CHARS);
            endOffset = Redactor.truncate(s.endOffset(), MAX_OFFSET_CHARS);
            latestOffset = Redactor.truncate(s.latestOffset(), MAX_OFFSET_CHARS);
            numInputRows = s.numInputRows();
            inputRate = s.inputRowsPerSecond();
            processedRate = s.processedRowsPerSecond();
            backlog = backlog(s.endOffset(), s.latestOffset());
        }

        void write(JsonOut out) throws IOException {
            out.gen().writeStartObject();
            out.str("description", description);
            out.str("start_offset", startOffset);
            out.str("end_offset", endOffset);
            out.str("latest_offset", latestOffset);
            out.count("num_input_rows", numInputRows);
            out.real("input_rows_per_second", inputRate);
            out.real("processed_rows_per_second", processedRate);
            out.optId("backlog", backlog);
            out.gen().writeEndObject();
        }
    }

    /**
     * Positions the source has not read yet: the sum over every numeric position of {@code latest - end}, when both
     * offsets are JSON with the same shape ({@code {"topic":{"0":120}}}, {@code {"0":120}}, {@code 120}); else -1.
     */
    static long backlog(String end, String latest) {
        if (end == null || latest == null) {
            return -1L;
        }
        try {
            return walk(JSON.readTree(end), JSON.readTree(latest));
        } catch (IOException | RuntimeException e) {
            return -1L;
        }
    }

    /** Positions from {@code end} to {@code latest}, summed over matching numeric leaves; -1 if they do not match. */
    private static long walk(JsonNode end, JsonNode latest) {
        if (end == null || latest == null) {
            return -1L;
        }
        if (end.isIntegralNumber() && latest.isIntegralNumber()) {
            return Math.max(0L, latest.asLong() - end.asLong());
        }
        if (end.isObject() && latest.isObject() && latest.size() > 0) {
            long sum = 0L;
            Iterator<Map.Entry<String, JsonNode>> fields = latest.fields();
            while (fields.hasNext()) {
                Map.Entry<String, JsonNode> f = fields.next();
                long part = walk(end.get(f.getKey()), f.getValue());
                if (part < 0) {
                    return -1L;
                }
                sum += part;
            }
            return sum;
        }
        return -1L;
    }

    /** Per query: when its last progress event was sent, and how many were skipped since (progressIntervalMs). */
    static final class Throttle {
        long lastSentMs;
        long skipped;
    }

    /** One stateful operator of a progress event, copied out of Spark's object. */
    static final class StateOperator {
        final String name;
        final long rowsTotal;
        final long rowsUpdated;
        final long memoryUsedBytes;
        final long rowsDroppedByWatermark;
        final long rowsRemoved;

        StateOperator(StateOperatorProgress op) {
            name = op.operatorName() == null ? "" : op.operatorName();
            rowsTotal = op.numRowsTotal();
            rowsUpdated = op.numRowsUpdated();
            memoryUsedBytes = op.memoryUsedBytes();
            rowsDroppedByWatermark = op.numRowsDroppedByWatermark();
            rowsRemoved = op.numRowsRemoved();
        }

        void write(JsonOut out) throws IOException {
            out.gen().writeStartObject();
            out.str("operator_name", name);
            out.count("num_rows_total", rowsTotal);
            out.count("num_rows_updated", rowsUpdated);
            out.count("memory_used_bytes", memoryUsedBytes);
            out.count("num_rows_dropped_by_watermark", rowsDroppedByWatermark);
            out.count("num_rows_removed", rowsRemoved);
            out.gen().writeEndObject();
        }
    }
}
