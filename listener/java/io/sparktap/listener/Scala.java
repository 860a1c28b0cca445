package io.sparktap.listener;

import java.lang.reflect.Method;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ConcurrentHashMap;

/**
 * Scala values read from Java in source that compiles against both Scala lines.
 *
 * <p>Scala 2.12 and 2.13 differ in their Java-facing converters ({@code scala.collection.JavaConverters} against
 * {@code scala.jdk.javaapi.CollectionConverters}) and in the type Spark's accessors return ({@code scala.collection.Seq}
 * against {@code scala.collection.immutable.Seq}); {@code scala.collection.Iterable} and {@code Iterator} are the
 * same on both. The binary still links on one Scala line only, which is why each line has its own jar
 * (docs/install-listener.md).
 */
final class Scala {
    private static final ConcurrentHashMap<String, Method> ACCESSORS = new ConcurrentHashMap<>();
    private static final Method ABSENT;

    static {
        try {
            ABSENT = Scala.class.getDeclaredMethod("absentMarker");
        } catch (NoSuchMethodException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    private Scala() {
    }

    @SuppressWarnings("unused")
    private static void absentMarker() {
    }

    static <T> List<T> list(scala.collection.Iterable<T> items) {
        List<T> out = new ArrayList<>();
        if (items == null) {
            return out;
        }
        scala.collection.Iterator<T> it = items.iterator();
        while (it.hasNext()) {
            out.add(it.next());
        }
        return out;
    }

    static int[] ints(scala.collection.Iterable<Object> ids) {
        List<Object> list = list(ids);
        int[] out = new int[list.size()];
        for (int i = 0; i < out.length; i++) {
            out[i] = ((Number) list.get(i)).intValue();
        }
        return out;
    }

    static long optionLong(scala.Option<Object> value) {
        return value != null && value.isDefined() ? ((Number) value.get()).longValue() : -1L;
    }

    /**
     * The value of a no-argument accessor that some supported Spark versions lack (e.g.
     * {@code SparkListenerSQLExecutionEnd.errorMessage}, new in 3.4), or null where this Spark has none.
     */
    static Object optionalAccessor(Object target, String name) throws ReflectiveOperationException {
        Class<?> cls = target.getClass();
        String key = cls.getName() + '#' + name;
        Method m = ACCESSORS.get(key);
        if (m == null) {
            try {
                m = cls.getMethod(name);
            } catch (NoSuchMethodException e) {
                m = ABSENT;
            }
            ACCESSORS.putIfAbsent(key, m);
        }
        return m == ABSENT ? null : m.invoke(target);
    }

    /** An optional accessor returning {@code Option[T]}: its value, or null when absent or None. */
    static Object optionalValue(Object target, String name) throws ReflectiveOperationException {
        Object value = optionalAccessor(target, name);
        if (value instanceof scala.Option && ((scala.Option<?>) value).isDefined()) {
            return ((scala.Option<?>) value).get();
        }
        return null;
    }
}
