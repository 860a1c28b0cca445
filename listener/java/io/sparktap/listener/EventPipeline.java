package io.sparktap.listener;

import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.TimeUnit;

/**
 * The bounded queue between Spark's listener bus and the writer thread, and the per-attempt {@code seq}.
 *
 * <p>Every event the listener receives gets the next seq, whether or not it fits in the queue: a full queue
 * drops the event (counted per type), and the drop shows downstream as a gap in seq. {@code offer} never blocks.
 */
final class EventPipeline {
    final ArrayBlockingQueue<Event> queue;
    final int capacity;
    private final Object lock = new Object();
    private long seq;
    private long accepted;
    private long dropped;
    private final long[] droppedByType = new long[EventType.ALL.length];
    private boolean open = true;
    private final CallbackErrors errors;

    EventPipeline(int capacity, CallbackErrors errors) {
        this.capacity = capacity;
        this.errors = errors;
        this.queue = new ArrayBlockingQueue<>(capacity);
    }

    /** Assign the next seq and enqueue without blocking; a full queue drops the event. */
    boolean submit(Event e) {
        synchronized (lock) {
            if (!open) {
                return false;
            }
            e.seq = ++seq;
            return count(e, queue.offer(e));
        }
    }

    /** Like submit, but waits up to {@code timeoutMs} for room (only at application end, when nothing else runs). */
    boolean submitWaiting(Event e, long timeoutMs) {
        synchronized (lock) {
            if (!open) {
                return false;
            }
            e.seq = ++seq;
            boolean ok;
            try {
                ok = queue.offer(e, Math.max(0L, timeoutMs), TimeUnit.MILLISECONDS);
            } catch (InterruptedException ie) {
                Thread.currentThread().interrupt();
                ok = false;
            }
            return count(e, ok);
        }
    }

    /** Fill the health event's counters (as of just before it) and enqueue it. */
    boolean submitHealth(HealthEvent h) {
        synchronized (lock) {
            if (!open) {
                return false;
            }
            snapshot(h);
            assignSeq(h);
            return count(h, queue.offer(h));
        }
    }

    /**
     * The last health event of the application: counters as of just before it, seq assigned, not enqueued (the
     * writer writes it itself after draining the queue). Closes the pipeline: later events are ignored.
     */
    void finalHealth(HealthEvent h) {
        synchronized (lock) {
            open = false;
            snapshot(h);
            assignSeq(h);
            accepted++;
        }
    }

    /** Stop accepting events (they are ignored, with no seq, so they leave no gap). */
    void close() {
        synchronized (lock) {
            open = false;
        }
    }

    boolean isOpen() {
        synchronized (lock) {
            return open;
        }
    }

    private void assignSeq(Event h) {
        h.seq = ++seq;
    }

    private void snapshot(HealthEvent h) {
        h.queueDepth = queue.size();
        h.queueCapacity = capacity;
        h.accepted = accepted;
        h.dropped = dropped;
        h.droppedByType = droppedByTypeLocked();
        h.callbackErrors = errors.count();
        h.firstError = errors.first();
    }

    private boolean count(Event e, boolean ok) {
        if (ok) {
            accepted++;
        } else {
            dropped++;
            droppedByType[e.type.ordinal()]++;
        }
        return ok;
    }

    private Map<String, Long> droppedByTypeLocked() {
        Map<String, Long> out = new TreeMap<>();
        for (EventType t : EventType.ALL) {
            long n = droppedByType[t.ordinal()];
            if (n > 0) {
                out.put(t.wire, n);
            }
        }
        return out;
    }

    long seq() {
        synchronized (lock) {
            return seq;
        }
    }

    long dropped() {
        synchronized (lock) {
            return dropped;
        }
    }

    long accepted() {
        synchronized (lock) {
            return accepted;
        }
    }

    Map<String, Long> droppedByType() {
        synchronized (lock) {
            return droppedByTypeLocked();
        }
    }
}
