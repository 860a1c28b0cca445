package io.sparktap.listener;

import java.io.IOException;
import java.util.Collections;
import java.util.Map;

/** listener_health: queue and drop counters (snapshotted under the pipeline lock) and the relay's report. */
final class HealthEvent extends Event {
    final long intervalMs;
    long queueDepth;
    long queueCapacity;
    long accepted;
    long dropped;
    Map<String, Long> droppedByType = Collections.emptyMap();
    long relayBacklog;
    long relayRestarts;
    long relaySpooled;
    long deliveryErrors;
    long eventsLost;
    long callbackErrors;
    String firstError;

    HealthEvent(long time, long intervalMs, RelayStatus.Totals relay) {
        super(EventType.LISTENER_HEALTH, time);
        this.intervalMs = Math.max(0L, intervalMs);
        this.relayBacklog = relay.backlog;
        this.relayRestarts = relay.restarts;
        this.relaySpooled = relay.spooled;
        this.deliveryErrors = relay.deliveryErrors;
        this.eventsLost = relay.lost;
    }

    @Override
    void writeBody(JsonOut out) throws IOException {
        out.num("interval_ms", intervalMs);
        out.num("queue_depth", queueDepth);
        out.num("queue_capacity", queueCapacity);
        out.num("events_accepted", accepted);
        out.num("events_dropped", dropped);
        out.longMap("dropped_by_type", droppedByType);
        out.count("relay_backlog", relayBacklog);
        out.count("relay_restarts", relayRestarts);
        out.count("relay_spooled", relaySpooled);
        out.count("kafka_delivery_errors", deliveryErrors);
        out.count("kafka_events_lost", eventsLost);
        out.count("callback_errors", callbackErrors);
        out.opt("first_error", firstError);
    }
}
