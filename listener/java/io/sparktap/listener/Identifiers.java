package io.sparktap.listener;

import java.util.regex.Pattern;

/**
 * The identifiers every event carries ({@code cluster}, {@code app_id}, {@code app_attempt}) are data that
 * dashboards and detection rules filter on: they must match one strict character set and length, the same the
 * collector checks again (schemas/types.py, docs/architecture.md's contract "Identifiers"). No backslash, quote, {@code $}, brace,
 * whitespace or control character can reach a query through them.
 */
final class Identifiers {
    static final int MAX_LENGTH = 128;
    /** schemas/types.py's IDENTIFIER_PATTERN verbatim (tests/unit/test_listener_identifiers.py compares them). */
    static final String IDENTIFIER_PATTERN = "^[A-Za-z0-9][A-Za-z0-9._:@/+=-]{0,127}$";
    static final Pattern PATTERN = Pattern.compile(IDENTIFIER_PATTERN);
    /** The rule in words, for the one-line error. */
    static final String RULE = "1-" + MAX_LENGTH + " ASCII letters, digits and . _ : @ / + = -, starting with a "
            + "letter or digit";

    private Identifiers() {
    }

    static boolean valid(String value) {
        return value != null && PATTERN.matcher(value).matches();
    }

    /** Null when {@code value} is a valid identifier, else one line: which setting, what it holds, the rule, the fix. */
    static String problem(String key, String value, String fix) {
        if (valid(value)) {
            return null;
        }
        return key + "=" + shown(value) + " is not a valid identifier: use " + RULE + " (" + fix + ")";
    }

    /** The value quoted for a log line: at most 64 characters, control and non-ASCII characters escaped. */
    static String shown(String value) {
        if (value == null) {
            return "null";
        }
        StringBuilder sb = new StringBuilder("\"");
        int n = Math.min(value.length(), 64);
        for (int i = 0; i < n; i++) {
            char c = value.charAt(i);
            if (c == '"' || c == '\\') {
                sb.append('\\').append(c);
            } else if (c < 0x20 || c >= 0x7f) {
                sb.append(String.format("\\u%04x", (int) c));
            } else {
                sb.append(c);
            }
        }
        if (value.length() > n) {
            sb.append("…(").append(value.length()).append(" characters)");
        }
        return sb.append('"').toString();
    }
}
