package io.sparktap.listener;

import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.slf4j.Logger;

/**
 * spark.sparktap.transport=kafka: the single writer thread produces each event to Kafka from the driver JVM itself
 * (kafka-clients, relocated inside this jar), with the relay's contract: the same topic, key (app_id) and JSON
 * bytes; idempotent, acks=all, zstd; a bounded window of unacknowledged events; and the relay's spool when Kafka
 * does not take them.
 *
 * <p>Modes: DIRECT sends; when the oldest unacknowledged event waits longer than spark.sparktap.transport.stallMs
 * (the broker is gone or stalled) new events go to the spool instead (SPOOLING), while what the producer already
 * holds stays there and is delivered exactly once by the idempotent producer when the broker is back. Once nothing
 * is outstanding and the broker answers, the spool is resent oldest segment first (RESENDING, new events still
 * spooled behind it, so the order holds), then DIRECT again. Spark's listener bus never waits for any of this: it
 * only offers events to the bounded queue.
 */
final class KafkaWriter extends WriterBase {
    private enum Mode { DIRECT, SPOOLING, RESENDING }

    private static final long IDLE_POLL_NANOS = TimeUnit.MILLISECONDS.toNanos(250);
    private static final long BUSY_POLL_NANOS = TimeUnit.MILLISECONDS.toNanos(20);
    private static final long FIRST_BACKOFF_MS = 500;

    private final byte[] key;
    private volatile boolean flowing;

    private KafkaSettings settings;
    private KafkaProducer<byte[], byte[]> producer;
    private JvmSpool spool;
    private Mode mode = Mode.DIRECT;
    private long windowBytes;
    private long backoffMs = FIRST_BACKOFF_MS;
    private long nextProbeNanos;
    private final ArrayList<Event> pending = new ArrayList<>(1024);
    /** The segment being resent, its records not yet handed to the producer, and those that failed. */
    private JvmSpool.Segment resending;
    private int resendNext;
    private final List<byte[][]> resendFailed = new ArrayList<>();
    private final Map<String, Boolean> loggedKinds = new ConcurrentHashMap<>();

    // guarded by lock: written by the producer's I/O thread (callbacks) and the writer thread
    private final Object lock = new Object();
    private long nextId;
    private final LinkedHashMap<Long, SentRecord> inflight = new LinkedHashMap<>();
    private long inflightBytes;
    private final ArrayDeque<SentRecord> failed = new ArrayDeque<>();
    private long lastAckNanos;
    private final RelayStatus.Report counts = new RelayStatus.Report();

    KafkaWriter(ListenerConfig cfg, EventPipeline pipeline, JsonOut.Envelope envelope, RelayStatus status, Logger log,
            EventWriter.Owner owner) {
        super(cfg, pipeline, envelope, status, log, owner);
        this.key = JvmSpool.safeKey(envelope.appId);
    }

    @Override
    public String name() {
        return "kafka";
    }

    @Override
    public boolean relayUp() {
        return flowing;
    }

    @Override
    void release() {
        closeProducer(Duration.ZERO);
        if (spool != null) {
            spool.close();
        }
        flowing = false;
    }

    @Override
    boolean start() {
        settings = KafkaSettings.from(cfg.kafka, "sparktap-listener-" + envelope.appId);
        if (settings.problem != null) {
            owner.disable(settings.problem);
            return false;
        }
        for (String ignored : settings.ignored) {
            log.warn("sparktap: spark.sparktap.kafka.{} is a librdkafka setting the JVM producer has no use for; "
                    + "ignored (spark.sparktap.transport=kafka)", ignored);
        }
        windowBytes = settings.bufferMemory();
        spool = new JvmSpool(cfg.spoolDir, cfg.spoolMaxBytes, cfg.topic);
        if (!spool.usable()) {
            log.warn("sparktap: {}; events Kafka does not take in time will be lost (and counted)", spool.problem);
        }
        try {
            producer = new KafkaProducer<>(settings.props);
        } catch (RuntimeException e) {
            owner.disable("cannot make the Kafka producer from the spark.sparktap.kafka.* settings: "
                    + Redactor.truncate(KafkaErrors.safeMessage(e), 300));
            return false;
        }
        // the first sends need the topic's metadata; wait for it (bounded) so they do not fail at once
        // (events wait in the bounded queue meanwhile)
        if (metadataReady(cfg.relayStartTimeoutMs)) {
            mode = spool.claimable().isEmpty() ? Mode.DIRECT : Mode.RESENDING;
        } else {
            enterSpooling("Kafka did not answer within spark.sparktap.relay.startTimeoutMs=" + cfg.relayStartTimeoutMs
                    + " ms");
        }
        flowing = mode == Mode.DIRECT;
        publish();
        return true;
    }

    /**
     * Whether the producer has the topic's metadata (asking for it for up to {@code budgetMs}). Each ask gives up
     * after {@code max.block.ms} while the producer still connects: only a budget spent says why, once per kind.
     */
    private boolean metadataReady(long budgetMs) {
        long until = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(budgetMs);
        while (true) {
            RuntimeException last;
            try {
                producer.partitionsFor(cfg.topic);
                return true;
            } catch (RuntimeException e) {
                last = e;
            }
            if (System.nanoTime() >= until || (stopRequested && remainingMs() <= reserveMs())) {
                once("metadata " + last.getClass().getSimpleName(), "Kafka metadata for topic=\"" + cfg.topic
                        + "\" not available within " + budgetMs + " ms (" + KafkaErrors.safeMessage(last) + ")");
                return false;
            }
        }
    }

    private void once(String kind, String line) {
        if (loggedKinds.size() < 50 && loggedKinds.putIfAbsent(kind, Boolean.TRUE) == null) {
            log.warn("sparktap: {}; the listener carries on (logged once per kind)", line);
        }
    }

    // ------------------------------------------------------------------------------------------- main loop

    @Override
    void loop() throws InterruptedException {
        while (!stopRequested || !pending.isEmpty() || !pipeline.queue.isEmpty()) {
            if (stopRequested && remainingMs() <= reserveMs()) {
                return;
            }
            step(true);
        }
    }

    /** One round: failures to the spool, mode changes, resending, then events from the queue. */
    private void step(boolean takeEvents) throws InterruptedException {
        spoolFailed();
        checkMode();
        if (mode == Mode.RESENDING) {
            resend();
        } else if (resending != null && settled(resending)) {
            finishSegment(); // resending stopped (Kafka stalled): what was not sent goes back under its own name
        }
        boolean busy = resending != null || inflightCount() > 0;
        if (!takeEvents) {
            TimeUnit.MILLISECONDS.sleep(5);
            return;
        }
        if (pending.isEmpty()) {
            Event first = pipeline.queue.poll(busy ? BUSY_POLL_NANOS : IDLE_POLL_NANOS, TimeUnit.NANOSECONDS);
            if (first == null) {
                spool.flush();
                return;
            }
            pending.add(first);
            pipeline.queue.drainTo(pending, 1023);
        }
        int i = 0;
        for (; i < pending.size(); i++) {
            if (!handOver(pending.get(i))) {
                break;
            }
        }
        pending.subList(0, i).clear();
        if (!pending.isEmpty()) {
            TimeUnit.MILLISECONDS.sleep(2); // the window is full: let acknowledgements come back
        }
    }

    /** Serialise one event and send or spool it; false if the window is full (keep it for the next round). */
    private boolean handOver(Event e) {
        if (mode == Mode.DIRECT && windowFull()) {
            return false;
        }
        try {
            json.event(e);
        } catch (java.io.IOException | RuntimeException ex) {
            status.lostInListener(1);
            owner.failed("serialise " + e.type.wire, ex);
            return true;
        }
        byte[] value = java.util.Arrays.copyOf(json.array(), json.size() - 1); // without the NDJSON newline
        boolean health = e.type == EventType.LISTENER_HEALTH;
        status.written(1);
        count(c -> c.received++);
        if (mode == Mode.DIRECT) {
            send(new SentRecord(cfg.topic, key, value, health, null));
        } else {
            toSpool(key, value, health);
        }
        return true;
    }

    private boolean windowFull() {
        synchronized (lock) {
            return inflightBytes >= windowBytes;
        }
    }

    private int inflightCount() {
        synchronized (lock) {
            return inflight.size();
        }
    }

    private void send(SentRecord r) {
        long id;
        synchronized (lock) {
            id = nextId++;
            inflight.put(id, r);
            inflightBytes += r.value.length;
            counts.inFlight = inflight.size();
        }
        try {
            producer.send(new ProducerRecord<>(r.topic, r.key, r.value), (md, ex) -> completed(id, ex));
        } catch (RuntimeException ex) {
            completed(id, ex); // e.g. the producer was closed: counted like a failed delivery
        }
    }

    /** The producer's callback (its I/O thread; or the writer thread for a send that failed at once). */
    private void completed(long id, Exception ex) {
        SentRecord r;
        synchronized (lock) {
            r = inflight.remove(id);
            if (r == null) {
                return;
            }
            inflightBytes -= r.value.length;
            counts.inFlight = inflight.size();
            if (ex == null) {
                lastAckNanos = System.nanoTime();
                if (r.segment == null) {
                    counts.delivered++;
                } else {
                    counts.resent++;
                }
            } else if (KafkaErrors.permanent(ex)) {
                counts.errors++;
                counts.lost++; // Kafka will never take it (as the relay's _PERMANENT): resending would not help
            } else {
                counts.errors++;
                failed.add(r);
            }
        }
        if (ex != null) {
            once("delivery " + ex.getClass().getSimpleName(), "Kafka did not take an event (" + KafkaErrors.safeMessage(ex)
                    + "); it goes to the spool");
        }
        if (r.segment != null || ex == null) {
            publishLater = true;
        }
    }

    private volatile boolean publishLater;

    private interface Counter {
        void apply(RelayStatus.Report c);
    }

    private void count(Counter f) {
        synchronized (lock) {
            f.apply(counts);
        }
        publish();
    }

    /** Hand the counters to RelayStatus (what listener_health and statusJson read). */
    private void publish() {
        RelayStatus.Report r = new RelayStatus.Report();
        synchronized (lock) {
            r.received = counts.received;
            r.delivered = counts.delivered + counts.resent; // RelayStatus counts both as delivered
            r.resent = counts.resent;
            r.errors = counts.errors;
            r.spooled = counts.spooled;
            r.lost = counts.lost;
            r.inFlight = inflight.size();
        }
        r.spoolPending = 0;
        status.report(r);
        publishLater = false;
    }

    /** Records the producer gave up on: live ones to the spool, those of a resent segment back into it. */
    private void spoolFailed() {
        List<SentRecord> batch = new ArrayList<>();
        synchronized (lock) {
            batch.addAll(failed);
            failed.clear();
        }
        for (SentRecord r : batch) {
            if (r.segment != null) {
                resendFailed.add(new byte[][] {r.key, r.value});
            } else {
                toSpool(r.key, r.value, r.health);
            }
        }
        if (!batch.isEmpty() && mode == Mode.DIRECT) {
            enterSpooling("Kafka did not take " + batch.size() + " event(s)");
        }
        if (publishLater || !batch.isEmpty()) {
            publish();
        }
    }

    private void toSpool(byte[] k, byte[] value, boolean health) {
        if (spool.append(k, value, 0, value.length, health)) {
            count(c -> c.spooled++);
        } else {
            count(c -> c.lost++);
            once("spool full", spool.usable() ? "the spool dir=\"" + spool.dir + "\" is full "
                    + "(spark.sparktap.relay.spoolMaxBytes=" + cfg.spoolMaxBytes + "): events are lost and counted"
                    : spool.problem + ": events Kafka does not take are lost and counted");
        }
    }

    private void enterSpooling(String why) {
        if (mode != Mode.SPOOLING) {
            log.warn("sparktap: {}; spooling events to dir=\"{}\" until Kafka takes them again", why, spool.dir);
        }
        mode = Mode.SPOOLING;
        flowing = false;
        nextProbeNanos = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(backoffMs);
    }

    private void checkMode() {
        long now = System.nanoTime();
        if (mode == Mode.DIRECT) {
            if (oldestAgeMs(now) > cfg.stallMs) {
                enterSpooling("Kafka has not acknowledged an event for " + cfg.stallMs + " ms "
                        + "(spark.sparktap.transport.stallMs)");
            }
            return;
        }
        if (mode == Mode.RESENDING) {
            if (oldestAgeMs(now) > cfg.stallMs) {
                enterSpooling("Kafka stopped acknowledging the spool being resent");
            }
            return;
        }
        // SPOOLING: resend once what the producer holds is settled and the broker answers
        if (inflightCount() > 0 || resending != null) {
            return;
        }
        boolean acked;
        synchronized (lock) {
            acked = lastAckNanos > nextProbeNanos - TimeUnit.MILLISECONDS.toNanos(backoffMs);
        }
        if (!acked && now < nextProbeNanos) {
            return;
        }
        if (stopRequested && remainingMs() <= reserveMs()) {
            return;
        }
        if (metadataReady(Math.min(2000L, cfg.stallMs))) {
            backoffMs = FIRST_BACKOFF_MS;
            mode = Mode.RESENDING;
            log.warn("sparktap: Kafka answers again; resending the spool oldest first");
        } else {
            backoffMs = Math.min(cfg.relayMaxBackoffMs, backoffMs * 2);
            nextProbeNanos = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(backoffMs);
        }
    }

    private long oldestAgeMs(long now) {
        synchronized (lock) {
            Iterator<SentRecord> it = inflight.values().iterator();
            return it.hasNext() ? TimeUnit.NANOSECONDS.toMillis(now - it.next().sentNanos) : 0L;
        }
    }

    /** Resend the spool: one claimed segment at a time, within the window; DIRECT once nothing is left. */
    private void resend() {
        if (resending == null) {
            if (spool.openRecords() > 0) {
                spool.seal(); // what was spooled meanwhile goes behind the older segments
            }
            resending = spool.claimNext();
            resendNext = 0;
            resendFailed.clear();
            if (resending == null) {
                mode = Mode.DIRECT;
                flowing = true;
                return;
            }
        }
        JvmSpool.Segment s = resending;
        while (resendNext < s.records.size() && !windowFull()) {
            byte[][] r = s.records.get(resendNext++);
            send(new SentRecord(s.topic, r[0], r[1], false, s));
        }
        if (resendNext >= s.records.size() && settled(s)) {
            finishSegment();
        }
    }

    /** Whether every record of the segment was handed over and answered (acknowledged or failed and taken back). */
    private boolean settled(JvmSpool.Segment s) {
        synchronized (lock) {
            for (SentRecord r : failed) {
                if (r.segment == s) {
                    return false;
                }
            }
            for (SentRecord r : inflight.values()) {
                if (r.segment == s) {
                    return false;
                }
            }
        }
        return true;
    }

    private void finishSegment() {
        JvmSpool.Segment s = resending;
        List<byte[][]> back = new ArrayList<>(resendFailed);
        for (int i = resendNext; i < s.records.size(); i++) {
            back.add(s.records.get(i));
        }
        spool.writeBack(s, back);
        resending = null;
        resendFailed.clear();
        if (!back.isEmpty() && mode == Mode.RESENDING) {
            enterSpooling("Kafka did not take " + back.size() + " resent event(s)");
        }
    }

    // ------------------------------------------------------------------------------------------- end of application

    /**
     * End of the application: what is queued is sent or spooled; the producer gets until the deadline (less a
     * reserve) to have it acknowledged; what is not is taken back from it and spooled (never dropped silently);
     * then the final listener_health (with these counts) is sent, or spooled when Kafka is not taking events.
     */
    @Override
    void finish() throws InterruptedException {
        // events Kafka had no time for go to the spool
        for (Event e : drainAll()) {
            Mode m = mode;
            mode = Mode.SPOOLING;
            handOver(e);
            mode = m;
        }
        // within the deadline: what the producer holds is acknowledged, and the spool resent if Kafka is back
        while (remainingMs() > reserveMs() && (inflightCount() > 0 || resending != null || mode != Mode.DIRECT)) {
            step(false);
        }
        if (inflightCount() > 0 || resending != null) {
            closeProducer(Duration.ZERO); // aborts what is unacknowledged: the callbacks hand it back as failed
            abandonInflight();
            spoolFailed();
            if (resending != null) {
                finishSegment();
            }
        } else {
            spoolFailed();
        }
        long now = System.currentTimeMillis();
        publish();
        HealthEvent last = new HealthEvent(now, now - lastHealthAtMs, status.totals());
        pipeline.finalHealth(last);
        boolean direct = producer != null && mode == Mode.DIRECT;
        if (!direct) {
            mode = Mode.SPOOLING;
        }
        handOver(last);
        while (direct && inflightCount() > 0 && remainingMs() > 0) {
            TimeUnit.MILLISECONDS.sleep(5);
        }
        if (inflightCount() > 0) {
            closeProducer(Duration.ZERO);
            abandonInflight();
            mode = Mode.SPOOLING;
            spoolFailed();
        }
        closeProducer(Duration.ofMillis(Math.max(0L, remainingMs())));
        spool.close();
        publish();
        flowing = false;
        RelayStatus.Totals t = status.totals();
        long delivered;
        synchronized (lock) {
            delivered = counts.delivered;
        }
        log.info("sparktap: application end: {} events (seq 1..{}), {} dropped in the listener queue, {} sent to "
                + "Kafka from the driver, {} spooled to disk, {} lost", pipeline.accepted(), pipeline.seq(),
                pipeline.dropped(), delivered, t.spooled, t.lost);
    }

    private List<Event> drainAll() {
        List<Event> out = new ArrayList<>(pending);
        pending.clear();
        pipeline.queue.drainTo(out);
        return out;
    }

    /** After a forced close: anything the producer never answered for counts as failed (to be spooled). */
    private void abandonInflight() {
        synchronized (lock) {
            for (SentRecord r : inflight.values()) {
                failed.add(r);
                counts.errors++;
            }
            inflight.clear();
            inflightBytes = 0;
        }
    }

    private void closeProducer(Duration timeout) {
        KafkaProducer<byte[], byte[]> p = producer;
        producer = null;
        if (p == null) {
            return;
        }
        try {
            p.close(timeout);
        } catch (RuntimeException e) {
            once("close", "closing the Kafka producer failed (" + KafkaErrors.safeMessage(e) + ")");
        }
    }
}
