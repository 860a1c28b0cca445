package io.sparktap.listener;

import java.io.IOException;

/**
 * One event on its way to the relay. Built on Spark's listener-bus thread from values copied out of Spark's
 * objects (cheap, bounded work); serialised later on the writer thread by {@link #writeBody}.
 */
abstract class Event {
    final EventType type;
    final long eventTimeMs;
    /** Assigned by {@link EventPipeline} when the listener receives the event (1, 2, 3 … per app attempt). */
    long seq;

    Event(EventType type, long eventTimeMs) {
        this.type = type;
        this.eventTimeMs = Math.max(0L, eventTimeMs);
    }

    /** Write the fields after the envelope. Runs on the writer thread. */
    abstract void writeBody(JsonOut out) throws IOException;

    /** Small events are written by a lambda that captured their values. */
    @FunctionalInterface
    interface Body {
        void write(JsonOut out) throws IOException;
    }

    static Event of(EventType type, long eventTimeMs, Body body) {
        return new Event(type, eventTimeMs) {
            @Override
            void writeBody(JsonOut out) throws IOException {
                body.write(out);
            }
        };
    }
}
