package io.sparktap.listener;

/**
 * The writer thread that takes events off the pipeline's queue and gets them to Kafka: {@link KafkaWriter} (a Kafka
 * producer inside the driver JVM, spark.sparktap.transport=kafka) or {@link EventWriter} (the Python relay child
 * process, transport=relay).
 */
interface Transport extends Runnable {
    /** The name spark.sparktap.transport takes for this writer. */
    String name();

    void healthEmitted(long atMs);

    long lastHealthAtMs();

    /** Finish: drain the queue, deliver or spool within the deadline, send the final listener_health. */
    void requestStop(long deadlineNanos);

    boolean awaitDone(long timeoutMs) throws InterruptedException;

    /** Whether events currently flow to Kafka (the relay is up / the producer is not spooling). */
    boolean relayUp();
}
