package io.sparktap.listener;

import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.slf4j.Logger;

/**
 * What both writer threads share ({@link EventWriter}: the relay; {@link KafkaWriter}: the producer in this JVM):
 * the pipeline they drain, the stop request with its deadline, the time of the last listener_health, and the run
 * sequence (start, loop, finish), after which {@link #awaitDone} returns whatever happened.
 */
abstract class WriterBase implements Transport {
    final ListenerConfig cfg;
    final EventPipeline pipeline;
    final JsonOut.Envelope envelope;
    final RelayStatus status;
    final Logger log;
    final EventWriter.Owner owner;
    private final CountDownLatch done = new CountDownLatch(1);
    private volatile long stopDeadlineNanos;
    volatile boolean stopRequested;
    volatile long lastHealthAtMs;
    JsonOut json;

    WriterBase(ListenerConfig cfg, EventPipeline pipeline, JsonOut.Envelope envelope, RelayStatus status, Logger log,
            EventWriter.Owner owner) {
        this.cfg = cfg;
        this.pipeline = pipeline;
        this.envelope = envelope;
        this.status = status;
        this.log = log;
        this.owner = owner;
        this.lastHealthAtMs = System.currentTimeMillis();
    }

    /** Get ready to take events; false when the writer cannot work at all (it has told the owner why). */
    abstract boolean start() throws InterruptedException;

    /** Take events until a stop is requested and what is queued is handed on (or the deadline leaves no time). */
    abstract void loop() throws InterruptedException;

    /** End of the application: deliver or spool within the deadline, then the final listener_health. */
    abstract void finish() throws InterruptedException;

    /** Release what the writer holds, whatever happened (after finish, or after a failure). */
    void release() {
    }

    @Override
    public final void run() {
        try {
            json = new JsonOut(envelope);
            if (!start()) {
                return;
            }
            loop();
            finish();
        } catch (Throwable t) {
            if (t instanceof VirtualMachineError) {
                throw (VirtualMachineError) t;
            }
            owner.failed(name() + " writer", t);
        } finally {
            release();
            done.countDown();
        }
    }

    @Override
    public final void healthEmitted(long atMs) {
        lastHealthAtMs = atMs;
    }

    @Override
    public final long lastHealthAtMs() {
        return lastHealthAtMs;
    }

    /** Ask the writer to finish: drain, deliver or spool within the deadline, write the final health. */
    @Override
    public final void requestStop(long deadlineNanos) {
        stopDeadlineNanos = deadlineNanos;
        stopRequested = true;
    }

    @Override
    public final boolean awaitDone(long timeoutMs) throws InterruptedException {
        return done.await(Math.max(0L, timeoutMs), TimeUnit.MILLISECONDS);
    }

    /** Milliseconds left until the stop deadline (negative once past it). */
    final long remainingMs() {
        return TimeUnit.NANOSECONDS.toMillis(stopDeadlineNanos - System.nanoTime());
    }

    /** What the end of the application keeps back from the deadline for the final listener_health. */
    final long reserveMs() {
        return Math.min(1500L, Math.max(200L, cfg.flushTimeoutMs / 4));
    }
}
