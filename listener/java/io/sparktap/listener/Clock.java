package io.sparktap.listener;

/**
 * The time the listener stamps on an event that carries none of its own (an AQE plan update, a driver accumulator
 * update, a streaming query's end, a stage without submission or completion time).
 *
 * <p>Live, that is the wall clock. When {@link ReplayMain} replays an event log, it is the latest time carried by an
 * event replayed so far, so an imported event never takes the time of the import (docs/import.md lists these
 * fields). Only the replay JVM sets it; a driver never does.
 */
final class Clock {
    private static volatile boolean replay;
    private static volatile long replayNowMs;

    private Clock() {
    }

    static long now() {
        return replay ? replayNowMs : System.currentTimeMillis();
    }

    /** Replay only: time moves with the events (never backwards). */
    static void replayed(long eventTimeMs) {
        replay = true;
        if (eventTimeMs > replayNowMs) {
            replayNowMs = eventTimeMs;
        }
    }

    /** Replay only: a new log starts at time zero until its first timed event. */
    static void replayReset() {
        replay = true;
        replayNowMs = 0L;
    }
}
