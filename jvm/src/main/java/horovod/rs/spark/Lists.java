package horovod.rs.spark;

import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.List;

/**
 * Unmodifiable lists, as Java 9's {@code List.of} and Java 10's {@code List.copyOf} make them: the
 * Spark 3.5 jars are compiled for Java 8, which has neither. For this jar's own classes.
 */
public final class Lists {
    private Lists() {}

    /** An unmodifiable list of {@code items}, copied (a later change to the array does not show). */
    @SafeVarargs
    public static <T> List<T> of(T... items) {
        List<T> list = new ArrayList<>(items.length);
        for (T item : items) {
            list.add(item);
        }
        return Collections.unmodifiableList(list);
    }

    /** An unmodifiable copy of {@code items}. */
    public static <T> List<T> copyOf(Collection<? extends T> items) {
        return Collections.unmodifiableList(new ArrayList<>(items));
    }
}
