package io.sparktap.listener;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.Set;

import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.security.plain.PlainLoginModule;
import org.apache.kafka.common.security.scram.ScramLoginModule;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * The in-JVM producer's settings from spark.sparktap.kafka.*: the same names the relay passes to librdkafka are
 * accepted, and the few that differ are translated; Java client names are taken as they are. Values are never
 * logged (they hold passwords): a key the Java client has no use for is named in one log line, its value is not.
 */
final class KafkaSettings {
    /** Bounds the producer's memory in the driver: records waiting for Kafka (compressed) use at most this. */
    static final String BUFFER_MEMORY = String.valueOf(4L << 20);
    /**
     * How long send() may wait for topic metadata or buffer room. Sends happen on the writer thread (never on
     * Spark's listener bus), and a full window is handled before send, so this only bounds a stalled metadata
     * lookup: the writer then tries again or spools.
     */
    static final String MAX_BLOCK_MS = "100";

    /** librdkafka name -> Java client name, where only the name differs. */
    private static final String[][] RENAMED = {
        {"sasl.mechanisms", "sasl.mechanism"},
        {"message.max.bytes", "max.request.size"},
        {"queue.buffering.max.ms", "linger.ms"},
        {"message.timeout.ms", "delivery.timeout.ms"},
        {"socket.timeout.ms", "request.timeout.ms"},
        {"ssl.certificate.location", "ssl.keystore.location"},
    };

    final Properties props = new Properties();
    /** librdkafka-only keys that were ignored (names only). */
    final List<String> ignored = new ArrayList<>();
    /** Why these settings cannot make a producer (one line, no value), or null. */
    String problem;

    private KafkaSettings() {
    }

    static KafkaSettings from(Map<String, String> kafka, String clientId) {
        KafkaSettings s = new KafkaSettings();
        Properties p = s.props;
        // sparktap's defaults; the user's settings below override them
        p.put("client.id", clientId);
        p.put("compression.type", "zstd");
        // few, large batches: each costs a produce request and a zstd context (the relay lingers as long)
        p.put("linger.ms", "250");
        p.put("batch.size", String.valueOf(256 << 10));
        p.put("buffer.memory", BUFFER_MEMORY);
        p.put("max.block.ms", MAX_BLOCK_MS);
        p.put("delivery.timeout.ms", "120000");
        Set<String> javaNames = ProducerConfig.configNames();
        String user = null;
        String password = null;
        for (Map.Entry<String, String> kv : kafka.entrySet()) {
            String key = kv.getKey();
            String value = kv.getValue();
            String renamed = renamed(key);
            if (key.equals("sasl.username")) {
                user = value;
            } else if (key.equals("sasl.password")) {
                password = value;
            } else if (key.equals("ssl.ca.location")) {
                p.put("ssl.truststore.type", "PEM");
                p.put("ssl.truststore.location", value);
            } else if (key.equals("security.protocol")) {
                p.put(key, value.trim().toUpperCase(Locale.ROOT));
            } else if (key.equals("ssl.endpoint.identification.algorithm") && value.trim().equalsIgnoreCase("none")) {
                p.put(key, ""); // librdkafka's "none" is the Java client's empty value
            } else if (renamed != null) {
                p.put(renamed, value);
            } else if (javaNames.contains(key)) {
                p.put(key, value);
            } else {
                s.ignored.add(key);
            }
        }
        if (p.getProperty("ssl.keystore.location") != null && kafka.containsKey("ssl.certificate.location")) {
            p.put("ssl.keystore.type", "PEM");
        }
        if (user != null && !p.containsKey("sasl.jaas.config")) {
            String mechanism = p.getProperty("sasl.mechanism", "PLAIN").trim().toUpperCase(Locale.ROOT);
            p.put("sasl.mechanism", mechanism);
            String module;
            if (mechanism.equals("PLAIN")) {
                module = PlainLoginModule.class.getName(); // the relocated name inside the listener jar
            } else if (mechanism.startsWith("SCRAM-")) {
                module = ScramLoginModule.class.getName();
            } else {
                s.problem = "spark.sparktap.kafka.sasl.username is set with sasl.mechanism=" + mechanism
                        + ", which takes no username: use PLAIN or SCRAM-SHA-256/512, or give "
                        + "spark.sparktap.kafka.sasl.jaas.config";
                module = null;
            }
            if (module != null) {
                p.put("sasl.jaas.config", module + " required username=" + jaasQuote(user) + " password="
                        + jaasQuote(password == null ? "" : password) + ";");
            }
        } else if (password != null && user == null && !p.containsKey("sasl.jaas.config")) {
            s.problem = "spark.sparktap.kafka.sasl.password is set without spark.sparktap.kafka.sasl.username";
        }
        // never negotiable: each event exactly once per send, in order (see the relay's _FORCED)
        p.put("enable.idempotence", "true");
        p.put("acks", "all");
        p.put("key.serializer", ByteArraySerializer.class.getName());
        p.put("value.serializer", ByteArraySerializer.class.getName());
        return s;
    }

    private static String renamed(String key) {
        for (String[] r : RENAMED) {
            if (r[0].equals(key)) {
                return r[1];
            }
        }
        return null;
    }

    /** A JAAS string value: quotes and backslashes escaped. */
    static String jaasQuote(String v) {
        return '"' + v.replace("\\", "\\\\").replace("\"", "\\\"") + '"';
    }

    /** buffer.memory as a number (what the writer bounds its unacknowledged copies by). */
    long bufferMemory() {
        try {
            return Math.max(64L << 10, Long.parseLong(props.getProperty("buffer.memory").trim()));
        } catch (RuntimeException e) {
            return 4L << 20;
        }
    }
}
