package io.sparktap.listener;

import java.util.Arrays;
import java.util.Collections;
import java.util.HashSet;
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
 *       {@code spark.redaction.regex} or the value carries credentials in a URL.</li>
 *   <li>Free text (descriptions, failure messages, plan strings): credentials in URLs are masked, matches of
 *       {@code spark.sql.redaction.string.regex} are replaced as Spark's UI does, and the text is truncated.</li>
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
            "spark.sparktap.cluster",
            "spark.sparktap.tasks")));
    private static final String[] ALLOWED_PREFIXES = {
        "spark.dynamicAllocation.", "spark.sql.adaptive.", "spark.shuffle.",
    };
    /** scheme://user:password@ — the user-info part is what must never leave. */
    private static final Pattern URL_CREDENTIALS =
            Pattern.compile("([A-Za-z][A-Za-z0-9+.\\-]*://)[^/\\s@:]*:[^/\\s@]*@");

    /**
     * Secrets written into free text: {@code key=value} / {@code key: value} / {@code key="value"} where the key
     * names a password, secret, token, API or access key or credential (JAAS {@code password="…"} included), SQL's
     * {@code PASSWORD '…'} and {@code IDENTIFIED BY '…'}, and bearer tokens. The key stays, the value is masked.
     */
    static final Pattern DEFAULT_TEXT_SECRETS = Pattern.compile(
            "(?i)([\\w.\\-]*(?:password|passwd|pwd|secret|token|api[_.\\-]?key|access[_.\\-]?key|credential)[\\w.\\-]*"
            + "['\"]?\\s*(?:=|:)\\s*)('[^']*'|\"[^\"]*\"|[^\\s,;&)'\"]+)"
            + "|((?:password|identified\\s+by)\\s+)('[^']*'|\"[^\"]*\")"
            + "|(bearer\\s+)([A-Za-z0-9._~+/=\\-]+)");

    private final Pattern redactionRegex;
    private final Pattern[] textRedactionRegexes;
    private final ListenerConfig.Descriptions descriptions;

    Redactor(Pattern redactionRegex, Pattern[] textRedactionRegexes, ListenerConfig.Descriptions descriptions) {
        this.redactionRegex = redactionRegex;
        this.textRedactionRegexes = textRedactionRegexes;
        this.descriptions = descriptions;
    }

    static Redactor from(SparkConf conf, ListenerConfig.Descriptions descriptions) {
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
        return new Redactor(main, text.toArray(new Pattern[0]), descriptions);
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

    static boolean hasUrlCredentials(String value) {
        return value.contains("@") && URL_CREDENTIALS.matcher(value).find();
    }

    /** Whether this property may be sent (allow-listed, and neither key nor value looks like a secret). */
    boolean propertyAllowed(String key, String value) {
        if (!allowedKey(key) || value == null) {
            return false;
        }
        if (redactionRegex.matcher(key).find() || redactionRegex.matcher(value).find()) {
            return false;
        }
        return !hasUrlCredentials(value);
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
     * Free text made safe to send: URL credentials masked, secret assignments masked
     * ({@link #DEFAULT_TEXT_SECRETS}), Spark's {@code spark.sql.redaction.string.regex} and
     * {@code spark.redaction.string.regex} applied as Spark's UI does, truncated.
     */
    String text(String value, int maxChars) {
        return scrub(value, maxChars, true);
    }

    /**
     * A job description or SQL text, per {@code spark.sparktap.descriptions}: null when off; redacted as
     * {@link #text}; with {@code full}, without the default secret pattern (URL credentials and Spark's own
     * string redaction still apply).
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
        String out = value;
        if (out.indexOf('@') >= 0) {
            Matcher m = URL_CREDENTIALS.matcher(out);
            if (m.find()) {
                out = m.replaceAll("$1***@");
            }
        }
        if (secrets) {
            out = maskSecrets(out);
        }
        for (Pattern p : textRedactionRegexes) {
            out = p.matcher(out).replaceAll(MASK);
        }
        return truncate(out, maxChars);
    }

    static String maskSecrets(String text) {
        Matcher m = DEFAULT_TEXT_SECRETS.matcher(text);
        if (!m.find()) {
            return text;
        }
        StringBuffer sb = new StringBuffer(text.length());
        do {
            int group = m.group(1) != null ? 1 : m.group(3) != null ? 3 : 5;
            m.appendReplacement(sb, Matcher.quoteReplacement(m.group(group) + MASK));
        } while (m.find());
        m.appendTail(sb);
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
