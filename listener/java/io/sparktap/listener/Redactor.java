package io.sparktap.listener;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.regex.PatternSyntaxException;

import org.apache.spark.SparkConf;

import scala.Tuple2;

/**
 * What may leave the driver.
 *
 * <ul>
 *   <li>Spark properties: only an allow-list of names (app name, master, executor and driver sizing, dynamic
 *       allocation, AQE and shuffle settings); even then a value is dropped when its key or value matches
 *       {@code spark.redaction.regex} or the value carries anything the shared patterns mask.</li>
 *   <li>Free text (descriptions, failure messages, plan strings): the shared patterns of
 *       {@code redaction-patterns.txt} (credentials in URLs, secret assignments, {@code .option("password", …)} and
 *       Spark Connect's {@code options { key: "password" value: "…" }}, Azure keys and SAS signatures, bearer tokens,
 *       bare cloud key ids and token formats) are masked, matches of {@code spark.sql.redaction.string.regex} are
 *       replaced as Spark's UI does, control characters other than tab and newline are removed, and the text is cut
 *       to at most {@link #TEXT_MAX_CHARS} with a visible marker ({@link #truncate}).</li>
 *   <li>Names a user chooses (a Spark Connect user id, user name, session and operation ids, the application name,
 *       tag values): {@link #name}, the same with every control character removed and {@link #NAME_MAX_CHARS}.</li>
 * </ul>
 *
 * <p>Every value a user controls takes one of these two paths, and the collector takes it again
 * (schemas/types.py holds the same caps and marker; tests/unit/test_listener_redaction.py compares them). The work
 * per value is bounded: only the first {@code cap + }{@link #SCAN_SLACK_CHARS} characters are looked at, whatever
 * the value's length (issue 41: a 1 MB Connect user id made every event of its user too large for Kafka).
 */
final class Redactor {
    static final String DEFAULT_REDACTION_REGEX = "(?i)secret|password|token|access[.]?key";
    static final String MASK = "*********(redacted)";
    /** The cap of a name a user chooses (schemas/types.py NAME_MAX_CHARS): the contract's {@code Label} fields. */
    static final int NAME_MAX_CHARS = 256;
    /** The cap of free text (schemas/types.py TEXT_MAX_CHARS): the contract's plain string fields. */
    static final int TEXT_MAX_CHARS = 2000;
    /** Past the cap, this much more is still redacted, so a secret that straddles the cut is masked before it. */
    static final int SCAN_SLACK_CHARS = 1024;
    /** What replaces the cut end: {@code …[truncated N chars]} (schemas/types.py TRUNCATION_MARKER). */
    static final String TRUNCATED_PREFIX = "…[truncated ";
    static final String TRUNCATED_SUFFIX = " chars]";
    private static final Pattern[] NO_PATTERNS = new Pattern[0];

    private static final Set<String> ALLOWED_KEYS = Collections.unmodifiableSet(new HashSet<>(Arrays.asList(
            "spark.app.name",
            // the recurring job's key (detection/history.py): sparktap's own, Databricks' job, Airflow's task
            "spark.sparktap.job",
            "spark.databricks.job.id",
            "spark.openlineage.parentJobName",
            "spark.master",
            "spark.submit.deployMode",
            "spark.executor.memory",
            "spark.executor.memoryOverhead",
            "spark.executor.cores",
            "spark.executor.instances",
            "spark.driver.memory",
            "spark.driver.memoryOverhead",
            "spark.driver.cores",
            "spark.default.parallelism",
            "spark.task.cpus",
            "spark.memory.fraction",
            "spark.memory.storageFraction",
            "spark.memory.offHeap.enabled",
            "spark.memory.offHeap.size",
            "spark.speculation",
            "spark.serializer",
            "spark.sql.shuffle.partitions",
            "spark.sql.autoBroadcastJoinThreshold",
            "spark.sql.files.maxPartitionBytes",
            "spark.sql.files.openCostInBytes",
            "spark.sql.statistics.histogram.enabled",
            "spark.sparktap.cluster",
            "spark.sparktap.tasks")));
    private static final String[] ALLOWED_PREFIXES = {
        "spark.dynamicAllocation.", "spark.sql.adaptive.", "spark.sql.cbo.", "spark.shuffle.",
    };
    /** The mask of credentials inside a URL or connect string ({@code scheme://***@host}). */
    static final String URL_MASK = "***";
    /** The shared pattern set, a resource of this jar (the Python relay loads the same file). */
    static final String PATTERNS_RESOURCE = "redaction-patterns.txt";

    /** One pattern of {@value #PATTERNS_RESOURCE}: its last capturing group is the secret. */
    static final class SecretPattern {
        final boolean url;
        final Pattern pattern;

        SecretPattern(boolean url, Pattern pattern) {
            this.url = url;
            this.pattern = pattern;
        }
    }

    private final SecretPattern[] patterns;
    private final Pattern redactionRegex;
    private final Pattern[] textRedactionRegexes;
    private final ListenerConfig.Descriptions descriptions;

    Redactor(SecretPattern[] patterns, Pattern redactionRegex, Pattern[] textRedactionRegexes,
            ListenerConfig.Descriptions descriptions) {
        this.patterns = patterns;
        this.redactionRegex = redactionRegex;
        this.textRedactionRegexes = textRedactionRegexes;
        this.descriptions = descriptions;
    }

    /** The shared patterns for {@link #name}, loaded once; none when the file cannot be read (the listener is then
     * off anyway: {@link #from} fails on the same file). */
    private static final class Shared {
        static final SecretPattern[] PATTERNS = loadQuietly();

        private static SecretPattern[] loadQuietly() {
            try {
                return loadPatterns();
            } catch (IOException e) {
                return new SecretPattern[0];
            }
        }
    }

    /** A redactor with the shared patterns and Spark's defaults (no Spark conf): for tests and tools. */
    static Redactor withDefaults(ListenerConfig.Descriptions descriptions) throws IOException {
        return new Redactor(loadPatterns(), compile(DEFAULT_REDACTION_REGEX), new Pattern[0], descriptions);
    }

    static Redactor from(SparkConf conf, ListenerConfig.Descriptions descriptions) throws IOException {
        Pattern main = compile(conf.get("spark.redaction.regex", DEFAULT_REDACTION_REGEX));
        if (main == null) {
            main = compile(DEFAULT_REDACTION_REGEX);
        }
        java.util.List<Pattern> text = new java.util.ArrayList<>();
        for (String key : new String[] {"spark.sql.redaction.string.regex", "spark.redaction.string.regex"}) {
            String regex = conf.get(key, "");
            Pattern p = regex.isEmpty() ? null : compile(regex);
            if (p != null) {
                text.add(p);
            }
        }
        return new Redactor(loadPatterns(), main, text.toArray(new Pattern[0]), descriptions);
    }

    /** The patterns of {@value #PATTERNS_RESOURCE}, in order; IOException (listener off) when missing or bad. */
    static SecretPattern[] loadPatterns() throws IOException {
        try (InputStream in = Redactor.class.getResourceAsStream(PATTERNS_RESOURCE)) {
            if (in == null) {
                throw new IOException(PATTERNS_RESOURCE + " is missing from the listener jar: rebuild it "
                        + "(sparktap listener-jar --rebuild)");
            }
            return parsePatterns(new String(readAll(in), StandardCharsets.UTF_8));
        }
    }

    static SecretPattern[] parsePatterns(String text) throws IOException {
        List<SecretPattern> out = new ArrayList<>();
        int lineNo = 0;
        for (String raw : text.split("\n")) {
            lineNo++;
            String line = raw.endsWith("\r") ? raw.substring(0, raw.length() - 1) : raw;
            if (line.trim().isEmpty() || line.startsWith("#")) {
                continue;
            }
            int space = line.indexOf(' ');
            String kind = space < 0 ? line : line.substring(0, space);
            if (space < 0 || !(kind.equals("url") || kind.equals("secret"))) {
                throw new IOException(PATTERNS_RESOURCE + " line " + lineNo + ": expected \"url <regex>\" or "
                        + "\"secret <regex>\"");
            }
            try {
                Pattern p = Pattern.compile(line.substring(space + 1));
                if (p.matcher("").groupCount() < 1) {
                    throw new IOException(PATTERNS_RESOURCE + " line " + lineNo + ": the regex has no group");
                }
                out.add(new SecretPattern(kind.equals("url"), p));
            } catch (PatternSyntaxException e) {
                throw new IOException(PATTERNS_RESOURCE + " line " + lineNo + ": " + e.getDescription(), e);
            }
        }
        if (out.isEmpty()) {
            throw new IOException(PATTERNS_RESOURCE + " holds no pattern");
        }
        return out.toArray(new SecretPattern[0]);
    }

    private static byte[] readAll(InputStream in) throws IOException {
        ByteArrayOutputStream buf = new ByteArrayOutputStream();
        byte[] chunk = new byte[8192];
        for (int n = in.read(chunk); n >= 0; n = in.read(chunk)) {
            buf.write(chunk, 0, n);
        }
        return buf.toByteArray();
    }

    private static Pattern compile(String regex) {
        try {
            return Pattern.compile(regex);
        } catch (PatternSyntaxException e) {
            return null;
        }
    }

    static boolean allowedKey(String key) {
        if (ALLOWED_KEYS.contains(key)) {
            return true;
        }
        for (String prefix : ALLOWED_PREFIXES) {
            if (key.startsWith(prefix)) {
                return true;
            }
        }
        return false;
    }

    /** Whether a value carries something the shared patterns mask (a credential in a URL, a secret). */
    boolean hasSecrets(String value) {
        return !mask(value, true).equals(value);
    }

    /** Whether this property may be sent (allow-listed, and neither key nor value looks like a secret). */
    boolean propertyAllowed(String key, String value) {
        if (!allowedKey(key) || value == null) {
            return false;
        }
        if (redactionRegex.matcher(key).find() || redactionRegex.matcher(value).find()) {
            return false;
        }
        return !hasSecrets(value);
    }

    /** The allow-listed, redacted properties of this conf, sorted by name. */
    Map<String, String> properties(SparkConf conf) {
        Map<String, String> out = new TreeMap<>();
        for (Tuple2<String, String> kv : conf.getAll()) {
            if (propertyAllowed(kv._1(), kv._2())) {
                out.put(kv._1(), truncate(kv._2(), 1000));
            }
        }
        return out;
    }

    /**
     * A name a user chose (Connect user id, user name, session or operation id, application name, tag value), made
     * safe to send: every control character removed, the shared patterns masked, cut to {@link #NAME_MAX_CHARS} with
     * the marker. Static, so the Connect ids parsed out of job tags (where no conf is at hand) take the same path.
     */
    static String name(String value) {
        if (value == null) {
            return null;
        }
        return clean(value, NAME_MAX_CHARS, false, Shared.PATTERNS, true, NO_PATTERNS);
    }

    /** Free text made safe to send, cut to {@link #TEXT_MAX_CHARS}: see {@link #text(String, int)}. */
    String text(String value) {
        return text(value, TEXT_MAX_CHARS);
    }

    /**
     * Free text made safe to send: control characters other than tab and newline removed, the shared patterns
     * ({@value #PATTERNS_RESOURCE}) masked, Spark's {@code spark.sql.redaction.string.regex} and
     * {@code spark.redaction.string.regex} applied as Spark's UI does, cut to {@code maxChars} (at most
     * {@link #TEXT_MAX_CHARS}) with the marker.
     */
    String text(String value, int maxChars) {
        return clean(value, Math.min(maxChars, TEXT_MAX_CHARS), true, patterns, true, textRedactionRegexes);
    }

    /**
     * A job description or SQL text, per {@code spark.sparktap.descriptions}: null when off; redacted as
     * {@link #text}; with {@code full}, only the {@code url} patterns and Spark's own string redaction apply.
     */
    String description(String value, int maxChars) {
        if (descriptions == ListenerConfig.Descriptions.OFF) {
            return null;
        }
        return clean(value, Math.min(maxChars, TEXT_MAX_CHARS), true, patterns,
                descriptions == ListenerConfig.Descriptions.REDACTED, textRedactionRegexes);
    }

    /**
     * The one path of a user's value: look at no more than {@code cap + SCAN_SLACK_CHARS} characters, remove control
     * characters (keeping tab and newline in free text), mask, then cut to {@code cap} with the marker counting
     * everything left out.
     */
    private static String clean(String value, int cap, boolean freeText, SecretPattern[] patterns, boolean secrets,
            Pattern[] extra) {
        if (value == null) {
            return null;
        }
        int window = cap + SCAN_SLACK_CHARS;
        int unseen = 0;
        String head = value;
        if (value.length() > window) {
            int end = Character.isHighSurrogate(value.charAt(window - 1)) ? window - 1 : window;
            unseen = value.length() - end;
            head = value.substring(0, end);
        }
        String out = mask(stripControls(head, freeText), secrets, patterns);
        for (Pattern p : extra) {
            out = p.matcher(out).replaceAll(MASK);
        }
        return truncate(out, cap, unseen);
    }

    /**
     * {@code text} without control characters: C0 (tab and newline kept in free text), DEL and C1, and the line and
     * paragraph separators and bidirectional controls (U+2028-U+202E, U+2066-U+2069); removed rather than escaped, so a terminal, chat message or HTML page never receives one (issue 41, item 10).
     */
    static String stripControls(String text, boolean freeText) {
        int i = 0;
        int n = text.length();
        while (i < n && !isControl(text.charAt(i), freeText)) {
            i++;
        }
        if (i == n) {
            return text;
        }
        StringBuilder sb = new StringBuilder(n);
        sb.append(text, 0, i);
        for (; i < n; i++) {
            char c = text.charAt(i);
            if (!isControl(c, freeText)) {
                sb.append(c);
            }
        }
        return sb.toString();
    }

    private static boolean isControl(char c, boolean freeText) {
        if (c < 0x20) {
            return !(freeText && (c == '\t' || c == '\n'));
        }
        if (c < 0x2028) {
            return c >= 0x7f && c <= 0x9f;
        }
        // line and paragraph separators, and the bidirectional overrides and isolates that make a terminal show text
        // in another order than it is (CVE-2021-42574): listener/redaction.py's _INVISIBLE
        return c <= 0x202e || (c >= 0x2066 && c <= 0x2069);
    }

    /** The shared patterns applied in order (the {@code secret} ones only when {@code secrets}). */
    String mask(String text, boolean secrets) {
        return mask(text, secrets, patterns);
    }

    private static String mask(String text, boolean secrets, SecretPattern[] patterns) {
        String out = text;
        boolean at = text.indexOf('@') >= 0;
        for (SecretPattern p : patterns) {
            if (p.url ? at : secrets) {
                out = maskLastGroup(p.pattern, out, p.url ? URL_MASK : MASK);
            }
        }
        return out;
    }

    /** Every match of {@code p} with its last capturing group replaced by {@code mask}. */
    static String maskLastGroup(Pattern p, String text, String mask) {
        Matcher m = p.matcher(text);
        if (!m.find()) {
            return text;
        }
        int group = m.groupCount();
        StringBuilder sb = new StringBuilder(text.length());
        int last = 0;
        do {
            // a secret masked already (by an earlier pass) stays as it is: masking twice changes nothing
            if (m.start(group) >= 0 && !text.startsWith(mask, m.start(group))) {
                sb.append(text, last, m.start(group)).append(mask);
                last = m.end(group);
            }
        } while (m.find());
        sb.append(text, last, text.length());
        return sb.toString();
    }

    /** {@code value} cut to at most {@code maxChars} characters, marker included ({@link #truncate(String, int, int)}). */
    static String truncate(String value, int maxChars) {
        return truncate(value, maxChars, 0);
    }

    /**
     * {@code value} (followed by {@code unseen} characters already cut off) as at most {@code maxChars} characters:
     * when longer, its start and {@code …[truncated N chars]}, N counting every character left out. Never half a
     * surrogate pair. The result is never longer than {@code maxChars}, so cutting it again changes nothing.
     */
    static String truncate(String value, int maxChars, int unseen) {
        if (value == null || (unseen == 0 && value.length() <= maxChars)) {
            return value;
        }
        long total = (long) value.length() + unseen;
        int marker = TRUNCATED_PREFIX.length() + Long.toString(total).length() + TRUNCATED_SUFFIX.length();
        int end = Math.max(0, Math.min(value.length(), maxChars - marker));
        if (end > 0 && Character.isHighSurrogate(value.charAt(end - 1))) {
            end--;
        }
        String cut = TRUNCATED_PREFIX + (total - end) + TRUNCATED_SUFFIX;
        if (cut.length() > maxChars) {
            return cut.substring(0, maxChars); // a cap shorter than the marker: tests only
        }
        return value.substring(0, end) + cut;
    }
}
