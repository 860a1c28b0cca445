package io.sparktap.listener;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.Map;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import org.junit.jupiter.api.Test;

/** One event, one line of compact JSON: the envelope, defaults left out, escaping, recovery after a failed body. */
class JsonOutTest {
    private static final ObjectMapper MAPPER = new ObjectMapper();

    private static String line(JsonOut out) {
        return new String(out.array(), 0, out.size(), StandardCharsets.UTF_8);
    }

    private static Event event(long seq, Event.Body body) {
        Event e = Event.of(EventType.JOB_START, 1_700_000_000_123L, body);
        e.seq = seq;
        return e;
    }

    @Test
    void envelopeAndFieldsOnOneLine() throws IOException {
        JsonOut out = new JsonOut(new JsonOut.Envelope("prod-eu", "app-1", "", "etl \"daily\"\n"));
        Map<String, String> props = new LinkedHashMap<>();
        props.put("spark.master", "local[2]");
        out.event(event(7, o -> {
            o.num("job_id", 3);
            o.count("zero_is_left_out", 0);
            o.count("negative_counts_as_zero", -5);
            o.opt("absent", null);
            o.optId("unknown_id", -1);
            o.optId("sql_execution_id", 0);
            o.real("nan_is_left_out", Double.NaN);
            o.real("rate", 0.5);
            o.flag("false_is_left_out", false);
            o.flag("speculative", true);
            o.ints("stage_ids", new int[] {1, 2});
            o.ints("empty_is_left_out", new int[0]);
            o.strings("names", Arrays.asList("a", "b\u0001"));
            o.stringMap("properties", props);
        }));
        String text = line(out);
        assertTrue(text.endsWith("}\n") && text.indexOf('\n') == text.length() - 1, text);
        JsonNode n = MAPPER.readTree(text);
        assertEquals(1, n.get("schema_version").asInt());
        assertEquals("job_start", n.get("event_type").asText());
        assertEquals("prod-eu", n.get("cluster").asText());
        assertEquals("app-1", n.get("app_id").asText());
        assertFalse(n.has("app_attempt"));
        assertEquals("etl \"daily\"\n", n.get("app_name").asText());
        assertEquals(7, n.get("seq").asLong());
        assertEquals(1_700_000_000_123L, n.get("event_time_ms").asLong());
        assertTrue(n.get("emitted_at_ms").asLong() > 1_700_000_000_000L);
        assertEquals(3, n.get("job_id").asInt());
        assertEquals(0, n.get("negative_counts_as_zero").asInt());
        assertEquals(0, n.get("sql_execution_id").asInt());
        assertEquals(0.5, n.get("rate").asDouble());
        assertTrue(n.get("speculative").asBoolean());
        assertEquals("[1,2]", n.get("stage_ids").toString());
        assertEquals("b\u0001", n.get("names").get(1).asText());
        assertEquals("local[2]", n.get("properties").get("spark.master").asText());
        for (String left : new String[] {"zero_is_left_out", "absent", "unknown_id", "nan_is_left_out",
            "false_is_left_out", "empty_is_left_out"}) {
            assertFalse(n.has(left), left);
        }
        assertEquals(16, n.size());
    }

    @Test
    void attemptIsWrittenWhenKnown() throws IOException {
        JsonOut out = new JsonOut(new JsonOut.Envelope("c", "application_1_0001", "2", "n"));
        out.event(event(1, o -> { }));
        assertEquals("2", MAPPER.readTree(line(out)).get("app_attempt").asText());
    }

    @Test
    void aBodyThatFailsLeavesNoHalfObjectAndTheNextEventIsWellFormed() throws IOException {
        JsonOut out = new JsonOut(new JsonOut.Envelope("c", "a", "", "n"));
        IllegalStateException boom = new IllegalStateException("boom");
        IllegalStateException thrown = assertThrows(IllegalStateException.class, () -> out.event(event(1, o -> {
            o.num("job_id", 1);
            throw boom;
        })));
        assertSame(boom, thrown);
        out.event(event(2, o -> o.num("job_id", 2)));
        JsonNode n = MAPPER.readTree(line(out));
        assertEquals(2, n.get("seq").asLong());
        assertEquals(2, n.get("job_id").asInt());
    }

    @Test
    void aHugeEventsBufferIsNotKeptForever() throws IOException {
        JsonOut out = new JsonOut(new JsonOut.Envelope("c", "a", "", "n"));
        char[] big = new char[2 << 20];
        Arrays.fill(big, 'x');
        String huge = new String(big);
        out.event(event(1, o -> o.str("plan", huge)));
        assertTrue(out.array().length > (2 << 20));
        out.event(event(2, o -> o.str("plan", "small")));
        assertEquals(16 * 1024, out.array().length);
        assertEquals("small", MAPPER.readTree(line(out)).get("plan").asText());
    }
}
