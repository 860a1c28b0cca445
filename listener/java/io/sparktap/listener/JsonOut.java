package io.sparktap.listener;

import java.io.IOException;
import java.io.OutputStream;
import java.util.Arrays;
import java.util.List;
import java.util.Map;

import com.fasterxml.jackson.core.JsonEncoding;
import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonGenerator;

/**
 * Compact JSON for one event at a time (Jackson streaming), into a reusable byte buffer.
 *
 * <p>Each event is serialised completely before any byte reaches the relay, so a failure while writing one event
 * can never leave half an object in the NDJSON stream. Fields equal to the contract's default (zero, false,
 * null) are left out to keep messages small; readers fill the defaults.
 */
final class JsonOut {
    static final JsonFactory FACTORY = JsonFactory.builder().build();
    static final int SCHEMA_VERSION = 1;

    /** The envelope fields that are the same on every event of this application attempt. */
    static final class Envelope {
        final String cluster;
        final String appId;
        final String appAttempt;
        final String appName;

        Envelope(String cluster, String appId, String appAttempt, String appName) {
            this.cluster = cluster;
            this.appId = appId;
            this.appAttempt = appAttempt == null ? "" : appAttempt;
            this.appName = appName;
        }
    }

    private final Envelope envelope;
    private final Buffer buffer = new Buffer(16 * 1024);
    private JsonGenerator gen;

    JsonOut(Envelope envelope) throws IOException {
        this.envelope = envelope;
        newGenerator();
    }

    private void newGenerator() throws IOException {
        gen = FACTORY.createGenerator(buffer, JsonEncoding.UTF8);
        gen.disable(JsonGenerator.Feature.AUTO_CLOSE_TARGET);
        gen.disable(JsonGenerator.Feature.FLUSH_PASSED_TO_STREAM);
        gen.setRootValueSeparator(null); // one object per line: no " " before the next root value
    }

    /** Serialise one event as a single line (ending in '\n'); then read it with {@link #array}/{@link #size}. */
    void event(Event e) throws IOException {
        buffer.reset();
        try {
            gen.writeStartObject();
            gen.writeNumberField("schema_version", SCHEMA_VERSION);
            gen.writeFieldName("event_type");
            gen.writeString(e.type.serialized);
            gen.writeStringField("cluster", envelope.cluster);
            gen.writeStringField("app_id", envelope.appId);
            if (!envelope.appAttempt.isEmpty()) {
                gen.writeStringField("app_attempt", envelope.appAttempt);
            }
            gen.writeStringField("app_name", envelope.appName);
            gen.writeNumberField("seq", e.seq);
            gen.writeNumberField("emitted_at_ms", System.currentTimeMillis());
            gen.writeNumberField("event_time_ms", e.eventTimeMs);
            e.writeBody(this);
            gen.writeEndObject();
            gen.flush();
        } catch (IOException | RuntimeException ex) {
            // The generator is mid-object: start a fresh one so the next event is well-formed.
            buffer.reset();
            newGenerator();
            throw ex;
        }
        buffer.write('\n');
    }

    byte[] array() {
        return buffer.bytes;
    }

    int size() {
        return buffer.size;
    }

    // ------------------------------------------------------------------------------------------- field helpers

    JsonGenerator gen() {
        return gen;
    }

    void num(String name, long value) throws IOException {
        gen.writeNumberField(name, value);
    }

    /** Non-negative counter: written only when non-zero (the contract's default is 0). */
    void count(String name, long value) throws IOException {
        if (value != 0) {
            gen.writeNumberField(name, Math.max(0L, value));
        }
    }

    void str(String name, String value) throws IOException {
        gen.writeStringField(name, value == null ? "" : value);
    }

    /** Optional string: left out when null. */
    void opt(String name, String value) throws IOException {
        if (value != null) {
            gen.writeStringField(name, value);
        }
    }

    /** Optional id: left out when negative (unknown). */
    void optId(String name, long value) throws IOException {
        if (value >= 0) {
            gen.writeNumberField(name, value);
        }
    }

    /** Optional real number: left out when not finite (Spark reports NaN for a rate it cannot compute). */
    void real(String name, double value) throws IOException {
        if (!Double.isNaN(value) && !Double.isInfinite(value)) {
            gen.writeNumberField(name, value);
        }
    }

    void flag(String name, boolean value) throws IOException {
        if (value) {
            gen.writeBooleanField(name, true);
        }
    }

    void ints(String name, int[] values) throws IOException {
        if (values.length == 0) {
            return;
        }
        gen.writeArrayFieldStart(name);
        for (int v : values) {
            gen.writeNumber(v);
        }
        gen.writeEndArray();
    }

    void strings(String name, List<String> values) throws IOException {
        if (values.isEmpty()) {
            return;
        }
        gen.writeArrayFieldStart(name);
        for (String v : values) {
            gen.writeString(v);
        }
        gen.writeEndArray();
    }

    void stringMap(String name, Map<String, String> values) throws IOException {
        if (values.isEmpty()) {
            return;
        }
        gen.writeObjectFieldStart(name);
        for (Map.Entry<String, String> kv : values.entrySet()) {
            gen.writeStringField(kv.getKey(), kv.getValue());
        }
        gen.writeEndObject();
    }

    void longMap(String name, Map<String, Long> values) throws IOException {
        if (values.isEmpty()) {
            return;
        }
        gen.writeObjectFieldStart(name);
        for (Map.Entry<String, Long> kv : values.entrySet()) {
            gen.writeNumberField(kv.getKey(), kv.getValue());
        }
        gen.writeEndObject();
    }

    /** A growable byte array the generator writes into; reused for every event. */
    static final class Buffer extends OutputStream {
        byte[] bytes;
        int size;

        Buffer(int initial) {
            bytes = new byte[initial];
        }

        void reset() {
            size = 0;
            if (bytes.length > (1 << 20)) {
                bytes = new byte[16 * 1024]; // do not keep a huge plan's buffer forever
            }
        }

        private void ensure(int extra) {
            int need = size + extra;
            if (need > bytes.length) {
                bytes = Arrays.copyOf(bytes, Math.max(need, bytes.length * 2));
            }
        }

        @Override
        public void write(int b) {
            ensure(1);
            bytes[size++] = (byte) b;
        }

        @Override
        public void write(byte[] b, int off, int len) {
            ensure(len);
            System.arraycopy(b, off, bytes, size, len);
            size += len;
        }
    }
}
