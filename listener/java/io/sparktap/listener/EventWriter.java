package io.sparktap.listener;

import java.io.IOException;
import java.util.ArrayList;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;

import org.slf4j.Logger;

/**
 * The single writer thread: drains the queue, serialises each event to compact JSON and writes NDJSON to the
 * relay's stdin. Owns the relay process: starts it, restarts it with backoff if it dies, and runs the end of
 * application sequence (flush with a deadline, final listener_health, EOF).
 *
 * <p>While no relay is running the queue is simply not drained: it absorbs the gap, and if it overflows the
 * drops are counted by the pipeline (seq gaps), never blocking Spark.
 */
final class EventWriter extends WriterBase {
    private static final long FIRST_BACKOFF_MS = 500;
    private static final long LINGER_NANOS = TimeUnit.MILLISECONDS.toNanos(50);
    /** An idle writer wakes this often (to see a dead relay or a stop request); an event wakes it at once. */
    private static final long IDLE_POLL_NANOS = TimeUnit.MILLISECONDS.toNanos(250);

    interface Owner {
        /** The relay could not start at all: the listener turns itself off. */
        void disable(String oneLine);

        /** A callback failed; log once per kind. */
        void failed(String where, Throwable t);
    }

    private RelayProcess relay;
    /** Whether a relay is up and taking events (for diagnostics; the writer thread owns {@link #relay}). */
    private volatile boolean relayUp;
    private long backoffMs = FIRST_BACKOFF_MS;
    private long nextRestartNanos;
    private long serialiseErrors;
    private long bytesWritten;
    /**
     * Events taken from the queue and not yet written. A write that fails (the relay died) leaves the failed event
     * and the rest here for the next relay: only what a dead relay had already received can be lost.
     */
    private final ArrayList<Event> pending = new ArrayList<>(1024);

    EventWriter(ListenerConfig cfg, EventPipeline pipeline, JsonOut.Envelope envelope, RelayStatus status, Logger log,
            Owner owner) {
        super(cfg, pipeline, envelope, status, log, owner);
    }

    @Override
    public String name() {
        return "relay";
    }

    long bytesWritten() {
        return bytesWritten;
    }

    @Override
    public boolean relayUp() {
        return relayUp;
    }

    /** The first relay: the listener turns itself off when it cannot start at all. */
    @Override
    boolean start() throws InterruptedException {
        String command = String.join(" ", RelayProcess.command(cfg, envelope.appId));
        RelayProcess r;
        try {
            r = RelayProcess.start(cfg, envelope.appId, status, log);
        } catch (IOException e) {
            owner.disable("cannot start the relay `" + command + "`: " + e.getMessage() + "; set --conf "
                    + "spark.sparktap.relay.python=<a python with sparktap installed>");
            return false;
        }
        if (!r.awaitReady(cfg.relayStartTimeoutMs)) {
            String reason = r.failureReason(cfg.relayStartTimeoutMs);
            r.kill();
            owner.disable("the relay `" + command + "` did not start: " + reason + "; check that this python has "
                    + "sparktap installed (--conf spark.sparktap.relay.python) and the spark.sparktap.kafka.* settings");
            return false;
        }
        relay = r;
        relayUp = true;
        return true;
    }

    @Override
    void loop() throws InterruptedException {
        ArrayList<Event> batch = pending;
        // Small queues are drained at once; large ones let a batch gather before writing (see below).
        long lingerNanos = pipeline.capacity >= 4096 ? LINGER_NANOS : 0L;
        while (true) {
            if (relay == null || !relay.alive()) {
                if (relay != null) {
                    relayDied("the relay process exited");
                }
                if (stopRequested) {
                    return; // finish() makes one last attempt within the deadline
                }
                if (!restartWhenDue()) {
                    continue;
                }
            }
            if (batch.isEmpty()) {
                Event first = pipeline.queue.poll(IDLE_POLL_NANOS, TimeUnit.NANOSECONDS);
                if (first == null) {
                    if (stopRequested && pipeline.queue.isEmpty()) {
                        return;
                    }
                    continue;
                }
                batch.add(first);
                if (lingerNanos > 0 && !stopRequested) {
                    // When events trickle in, waking up (here and in the relay) once per event costs far more
                    // than the events themselves: wait a moment and hand the relay one batch. librdkafka lingers
                    // longer.
                    LockSupport.parkNanos(lingerNanos);
                }
            }
            if (writeBatches(batch)) {
                flushRelay();
            }
        }
    }

    /**
     * Write {@code batch} and whatever else is queued; false if the relay went away, with the events not yet
     * written left in {@code batch} for the next relay.
     */
    private boolean writeBatches(ArrayList<Event> batch) {
        while (!batch.isEmpty() || pipeline.queue.drainTo(batch, 1024) > 0) {
            for (int i = 0; i < batch.size(); i++) {
                if (!write(batch.get(i))) {
                    batch.subList(0, i).clear();
                    return false;
                }
            }
            batch.clear();
        }
        return true;
    }

    /** Serialise and write one event; false if the relay is gone (the event was not written: retry it). */
    private boolean write(Event e) {
        try {
            json.event(e);
        } catch (IOException | RuntimeException ex) {
            serialiseErrors++;
            status.lostInListener(1);
            owner.failed("serialise " + e.type.wire, ex);
            return true;
        }
        try {
            relay.stdin.write(json.array(), 0, json.size());
            bytesWritten += json.size();
            status.written(1);
            return true;
        } catch (IOException ex) {
            relayDied("writing to the relay failed: " + ex.getMessage());
            return false;
        }
    }

    private boolean flushRelay() {
        try {
            relay.stdin.flush();
            return true;
        } catch (IOException ex) {
            relayDied("writing to the relay failed: " + ex.getMessage());
            return false;
        }
    }

    private void relayDied(String why) {
        if (relay == null) {
            return;
        }
        RelayProcess dead = relay;
        relay = null;
        relayUp = false;
        dead.kill();
        status.relayDied();
        if (dead.uptimeMs() > 60_000) {
            backoffMs = FIRST_BACKOFF_MS;
        }
        nextRestartNanos = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(backoffMs);
        log.warn("sparktap: {}; restarting it in {} ms (events meanwhile wait in the queue)", why, backoffMs);
        backoffMs = Math.min(cfg.relayMaxBackoffMs, backoffMs * 2);
    }

    /** Restart the relay once the backoff has passed; false (after a short sleep) if not running yet. */
    private boolean restartWhenDue() throws InterruptedException {
        long wait = nextRestartNanos - System.nanoTime();
        if (wait > 0) {
            TimeUnit.NANOSECONDS.sleep(Math.min(wait, TimeUnit.MILLISECONDS.toNanos(50)));
            return false;
        }
        return tryRestart(cfg.relayStartTimeoutMs);
    }

    private boolean tryRestart(long readyTimeoutMs) throws InterruptedException {
        status.restarted();
        RelayProcess r;
        try {
            r = RelayProcess.start(cfg, envelope.appId, status, log);
        } catch (IOException e) {
            scheduleRetry("cannot restart the relay: " + e.getMessage());
            return false;
        }
        if (!r.awaitReady(readyTimeoutMs)) {
            String reason = r.failureReason(readyTimeoutMs);
            r.kill();
            scheduleRetry("the restarted relay did not become ready: " + reason);
            return false;
        }
        relay = r;
        relayUp = true;
        log.warn("sparktap: relay restarted (restart #{})", status.restarts());
        return true;
    }

    private void scheduleRetry(String why) {
        nextRestartNanos = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(backoffMs);
        log.warn("sparktap: {}; next attempt in {} ms", why, backoffMs);
        backoffMs = Math.min(cfg.relayMaxBackoffMs, backoffMs * 2);
    }

    /**
     * End of the application: everything queued is written; the relay flushes to Kafka within the deadline and
     * spools what it could not deliver; then the final listener_health (with the relay's final counts) goes out
     * and stdin is closed. The whole sequence never outlasts spark.sparktap.relay.flushTimeoutMs.
     */
    @Override
    void finish() throws InterruptedException {
        if (relay == null && (!pending.isEmpty() || !pipeline.queue.isEmpty()) && remainingMs() > 500) {
            tryRestart(Math.min(remainingMs() / 2, cfg.relayStartTimeoutMs)); // one last chance to deliver
        }
        if (relay != null) {
            drainRemaining();
        }
        // what is still queued now has no relay to go to
        int leftover = pending.size() + pipeline.queue.size();
        pending.clear();
        pipeline.queue.clear();
        status.lostInListener(leftover);
        long reserveMs = reserveMs();
        if (relay != null && relay.alive()) {
            long flushMs = Math.max(0L, remainingMs() - reserveMs);
            try {
                relay.control("flush " + flushMs);
                relay.awaitFlushed(flushMs + reserveMs / 2);
            } catch (IOException e) {
                relayDied("flushing the relay failed: " + e.getMessage());
            }
        }
        long now = System.currentTimeMillis();
        HealthEvent last = new HealthEvent(now, now - lastHealthAtMs, status.totals());
        pipeline.finalHealth(last);
        if (relay != null && relay.alive()) {
            if (!write(last)) {
                status.lostInListener(1);
            } else if (flushRelay()) {
                relay.closeAndWait(remainingMs());
            }
        } else {
            status.lostInListener(1);
        }
        relayUp = false;
        RelayStatus.Totals t = status.totals();
        log.info("sparktap: application end: {} events (seq 1..{}), {} dropped in the listener queue, "
                + "{} spooled to disk, {} lost, {} relay restarts", pipeline.accepted(), pipeline.seq(),
                pipeline.dropped(), t.spooled, t.lost, t.restarts);
    }

    private void drainRemaining() {
        if (writeBatches(pending)) {
            flushRelay();
        }
    }
}
