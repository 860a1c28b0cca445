package io.sparktap.listener;

import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.DataInputStream;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

import org.apache.spark.SparkConf;
import org.apache.spark.SparkFirehoseListener;
import org.apache.spark.scheduler.ReplayListenerBus;
import org.apache.spark.scheduler.SparkListenerApplicationEnd;
import org.apache.spark.scheduler.SparkListenerApplicationStart;
import org.apache.spark.scheduler.SparkListenerEnvironmentUpdate;
import org.apache.spark.scheduler.SparkListenerEvent;
import org.apache.spark.scheduler.SparkListenerExecutorAdded;
import org.apache.spark.scheduler.SparkListenerExecutorRemoved;
import org.apache.spark.scheduler.SparkListenerJobEnd;
import org.apache.spark.scheduler.SparkListenerJobStart;
import org.apache.spark.scheduler.SparkListenerLogStart;
import org.apache.spark.scheduler.SparkListenerStageCompleted;
import org.apache.spark.scheduler.SparkListenerStageSubmitted;
import org.apache.spark.scheduler.SparkListenerTaskEnd;
import org.apache.spark.scheduler.SparkListenerTaskStart;

import scala.Option;
import scala.Tuple2;

/**
 * {@code sparktap import}'s JVM: replays Spark event logs with Spark's own {@link ReplayListenerBus} into the
 * listener's own {@link SparkTapListener} facade and {@link ListenerCore}, so an imported event is made by the very
 * code that makes the live one. Run by {@code sparktap.history.jvm} with the Spark jars and this jar on the class path.
 *
 * <p>Protocol. stdin: requests framed by length, never by a separator (a log's name may hold any byte but NUL, newlines
 * included), each: a long request id, a byte kind, then the log's path (an int length and its UTF-8 bytes); kind
 * {@link ReplayRequest#PATH}: the path is opened here (a URI through Hadoop's FileSystem, or a local path);
 * kind {@link ReplayRequest#OPENED}: a byte in-progress flag and an int count of files, each its name (codec and
 * messages) and the path to open it by (the importer's already opened and checked file, {@code /proc/PID/fd/N}).
 * EOF ends.
 * stdout, per log: {@code #{"id":N,"log":...,"begin":true}}; {@code #{"id":N,"attempt":...}} once the application
 * is known; one line per contract event, {@code <seq> <event_type>} TAB the event's JSON;
 * {@code #{"id":N,"log":...,"end":true,...}} with the complete lines read, the bytes, and where and why it stopped
 * early. Arguments: {@code --cluster NAME} overrides the cluster (otherwise the log's spark.sparktap.cluster, or
 * "default"); {@code --max-line-bytes N} caps a line (a longer one stops the log, read no further than the cap).
 */
public final class ReplayMain {
    /** A line longer than this stops its log (a 90 KB zstd file can hold a 2 GiB line): the importer's default. */
    static final long DEFAULT_MAX_LINE_BYTES = 64L << 20;
    private final OutputStream out;
    private final String clusterOverride;
    private final SparkLine line;
    private final long maxLineBytes;
    /** The id of the request being replayed, on every control line, so the importer matches answers to requests. */
    private long requestId;

    private ReplayMain(OutputStream out, String clusterOverride, SparkLine line, long maxLineBytes) {
        this.out = out;
        this.clusterOverride = clusterOverride;
        this.line = line;
        this.maxLineBytes = maxLineBytes;
    }

    public static void main(String[] args) throws Exception {
        String cluster = null;
        long maxLine = DEFAULT_MAX_LINE_BYTES;
        for (int i = 0; i < args.length; i++) {
            if (args[i].equals("--cluster") && i + 1 < args.length) {
                cluster = args[++i];
            } else if (args[i].equals("--max-line-bytes") && i + 1 < args.length) {
                maxLine = Long.parseLong(args[++i]);
            }
        }
        SparkLine jarLine = SparkLine.ofThisJar();
        String problem = jarLine.problem();
        OutputStream out = new BufferedOutputStream(new FileOutputStream(FileDescriptor.out), 1 << 16);
        if (problem != null) {
            out.write(("#{\"fatal\":" + CallbackErrors.quote(problem) + "}\n").getBytes(StandardCharsets.UTF_8));
            out.flush();
            System.exit(3);
        }
        ReplayMain main = new ReplayMain(out, cluster, jarLine, maxLine);
        DataInputStream in = new DataInputStream(new BufferedInputStream(System.in, 1 << 16));
        while (true) {
            ReplayRequest request;
            try {
                request = ReplayRequest.read(in);
            } catch (IOException e) {
                out.write(("#{\"fatal\":" + CallbackErrors.quote("a request the replay cannot read: " + e.getMessage())
                        + "}\n").getBytes(StandardCharsets.UTF_8));
                out.flush();
                System.exit(3);
                return;
            }
            if (request == null) {
                break;
            }
            main.replayOne(request);
            out.flush();
        }
        out.flush();
        System.exit(0); // Spark's non-daemon threads (if any) must not keep the JVM up
    }

    private void control(String json) throws IOException {
        // every control message is a JSON object: its id goes first, in front of the object's own fields
        byte[] body = json.getBytes(StandardCharsets.UTF_8);
        out.write('#');
        out.write(("{\"id\":" + requestId + ",").getBytes(StandardCharsets.US_ASCII));
        out.write(body, 1, body.length - 1);
        out.write('\n');
    }

    private void replayOne(ReplayRequest request) throws IOException {
        requestId = request.id;
        String path = request.path;
        String q = CallbackErrors.quote(path);
        control("{\"log\":" + q + ",\"begin\":true}");
        Clock.replayReset();
        ReplayFiles.Log log;
        try {
            log = request.opened != null ? request.opened : ReplayFiles.open(path);
            for (ReplayFiles.LogFile f : log.files) {
                ReplayLines.codecOf(f.name()); // an unknown codec: one line, before any event
                if (!f.readable()) {
                    throw new IOException("file=\"" + f.name() + "\" is not readable (permissions)");
                }
            }
        } catch (IOException | RuntimeException e) {
            String why = e.getMessage() == null ? e.getClass().getSimpleName() : e.getMessage();
            control("{\"log\":" + q + ",\"end\":true,\"skipped\":" + CallbackErrors.quote(why) + "}");
            return;
        }
        ReplayLines lines = new ReplayLines(log.files, maxLineBytes);
        Replayer replayer = new Replayer();
        ReplayListenerBus bus = new ReplayListenerBus();
        bus.addListener(replayer);
        boolean finished;
        try {
            finished = bus.replay(new Trimmed(lines, replayer), path, false, new Unparsed(replayer));
        } catch (Exception e) { // Scala declares none: an IOException comes through too
            finished = false;
        }
        replayer.flush();
        String stop = null;
        if (!finished) {
            // Spark logs the parse error (off in the import's log4j conf) and returns false, or throws: either way
            // the line it stopped at is the last one handed out
            stop = "line " + lines.lastLine + " of file=\"" + lines.lastFile + "\" is not a Spark event (malformed "
                    + "JSON or an unknown event layout): the events before it were imported";
        } else if (lines.stop != null) {
            stop = lines.stop;
        }
        StringBuilder end = new StringBuilder(256);
        end.append("{\"log\":").append(q).append(",\"end\":true,\"lines\":").append(lines.lines)
                .append(",\"bytes\":").append(lines.bytesRead()).append(",\"events\":").append(replayer.written)
                .append(",\"in_progress\":").append(log.inProgress)
                .append(",\"partial_tail\":").append(finished && lines.partialTail);
        if (stop != null) {
            end.append(",\"stopped\":").append(CallbackErrors.quote(stop));
        }
        if (replayer.off != null) {
            end.append(",\"skipped\":").append(CallbackErrors.quote(replayer.off));
        }
        end.append('}');
        control(end.toString());
    }

    /**
     * The lines Spark's {@code ReplayListenerBus} need not parse: a task start, once the listener is built. The
     * listener does nothing with it but move the replay clock to its launch time, which this reads from the line
     * (JSON parsing is most of a replay's CPU, and a log has a task start per task end). Spark's event JSON always
     * begins with its "Event" field. A line that does not end as an object does is parsed (and reported if bad).
     */
    static final class Unparsed extends scala.runtime.AbstractFunction1<String, Object> {
        static final String TASK_START = "{\"Event\":\"SparkListenerTaskStart\",";
        static final String LAUNCH_TIME = "\"Launch Time\":";
        private final Replayer replayer;

        Unparsed(Replayer replayer) {
            this.replayer = replayer;
        }

        @Override
        public Object apply(String line) {
            if (!replayer.started || !line.startsWith(TASK_START) || !line.endsWith("}")) {
                return Boolean.TRUE;
            }
            int at = line.indexOf(LAUNCH_TIME);
            if (at < 0) {
                return Boolean.TRUE;
            }
            long t = 0;
            int i = at + LAUNCH_TIME.length();
            int digits = 0;
            while (i < line.length() && digits < 19) {
                char c = line.charAt(i);
                if (c < '0' || c > '9') {
                    break;
                }
                t = t * 10 + (c - '0');
                i++;
                digits++;
            }
            if (digits == 0 || i >= line.length() || (line.charAt(i) != ',' && line.charAt(i) != '}')) {
                return Boolean.TRUE; // not the layout expected: Spark parses it
            }
            if (t > 0) {
                Clock.replayed(t); // what ReplayMain.timeOf would give the parsed event
            }
            return Boolean.FALSE;
        }
    }

    /**
     * The lines of a log as Spark's {@code ReplayListenerBus} parses them, with two things of a task end left out,
     * which the listener never reads: the {@code "Accumulables"} of its {@code "Task Info"} but the few the stage's
     * SQL metric totals sum ({@link StageSqlSums}; the task's accumulator updates are a third of a task end's bytes
     * and a good share of its parsing; the listener takes a task's figures from its {@code "Task Metrics"}), and the
     * {@code "Push Based Shuffle"} counters of its shuffle read metrics. Only once the listener is built; a line
     * whose layout is not the expected one goes to Spark as it is.
     */
    static final class Trimmed extends scala.collection.AbstractIterator<String> {
        static final String TASK_END = "{\"Event\":\"SparkListenerTaskEnd\",";
        static final String TASK_INFO = "\"Task Info\":{";
        static final String ACCUMULABLES = "\"Accumulables\":[";
        static final String NAME = "\"Name\":\"";
        static final String SHUFFLE_READ = "\"Shuffle Read Metrics\":{";
        static final String PUSH_SHUFFLE = ",\"Push Based Shuffle\":{";
        private final scala.collection.Iterator<String> lines;
        private final Replayer replayer;

        Trimmed(scala.collection.Iterator<String> lines, Replayer replayer) {
            this.lines = lines;
            this.replayer = replayer;
        }

        @Override
        public boolean hasNext() {
            return lines.hasNext();
        }

        @Override
        public String next() {
            String line = lines.next();
            return replayer.started && line.startsWith(TASK_END) ? withoutPushShuffle(withoutAccumulables(line)) : line;
        }

        /**
         * The line without its shuffle read's {@code "Push Based Shuffle"} object (Spark 3.2+: nine merged-fetch
         * counters the listener never reads; Spark 3.3 to 4.x read a task end without it as one with zeros there),
         * or the line itself.
         */
        static String withoutPushShuffle(String line) {
            int read = line.indexOf(SHUFFLE_READ);
            if (read < 0) {
                return line;
            }
            int key = line.indexOf(PUSH_SHUFFLE, read + SHUFFLE_READ.length());
            if (key < 0) {
                return line;
            }
            int open = key + PUSH_SHUFFLE.length() - 1;
            int close = matchingBracket(line, open);
            if (close < 0 || close + 1 >= line.length() || line.charAt(close + 1) != '}') {
                return line; // not the last field of the shuffle read metrics, as Spark writes it
            }
            return new StringBuilder(line.length() - (close + 1 - key)).append(line, 0, key)
                    .append(line, close + 1, line.length()).toString();
        }

        /**
         * The line with its task info's accumulables emptied but for the summed ones, or the line itself when it has
         * none to empty.
         */
        static String withoutAccumulables(String line) {
            int info = line.indexOf(TASK_INFO);
            if (info < 0) {
                return line;
            }
            int key = line.indexOf(ACCUMULABLES, info + TASK_INFO.length());
            if (key < 0) {
                return line;
            }
            int open = key + ACCUMULABLES.length() - 1;
            int close = matchingBracket(line, open);
            if (close < 0 || close == open + 1 || close + 1 >= line.length()) {
                return line; // malformed (Spark reports it), or already empty
            }
            char after = line.charAt(close + 1);
            if (after != '}' && after != ',') {
                return line;
            }
            StringBuilder out = new StringBuilder(line.length()).append(line, 0, open + 1);
            keepSummed(line, open + 1, close, out);
            return out.append(line, close, line.length()).toString();
        }

        /**
         * Of the accumulables between {@code from} and {@code to}, the ones the stage's SQL metric totals read
         * ({@link StageSqlSums#summed}): a few objects of a task's dozens (Photon: over a hundred).
         */
        private static void keepSummed(String line, int from, int to, StringBuilder out) {
            boolean first = true;
            int i = line.indexOf('{', from);
            while (i >= 0 && i < to) {
                int end = matchingBracket(line, i);
                if (end < 0 || end > to) {
                    return;
                }
                int name = line.indexOf(NAME, i);
                if (name > 0 && name < end) {
                    int start = name + NAME.length();
                    int quote = line.indexOf('"', start);
                    if (quote > 0 && quote < end && !escaped(line, start, quote)
                            && StageSqlSums.summed(line.substring(start, quote))) {
                        out.append(first ? "" : ",").append(line, i, end + 1);
                        first = false;
                    }
                }
                i = line.indexOf('{', end + 1);
            }
        }

        /** Whether a backslash stands in [from, to): a name with an escape, which no summed name has. */
        private static boolean escaped(String s, int from, int to) {
            for (int i = from; i < to; i++) {
                if (s.charAt(i) == '\\') {
                    return true;
                }
            }
            return false;
        }

        /** Index of the ']' or '}' closing what opens at {@code open}, strings and nesting skipped, or -1. */
        static int matchingBracket(String s, int open) {
            int depth = 0;
            boolean inString = false;
            for (int i = open; i < s.length(); i++) {
                char c = s.charAt(i);
                if (inString) {
                    if (c == '\\') {
                        i++;
                    } else if (c == '"') {
                        inString = false;
                    }
                } else if (c == '"') {
                    inString = true;
                } else if (c == '[' || c == '{') {
                    depth++;
                } else if (c == ']' || c == '}') {
                    depth--;
                    if (depth == 0) {
                        return (c == ']') == (s.charAt(open) == '[') ? i : -1;
                    }
                }
            }
            return -1;
        }
    }

    /**
     * Receives every replayed event: builds the listener (core and facade) from the log's Spark properties at the
     * first environment update (or application start), moves the replay clock, and hands the event to the facade
     * through a bus of its own, exactly as Spark's listener bus does live.
     */
    private final class Replayer extends SparkFirehoseListener {
        private final ReplayListenerBus facadeBus = new ReplayListenerBus();
        private ListenerCore core;
        private JsonOut json;
        private String sparkVersion;
        private boolean started;
        /** Events before the listener could be built (e.g. a local executor added before the environment). */
        private final List<SparkListenerEvent> early = new ArrayList<>();
        String off;
        long written;

        @Override
        public void onEvent(SparkListenerEvent e) {
            try {
                handle(e);
            } catch (IOException ex) {
                throw new java.io.UncheckedIOException(ex);
            }
        }

        private void handle(SparkListenerEvent e) throws IOException {
            if (e instanceof SparkListenerLogStart) {
                sparkVersion = ((SparkListenerLogStart) e).sparkVersion();
            }
            if (!started) {
                if (e instanceof SparkListenerEnvironmentUpdate) {
                    start(properties((SparkListenerEnvironmentUpdate) e));
                } else if (e instanceof SparkListenerApplicationStart) {
                    SparkListenerApplicationStart s = (SparkListenerApplicationStart) e;
                    SparkConf conf = new SparkConf(false);
                    conf.set("spark.app.id", s.appId().isDefined() ? s.appId().get() : "unknown-app");
                    conf.set("spark.app.name", s.appName());
                    if (s.appAttemptId().isDefined()) {
                        conf.set("spark.app.attempt.id", s.appAttemptId().get());
                    }
                    start(conf);
                }
            }
            if (!started) {
                if (early.size() < 10_000) {
                    early.add(e); // the live listener is registered before these are delivered: it sees them
                }
                return;
            }
            if (!early.isEmpty()) {
                List<SparkListenerEvent> before = new ArrayList<>(early);
                early.clear();
                for (SparkListenerEvent b : before) {
                    post(b);
                }
            }
            post(e);
        }

        private void post(SparkListenerEvent e) {
            long t = timeOf(e);
            if (t > 0) {
                Clock.replayed(t);
            }
            if (core != null && core.active) {
                facadeBus.postToAll(e);
                flush();
            }
        }

        private void start(SparkConf conf) throws IOException {
            started = true;
            conf.set("spark.sparktap.enabled", "true");
            if (conf.get("spark.sparktap.kafka.bootstrap.servers", "").trim().isEmpty()) {
                conf.set("spark.sparktap.kafka.bootstrap.servers", "replay"); // never used: no relay on replay
            }
            conf.set("spark.sparktap.queueCapacity", "1000000"); // drained after every event: never full
            if (clusterOverride != null) {
                conf.set("spark.sparktap.cluster", clusterOverride);
            }
            ListenerCore c = new ListenerCore(conf, line, true);
            if (!c.active) {
                off = "the log's spark.sparktap settings keep the listener off: " + c.offReason();
                return;
            }
            c.replaySparkVersion = sparkVersion;
            core = c;
            facadeBus.addListener(new SparkTapListener(c));
            JsonOut.Envelope env = c.envelope();
            json = new JsonOut(env);
            control("{\"attempt\":true,\"cluster\":" + CallbackErrors.quote(env.cluster) + ",\"app_id\":"
                    + CallbackErrors.quote(env.appId) + ",\"app_attempt\":" + CallbackErrors.quote(env.appAttempt)
                    + ",\"app_name\":" + CallbackErrors.quote(env.appName) + ",\"spark_version\":"
                    + CallbackErrors.quote(sparkVersion == null ? "" : sparkVersion) + "}");
        }

        void flush() {
            if (core == null) {
                return;
            }
            core.drainReplayed(ev -> {
                try {
                    json.event(ev);
                    out.write(Long.toString(ev.seq).getBytes(StandardCharsets.US_ASCII));
                    out.write(' ');
                    out.write(ev.type.wire.getBytes(StandardCharsets.US_ASCII));
                    out.write('\t');
                    out.write(json.array(), 0, json.size());
                    written++;
                } catch (IOException ex) {
                    throw new java.io.UncheckedIOException(ex);
                }
            });
        }
    }

    static SparkConf properties(SparkListenerEnvironmentUpdate e) {
        SparkConf conf = new SparkConf(false);
        Option<?> props = e.environmentDetails().get("Spark Properties");
        if (props.isDefined()) {
            @SuppressWarnings("unchecked")
            scala.collection.Iterable<Object> pairs = (scala.collection.Iterable<Object>) props.get();
            for (Object kv : Scala.list(pairs)) {
                Tuple2<?, ?> t = (Tuple2<?, ?>) kv;
                conf.set(String.valueOf(t._1()), String.valueOf(t._2()));
            }
        }
        return conf;
    }

    /** The time an event carries (ms since the epoch), or -1. */
    static long timeOf(SparkListenerEvent e) {
        if (e instanceof SparkListenerTaskEnd) {
            return ((SparkListenerTaskEnd) e).taskInfo().finishTime();
        } else if (e instanceof SparkListenerTaskStart) {
            return ((SparkListenerTaskStart) e).taskInfo().launchTime();
        } else if (e instanceof SparkListenerStageSubmitted) {
            return Scala.optionLong(((SparkListenerStageSubmitted) e).stageInfo().submissionTime());
        } else if (e instanceof SparkListenerStageCompleted) {
            return Scala.optionLong(((SparkListenerStageCompleted) e).stageInfo().completionTime());
        } else if (e instanceof SparkListenerJobStart) {
            return ((SparkListenerJobStart) e).time();
        } else if (e instanceof SparkListenerJobEnd) {
            return ((SparkListenerJobEnd) e).time();
        } else if (e instanceof SparkListenerApplicationStart) {
            return ((SparkListenerApplicationStart) e).time();
        } else if (e instanceof SparkListenerApplicationEnd) {
            return ((SparkListenerApplicationEnd) e).time();
        } else if (e instanceof SparkListenerExecutorAdded) {
            return ((SparkListenerExecutorAdded) e).time();
        } else if (e instanceof SparkListenerExecutorRemoved) {
            return ((SparkListenerExecutorRemoved) e).time();
        }
        try {
            return ReplaySqlTimes.timeOf(e);
        } catch (LinkageError noSql) {
            return -1L;
        }
    }
}
