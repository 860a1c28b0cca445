package io.sparktap.listener;

/**
 * One record the JVM producer's writer handed to the producer and that is not acknowledged yet: what to spool (or
 * write back into its spool segment) if Kafka does not take it, and since when it waits ({@link KafkaWriter}).
 */
final class SentRecord {
    final String topic;
    final byte[] key;
    final byte[] value;
    final boolean health;
    final long sentNanos;
    /** The spool segment being resent that it comes from; null for a live event. */
    final JvmSpool.Segment segment;

    SentRecord(String topic, byte[] key, byte[] value, boolean health, JvmSpool.Segment segment) {
        this.topic = topic;
        this.key = key;
        this.value = value;
        this.health = health;
        this.segment = segment;
        this.sentNanos = System.nanoTime();
    }
}
