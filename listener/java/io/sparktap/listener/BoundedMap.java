package io.sparktap.listener;

import java.util.LinkedHashMap;
import java.util.Map;

/** A map in insertion order that drops its oldest entry beyond {@code max} entries (bus thread only). */
final class BoundedMap<K, V> extends LinkedHashMap<K, V> {
    private static final long serialVersionUID = 1L;
    private final int max;

    BoundedMap(int max) {
        super(256, 0.75f, false);
        this.max = max;
    }

    @Override
    protected boolean removeEldestEntry(Map.Entry<K, V> eldest) {
        return size() > max;
    }
}
