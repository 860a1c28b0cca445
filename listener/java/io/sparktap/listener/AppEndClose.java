package io.sparktap.listener;

import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.Consumer;

import org.slf4j.Logger;

/**
 * The live listener's close after the application end ({@link ListenerCore#applicationEnd}).
 *
 * <p>SparkContext.stop() posts the application end first, then cancels what still runs (stage and job ends "because
 * SparkContext was shut down", with their task ends), then stops the listener bus once it has delivered them. The
 * listener keeps them, as a replay of the event log does: the writer stops when the bus thread ends (at most
 * spark.sparktap.lateEventsMs after the end), or when the JVM exits, whichever comes first, and only once.
 */
final class AppEndClose {
    private final Transport writer;
    private final ListenerConfig config;
    private final Logger log;
    private final EventWriter.Owner owner;
    /** Nothing more is sent; true: no callback runs any more, the bus-thread state can go. */
    private final Consumer<Boolean> ended;
    private final AtomicBoolean closing = new AtomicBoolean();
    private final CountDownLatch closed = new CountDownLatch(1);
    private volatile Thread hook;

    AppEndClose(Transport writer, ListenerConfig config, Logger log, EventWriter.Owner owner, Consumer<Boolean> ended) {
        this.writer = writer;
        this.config = config;
        this.log = log;
        this.owner = owner;
        this.ended = ended;
    }

    /**
     * Close once {@code bus} (the listener bus thread that delivered the application end) has ended; false, with
     * nothing started, when that cannot be waited for: late events off, or the JVM already exiting (SparkContext.stop()
     * run by Spark's shutdown hook), where the caller closes at once.
     */
    boolean afterBus(Thread bus) {
        if (config.lateEventsMs <= 0) {
            return false;
        }
        Thread atExit = new Thread(() -> closeAfter(bus, Math.min(config.lateEventsMs, config.flushTimeoutMs / 2)),
                "sparktap-close-at-exit");
        try {
            Runtime.getRuntime().addShutdownHook(atExit);
        } catch (IllegalStateException exiting) {
            return false;
        }
        hook = atExit;
        Thread closer = new Thread(() -> closeAfter(bus, config.lateEventsMs), "sparktap-close");
        closer.setDaemon(true);
        closer.start();
        return true;
    }

    private void closeAfter(Thread bus, long waitMs) {
        try {
            bus.join(Math.max(1L, waitMs));
        } catch (InterruptedException ie) {
            Thread.currentThread().interrupt();
        }
        boolean stopped = !bus.isAlive();
        if (!stopped && !closing.get()) {
            log.info("sparktap: the listener bus still runs {} ms after the application end "
                    + "(spark.sparktap.lateEventsMs); the listener sends nothing after this", waitMs);
        }
        now(System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(config.flushTimeoutMs), stopped);
    }

    /**
     * Stop the writer (deliver or spool what is queued, then the final listener_health), once: a second caller waits
     * for the first. {@code busStopped}: no callback can run any more (or this is the bus thread).
     */
    void now(long deadlineNanos, boolean busStopped) {
        if (closing.getAndSet(true)) {
            try {
                closed.await(config.flushTimeoutMs + 1000L, TimeUnit.MILLISECONDS);
            } catch (InterruptedException ie) {
                Thread.currentThread().interrupt();
            }
            return;
        }
        try {
            writer.requestStop(deadlineNanos);
            if (!writer.awaitDone(config.flushTimeoutMs + 500)) {
                log.warn("sparktap: the relay did not finish within spark.sparktap.relay.flushTimeoutMs={} ms; "
                        + "not waiting longer", config.flushTimeoutMs);
            }
        } catch (InterruptedException ie) {
            Thread.currentThread().interrupt();
        } catch (Throwable t) {
            SparkTapListener.rethrowIfFatal(t);
            owner.failed("onApplicationEnd", t);
        } finally {
            ended.accept(busStopped);
            closed.countDown();
            Thread atExit = hook;
            if (atExit != null && atExit != Thread.currentThread()) {
                try {
                    Runtime.getRuntime().removeShutdownHook(atExit);
                } catch (IllegalStateException exiting) {
                    // the JVM is exiting: the hook runs and returns at once
                }
            }
        }
    }
}
