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
 *       {@code redaction-patterns.txt} (credentials in URLs, secret assignments, {@code .option("password", …)},
 *       Azure keys and SAS signatures, bearer tokens) are masked, matches of {@code spark.sql.redaction.string.regex}
 *       are replaced as Spark's UI does, and the text is truncated.</li>
 * </ul>
 */
final class Redactor {
    static final String DEFAULT_REDACTION_REGEX = "(?i)secret|password|token|access[.]?key";
    static final String MASK = "*********(redacted)";

    private static final Set<String> ALLOWED_KEYS = Collections.unmodifiableSet(new HashSet<>(Arrays.asList(
            "spark.app.name",
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
     * Free text made safe to send: the shared patterns ({@value #PATTERNS_RESOURCE}) masked, Spark's
     * {@code spark.sql.redaction.string.regex} and {@code spark.redaction.string.regex} applied as Spark's UI does,
     * truncated.
     */
    String text(String value, int maxChars) {
        return scrub(value, maxChars, true);
    }

    /**
     * A job description or SQL text, per {@code spark.sparktap.descriptions}: null when off; redacted as
     * {@link #text}; with {@code full}, only the {@code url} patterns and Spark's own string redaction apply.
     */
    String description(String value, int maxChars) {
        if (descriptions == ListenerConfig.Descriptions.OFF) {
            return null;
        }
        return scrub(value, maxChars, descriptions == ListenerConfig.Descriptions.REDACTED);
    }

    private String scrub(String value, int maxChars, boolean secrets) {
        if (value == null) {
            return null;
        }
        String out = mask(value, secrets);
        for (Pattern p : textRedactionRegexes) {
            out = p.matcher(out).replaceAll(MASK);
        }
        return truncate(out, maxChars);
    }

    /** The shared patterns applied in order (the {@code secret} ones only when {@code secrets}). */
    String mask(String text, boolean secrets) {
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
            if (m.start(group) >= 0) {
                sb.append(text, last, m.start(group)).append(mask);
                last = m.end(group);
            }
        } while (m.find());
        sb.append(text, last, text.length());
        return sb.toString();
    }

    static String truncate(String value, int maxChars) {
        if (value == null || value.length() <= maxChars) {
            return value;
        }
        int end = maxChars;
        if (end > 0 && Character.isHighSurrogate(value.charAt(end - 1))) {
            end--;
        }
        return value.substring(0, end) + "…";
    }
}
