package horovod.rs.spark;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertThrows;
import static org.junit.Assert.assertTrue;

import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import org.junit.Test;

public class NativeHandleTest {
    /** The handles freed, in order (a static method's list: the free action must not reach the owner). */
    private static final List<Long> FREED = new CopyOnWriteArrayList<>();

    private static final class Thing extends NativeHandle {
        Thing(long handle) {
            super("thing", handle, FREED::add);
        }
    }

    @Test
    public void closeFreesOnceAndLaterCallsNameWhatWasClosed() {
        Thing thing = new Thing(7);
        assertEquals(7, thing.live());
        thing.close();
        thing.close();
        assertEquals(1, FREED.stream().filter(handle -> handle == 7).count());
        IllegalStateException closed = assertThrows(IllegalStateException.class, thing::live);
        assertEquals("the thing is closed", closed.getMessage());
    }

    @Test
    public void aReleasedHandleIsNotFreed() {
        Thing thing = new Thing(8);
        assertEquals(8, thing.release());
        assertTrue(thing.isClosed());
        thing.close();
        assertFalse(FREED.contains(8L));
    }

    /** The safety net: an owner dropped without close() is freed once the collector finds it. */
    @Test
    public void anUnreachableOwnerIsFreed() throws InterruptedException {
        new Thing(9);
        long deadline = System.nanoTime() + 10_000_000_000L;
        while (!FREED.contains(9L) && System.nanoTime() < deadline) {
            System.gc();
            Thread.sleep(10);
        }
        assertTrue("the unreachable owner's handle was not freed within 10 s", FREED.contains(9L));
    }
}
