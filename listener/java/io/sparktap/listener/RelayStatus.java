package io.sparktap.listener;

/**
 * What the relays of this application reported back: the current relay's latest status line plus the totals of
 * relays that died before it (the listener restarts a dead relay).
 */
final class RelayStatus {
    /** One status line from the relay (all counters cumulative for that relay process). */
    static final class Report {
        long received;
        long delivered;
        long resent;
        long errors;
        long spooled;
        long lost;
        long inFlight;
        long spoolPending;
    }

    /** The numbers listener_health reports. */
    static final class Totals {
        long backlog;
        long restarts;
        long spooled;
        long deliveryErrors;
        long lost;
    }

    private long baseSpooled;
    private long baseErrors;
    private long baseLost;
    private long restarts;
    private long listenerLost;
    private Report current = new Report();
    private long writtenToCurrent;
    private long writtenTotal;

    synchronized void report(Report r) {
        current = r;
    }

    synchronized void written(long n) {
        writtenToCurrent += n;
        writtenTotal += n;
    }

    /** Events written to any relay of this application so far. */
    synchronized long writtenTotal() {
        return writtenTotal;
    }

    /** Events the listener could not hand to any relay (write failed, or no relay at the end). */
    synchronized void lostInListener(long n) {
        listenerLost += n;
    }

    /**
     * The current relay died: fold its counts into the totals. What was written to it and is not accounted for as
     * delivered, spooled or lost in its last report is counted as lost (an upper bound: some of it may have been
     * delivered after that report).
     */
    synchronized void relayDied() {
        Report r = current;
        long unaccounted = writtenToCurrent - (r.delivered + r.spooled + r.lost);
        baseSpooled += r.spooled;
        baseErrors += r.errors;
        baseLost += r.lost + Math.max(0L, unaccounted);
        current = new Report();
        writtenToCurrent = 0;
    }

    synchronized void restarted() {
        restarts++;
    }

    synchronized long restarts() {
        return restarts;
    }

    synchronized Totals totals() {
        Totals t = new Totals();
        Report r = current;
        long inPipe = Math.max(0L, writtenToCurrent - r.received);
        t.backlog = inPipe + r.inFlight + r.spoolPending;
        t.restarts = restarts;
        t.spooled = baseSpooled + r.spooled;
        t.deliveryErrors = baseErrors + r.errors;
        t.lost = baseLost + r.lost + listenerLost;
        return t;
    }
}
