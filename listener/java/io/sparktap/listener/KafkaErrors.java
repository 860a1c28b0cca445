package io.sparktap.listener;

/** What the JVM producer's writer makes of the Kafka client's exceptions ({@link KafkaWriter}). */
final class KafkaErrors {
    private KafkaErrors() {
    }

    /** The message of a client exception, without any configuration value (the Java client quotes none). */
    static String safeMessage(Throwable e) {
        Throwable root = e;
        while (root.getCause() != null && root.getCause() != root) {
            root = root.getCause();
        }
        String m = root.getClass().getSimpleName() + ": " + String.valueOf(root.getMessage());
        return Redactor.truncate(m.replaceAll("(?i)(password|secret|token)\\S*", "$1=<redacted>"), 300);
    }

    /** Errors no resend can fix: the record itself is refused (too large, invalid), as the relay's _PERMANENT. */
    static boolean permanent(Exception ex) {
        return ex instanceof org.apache.kafka.common.errors.RecordTooLargeException
                || ex instanceof org.apache.kafka.common.InvalidRecordException
                || ex instanceof org.apache.kafka.common.errors.RecordBatchTooLargeException;
    }
}
