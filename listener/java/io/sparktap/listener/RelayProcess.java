package io.sparktap.listener;

import java.io.BufferedOutputStream;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import org.slf4j.Logger;

/**
 * One relay process ({@code python -m sparktap.listener.relay}): events go to its stdin as NDJSON; it answers
 * with JSON status lines on its stdout; its stderr is logged.
 *
 * <p>Protocol on stdin: line 1 is the configuration (a JSON object, so that Kafka secrets never appear on the
 * command line or in the environment); then one event per line; lines starting with '#' are control lines
 * ({@code #flush <ms>}: deliver everything within ms, spool the rest, and report {@code "flushed"}). EOF means
 * the application ended: the relay delivers or spools what it holds and exits.
 */
final class RelayProcess {
    static final String MODULE = "sparktap.listener.relay";
    private static final ObjectMapper MAPPER = new ObjectMapper();
    private static final int STDERR_LOG_LIMIT = 200;

    final Process process;
    final OutputStream stdin;
    private final RelayStatus status;
    private final Logger log;
    private final CountDownLatch ready = new CountDownLatch(1);
    private final CountDownLatch flushed = new CountDownLatch(1);
    private final ArrayDeque<String> lastStderr = new ArrayDeque<>();
    private volatile String error;
    private volatile boolean outputClosed;
    private final long startedAtMs = System.currentTimeMillis();

    private RelayProcess(Process process, RelayStatus status, Logger log) {
        this.process = process;
        this.stdin = new BufferedOutputStream(process.getOutputStream(), 64 * 1024);
        this.status = status;
        this.log = log;
    }

    static List<String> command(ListenerConfig cfg, String appId) {
        List<String> cmd = new ArrayList<>();
        cmd.add(cfg.relayPython);
        cmd.add("-m");
        cmd.add(MODULE);
        cmd.add("--app-id"); // not a secret; makes the process recognisable in ps
        cmd.add(appId);
        return cmd;
    }

    /** Start the process and send the configuration line. Throws IOException if it cannot even be launched. */
    static RelayProcess start(ListenerConfig cfg, String appId, RelayStatus status, Logger log) throws IOException {
        ProcessBuilder pb = new ProcessBuilder(command(cfg, appId));
        pb.environment().put("PYTHONUNBUFFERED", "1");
        Process p = pb.start();
        RelayProcess relay = new RelayProcess(p, status, log);
        relay.startReaders();
        relay.stdin.write(configLine(cfg, appId));
        relay.stdin.flush();
        return relay;
    }

    static byte[] configLine(ListenerConfig cfg, String appId) throws IOException {
        Map<String, Object> conf = new java.util.LinkedHashMap<>();
        conf.put("protocol", 1);
        conf.put("app_id", appId);
        conf.put("topic", cfg.topic);
        conf.put("kafka", cfg.kafka);
        conf.put("spool_dir", cfg.spoolDir);
        conf.put("spool_max_bytes", cfg.spoolMaxBytes);
        conf.put("buffer_max_events", cfg.bufferMaxEvents);
        conf.put("status_interval_ms", cfg.relayStatusIntervalMs);
        byte[] json = MAPPER.writeValueAsBytes(conf);
        byte[] line = java.util.Arrays.copyOf(json, json.length + 1);
        line[json.length] = '\n';
        return line;
    }

    private void startReaders() {
        Thread out = new Thread(this::readStdout, "sparktap-relay-status");
        out.setDaemon(true);
        out.start();
        Thread err = new Thread(this::readStderr, "sparktap-relay-log");
        err.setDaemon(true);
        err.start();
    }

    private void readStdout() {
        try (BufferedReader r = new BufferedReader(
                new InputStreamReader(process.getInputStream(), StandardCharsets.UTF_8))) {
            String line;
            while ((line = r.readLine()) != null) {
                handleStatus(line);
            }
        } catch (IOException | RuntimeException e) {
            // the process went away; isAlive() tells the writer
        } finally {
            outputClosed = true;
            ready.countDown();
            flushed.countDown();
        }
    }

    private void handleStatus(String line) {
        JsonNode node;
        try {
            node = MAPPER.readTree(line);
        } catch (IOException e) {
            return;
        }
        if (node == null || !node.isObject()) {
            return;
        }
        String kind = node.path("status").asText("");
        if (kind.equals("error")) {
            error = node.path("message").asText("relay reported an error");
            ready.countDown();
            return;
        }
        if (node.has("received")) {
            RelayStatus.Report r = new RelayStatus.Report();
            r.received = node.path("received").asLong();
            r.delivered = node.path("delivered").asLong();
            r.resent = node.path("resent").asLong();
            r.errors = node.path("errors").asLong();
            r.spooled = node.path("spooled").asLong();
            r.lost = node.path("lost").asLong();
            r.inFlight = node.path("in_flight").asLong();
            r.spoolPending = node.path("spool_pending").asLong();
            status.report(r);
        }
        if (kind.equals("ready")) {
            ready.countDown();
        } else if (kind.equals("flushed")) {
            flushed.countDown();
        }
    }

    private void readStderr() {
        int logged = 0;
        try (BufferedReader r = new BufferedReader(
                new InputStreamReader(process.getErrorStream(), StandardCharsets.UTF_8))) {
            String line;
            while ((line = r.readLine()) != null) {
                synchronized (lastStderr) {
                    lastStderr.addLast(line);
                    if (lastStderr.size() > 20) {
                        lastStderr.removeFirst();
                    }
                }
                if (ready.getCount() == 0 && error == null) {
                    if (logged < STDERR_LOG_LIMIT) {
                        log.warn("sparktap relay: {}", line);
                    } else if (logged == STDERR_LOG_LIMIT) {
                        log.warn("sparktap relay: further relay log lines are suppressed");
                    }
                    logged++;
                }
            }
        } catch (IOException | RuntimeException e) {
            // process gone
        }
    }

    /** Wait for the relay's "ready" line; false if it exited, reported an error, or timed out. */
    boolean awaitReady(long timeoutMs) throws InterruptedException {
        boolean signalled = ready.await(timeoutMs, TimeUnit.MILLISECONDS);
        return signalled && error == null && !outputClosed && process.isAlive();
    }

    /** Wait for the answer to a flush request. */
    boolean awaitFlushed(long timeoutMs) throws InterruptedException {
        return flushed.await(Math.max(0L, timeoutMs), TimeUnit.MILLISECONDS) && !outputClosed;
    }

    boolean alive() {
        return !outputClosed && process.isAlive();
    }

    long uptimeMs() {
        return System.currentTimeMillis() - startedAtMs;
    }

    /** Why the relay did not become ready: its own error line, else its exit code and last stderr line. */
    String failureReason(long waitedMs) {
        if (error != null) {
            return error;
        }
        String last;
        synchronized (lastStderr) {
            last = null;
            for (String line : lastStderr) {
                if (!line.trim().isEmpty()) {
                    last = line.trim();
                }
            }
        }
        String tail = last == null ? "" : ": " + Redactor.truncate(last, 300);
        try {
            if (process.waitFor(200, TimeUnit.MILLISECONDS)) {
                return "it exited with code " + process.exitValue() + tail;
            }
        } catch (InterruptedException ie) {
            Thread.currentThread().interrupt();
        }
        return "it did not report ready within " + waitedMs + " ms" + tail;
    }

    void control(String line) throws IOException {
        stdin.write(('#' + line + '\n').getBytes(StandardCharsets.UTF_8));
        stdin.flush();
    }

    /** Close stdin (EOF: the relay finishes) and wait up to timeoutMs for it to exit. */
    boolean closeAndWait(long timeoutMs) {
        try {
            stdin.close();
        } catch (IOException e) {
            // already gone
        }
        try {
            return process.waitFor(Math.max(0L, timeoutMs), TimeUnit.MILLISECONDS);
        } catch (InterruptedException ie) {
            Thread.currentThread().interrupt();
            return false;
        }
    }

    /** Only for a relay that never became ready: it is ours and of no use. */
    void kill() {
        try {
            stdin.close();
        } catch (IOException e) {
            // ignore
        }
        process.destroy();
    }
}
