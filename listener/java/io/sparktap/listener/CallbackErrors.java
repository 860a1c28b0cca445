package io.sparktap.listener;

import java.util.concurrent.atomic.AtomicLong;

import com.fasterxml.jackson.core.io.JsonStringEncoder;

/** How many callbacks failed, and the first failure (where, what), for {@code listener_health}. */
final class CallbackErrors {
    private final AtomicLong count = new AtomicLong();
    private volatile String first;

    void record(String where, Throwable t, Redactor redactor) {
        count.incrementAndGet();
        if (first == null) {
            String text = where + ": " + t;
            synchronized (this) {
                if (first == null) {
                    first = redactor != null ? redactor.text(text, 500) : Redactor.truncate(text, 500);
                }
            }
        }
    }

    long count() {
        return count.get();
    }

    /** The first failure, or null. */
    String first() {
        return first;
    }

    static String quote(String value) {
        return "\"" + new String(JsonStringEncoder.getInstance().quoteAsString(value)) + "\"";
    }
}
