package io.sparktap.listener;

import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.function.Consumer;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.apache.spark.scheduler.SparkListenerEvent;

/**
 * Spark Connect attribution (issue 26): the operation and session events of a Spark Connect server, and who ran a
 * job, read from its tags.
 *
 * <p>The events ({@code org.apache.spark.sql.connect.service.SparkListenerConnectOperationStarted} … {@code
 * SparkListenerConnectSessionClosed}, Spark 3.5 and 4.x) are matched by class name and read through reflection, so
 * nothing links against the Connect module: where it is absent (3.3, 3.4, a plain application) they never arrive.
 * Only {@code OperationStarted} names the user and session; the later ones name the operation and its job tag,
 * {@code SparkConnect_OperationTag_User_<u>_Session_<s>_Operation_<o>}, which Spark Connect also puts into
 * {@code spark.job.tags} of every job the operation runs: that tag (never a description) attributes the jobs.
 *
 * <p>The user id is whatever the client put into its connection string, so every id is a name a user chose: it goes
 * through {@link Redactor#name} where it is read (here, for every job, stage, task and SQL event that carries it),
 * and a Connect job tag is written again from those cleaned parts (issue 41: a 100,000-character or
 * {@code password=…} user id was copied raw into every event of its user).
 */
final class ConnectTracker {
    static final String PACKAGE = "org.apache.spark.sql.connect.service.SparkListenerConnect";
    static final String TAG_PREFIX = "SparkConnect_OperationTag_User_";
    private static final String SESSION = "_Session_";
    private static final String OPERATION = "_Operation_";
    private static final int MAX_OPERATIONS = 10_000;

    /** The Connect user, session and operation of a job ("" each outside Connect), each cleaned as a name. */
    static final class Who {
        static final Who NONE = new Who("", "", "");
        final String user;
        final String session;
        final String operation;

        private Who(String user, String session, String operation) {
            this.user = user;
            this.session = session;
            this.operation = operation;
        }

        /** Who, from the values as Spark has them: each through {@link Redactor#name}. */
        static Who of(String user, String session, String operation) {
            return new Who(clean(user), clean(session), clean(operation));
        }

        private static String clean(String value) {
            return value == null || value.isEmpty() ? "" : Redactor.name(value);
        }

        /** The Connect operation tag of this operation, written from the cleaned parts. */
        String tag() {
            return TAG_PREFIX + user + SESSION + session + OPERATION + operation;
        }

        boolean known() {
            return !operation.isEmpty() || !session.isEmpty() || !user.isEmpty();
        }

        void write(JsonOut out) throws java.io.IOException {
            if (known()) {
                out.str("user_id", user);
                out.str("session_id", session);
                out.str("operation_id", operation);
            }
        }
    }

    private static final class Started {
        final Who who;
        final long startMs;

        Started(Who who, long startMs) {
            this.who = who;
            this.startMs = startMs;
        }
    }

    private final Redactor redactor;
    private final Consumer<Event> sink;
    private final Map<String, Started> operations = new HashMap<>(); // operation id -> who and when it started

    ConnectTracker(Redactor redactor, Consumer<Event> sink) {
        this.redactor = redactor;
        this.sink = sink;
    }

    /**
     * The tags of {@code spark.job.tags} (comma-separated, as SparkContext sets them) as the application gave them,
     * empty when none. Spark 4 turns a session's {@code spark.addTag("team-x")} into the job tag {@code
     * spark-session-<uuid>-thread-<uuid>-team-x} and adds its own {@code spark-session-<uuid>} and {@code
     * spark-session-<uuid>-execution-root-id-<n>}, and Spark Connect a client's into {@code
     * SparkConnect_SessionTag_User_<u>_Session_<uuid>_Tag_team-x}: the user tag is kept, Spark's own are left out.
     */
    static List<String> tags(String property) {
        if (property == null || property.isEmpty()) {
            return Collections.emptyList();
        }
        List<String> out = new ArrayList<>();
        for (String raw : property.split(",")) {
            String tag = userTag(raw);
            if (tag != null && !tag.isEmpty() && !out.contains(tag)) {
                out.add(tag);
            }
        }
        return out;
    }

    private static final Pattern SESSION_TAG = Pattern.compile(
            "^spark-session-[0-9a-fA-F-]{36}(?:-thread-[0-9a-fA-F-]{36}-(.+)|-execution-root-id-[0-9]+)?$");

    /** Spark Connect's form of a client's {@code spark.addTag("team-x")}. */
    private static final Pattern CONNECT_SESSION_TAG = Pattern.compile(
            "^SparkConnect_SessionTag_User_.*_Session_[0-9a-fA-F-]{36}_Tag_(.+)$");

    /** A job tag as the application set it (see {@link #tags}); null for Spark's own. */
    static String userTag(String raw) {
        Matcher m = SESSION_TAG.matcher(raw);
        if (m.matches()) {
            return m.group(1);
        }
        Matcher connect = CONNECT_SESSION_TAG.matcher(raw);
        return connect.matches() ? connect.group(1) : raw;
    }

    /** Who a job belongs to, from its tags: the first Spark Connect operation tag, else {@link Who#NONE}. */
    static Who who(Iterable<String> tags) {
        for (String tag : tags) {
            Who who = parse(tag);
            if (who != null) {
                return who;
            }
        }
        return Who.NONE;
    }

    /** {@code SparkConnect_OperationTag_User_<u>_Session_<s>_Operation_<o>} -> who; null for any other tag. The
     * session and operation ids are UUIDs; the user id may hold underscores, so it is what lies between. */
    static Who parse(String tag) {
        if (tag == null || !tag.startsWith(TAG_PREFIX)) {
            return null;
        }
        int op = tag.lastIndexOf(OPERATION);
        int session = op < 0 ? -1 : tag.lastIndexOf(SESSION, op);
        if (op < 0 || session < TAG_PREFIX.length()) {
            return null;
        }
        return Who.of(tag.substring(TAG_PREFIX.length(), session), tag.substring(session + SESSION.length(), op),
                tag.substring(op + OPERATION.length()));
    }

    /**
     * A job tag as it may be sent: a Connect operation tag written again from its cleaned parts (its user id is a
     * name a user chose), any other tag cleaned as free text.
     */
    static String safeTag(Redactor redactor, String tag) {
        Who who = parse(tag);
        return who != null ? who.tag() : redactor.text(tag);
    }

    /** Handle the event if it is a Spark Connect one; false otherwise. */
    boolean handle(SparkListenerEvent e) throws ReflectiveOperationException {
        String name = e.getClass().getName();
        if (!name.startsWith(PACKAGE)) {
            return false;
        }
        String kind = name.substring(PACKAGE.length());
        long time = number(e, "eventTime");
        switch (kind) {
            case "OperationStarted":
                started(e, time);
                return true;
            case "OperationAnalyzed":
                operation(e, time, "analyzed", false);
                return true;
            case "OperationReadyForExecution":
                operation(e, time, "ready", false);
                return true;
            case "OperationFinished":
                operation(e, time, "finished", false);
                return true;
            case "OperationFailed":
                operation(e, time, "failed", false);
                return true;
            case "OperationCanceled":
                operation(e, time, "canceled", false);
                return true;
            case "OperationClosed":
                operation(e, time, "closed", true);
                return true;
            case "SessionStarted":
                session(e, time, "session_started");
                return true;
            case "SessionClosed":
                session(e, time, "session_closed");
                return true;
            default:
                return true; // ServiceStarted / ServiceEnd and anything newer: nothing to send
        }
    }

    private void started(SparkListenerEvent e, long time) throws ReflectiveOperationException {
        String operation = string(e, "operationId");
        Who who = Who.of(string(e, "userId"), string(e, "sessionId"), operation);
        if (operations.size() >= MAX_OPERATIONS) {
            operations.clear(); // operations never closed: never grow without bound
        }
        operations.put(operation, new Started(who, time));
        String userName = Redactor.name(string(e, "userName"));
        String statement = redactor.description(string(e, "statementText"), Redactor.TEXT_MAX_CHARS);
        String jobTag = safeTag(redactor, string(e, "jobTag"));
        List<String> sessionTags = new ArrayList<>();
        Object tags = Scala.optionalAccessor(e, "sparkSessionTags");
        if (tags instanceof scala.collection.Iterable) {
            for (Object tag : Scala.list((scala.collection.Iterable<?>) tags)) {
                sessionTags.add(redactor.text(String.valueOf(tag)));
            }
        }
        Collections.sort(sessionTags);
        sink.accept(Event.of(EventType.OPERATION, time, out -> {
            out.str("operation_id", who.operation);
            out.str("session_id", who.session);
            out.str("user_id", who.user);
            out.str("user_name", userName == null ? "" : userName);
            out.str("status", "started");
            out.str("statement", statement == null ? "" : statement);
            out.strings("session_tags", sessionTags);
            out.str("job_tag", jobTag == null ? "" : jobTag);
            out.num("start_time_ms", time);
        }));
    }

    private void operation(SparkListenerEvent e, long time, String status, boolean last)
            throws ReflectiveOperationException {
        String operation = string(e, "operationId");
        Started started = last ? operations.remove(operation) : operations.get(operation);
        String jobTag = string(e, "jobTag");
        Who who = started != null ? started.who : parse(jobTag);
        Who known = who != null ? who : Who.of("", "", operation);
        long startMs = started != null ? started.startMs : -1L;
        long rows = "finished".equals(status) ? optionalLong(e, "producedRowCount") : -1L;
        String error = "failed".equals(status) ? redactor.text(string(e, "errorMessage")) : null;
        String safeTag = safeTag(redactor, jobTag);
        sink.accept(Event.of(EventType.OPERATION, time, out -> {
            out.str("operation_id", known.operation);
            out.str("session_id", known.session);
            out.str("user_id", known.user);
            out.str("status", status);
            out.str("job_tag", safeTag == null ? "" : safeTag);
            out.optId("start_time_ms", startMs);
            out.optId("rows", rows);
            out.opt("error", error);
        }));
    }

    private void session(SparkListenerEvent e, long time, String status) throws ReflectiveOperationException {
        Who who = Who.of(string(e, "userId"), string(e, "sessionId"), "");
        sink.accept(Event.of(EventType.OPERATION, time, out -> {
            out.str("session_id", who.session);
            out.str("user_id", who.user);
            out.str("status", status);
        }));
    }

    void clear() {
        operations.clear();
    }

    private static String string(Object e, String accessor) throws ReflectiveOperationException {
        Object value = Scala.optionalAccessor(e, accessor);
        return value == null ? "" : String.valueOf(value);
    }

    private static long number(Object e, String accessor) throws ReflectiveOperationException {
        Object value = Scala.optionalAccessor(e, accessor);
        return value instanceof Number ? ((Number) value).longValue() : Clock.now();
    }

    private static long optionalLong(Object e, String accessor) throws ReflectiveOperationException {
        Object value = Scala.optionalValue(e, accessor);
        return value instanceof Number ? ((Number) value).longValue() : -1L;
    }
}
