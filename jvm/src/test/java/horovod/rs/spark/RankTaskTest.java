package horovod.rs.spark;

import static org.junit.Assert.assertEquals;

import java.util.List;
import org.junit.Test;

public class RankTaskTest {
    @Test
    public void hostsKeepIpv6Colons() {
        assertEquals(List.of("10.0.0.1", "[::1]"), RankTask.hostsOf(List.of("10.0.0.1:4000", "[::1]:4001")));
    }

    @Test
    public void localRankCountsEarlierRanksOnTheSameHost() {
        List<String> hosts = List.of("a", "b", "a", "a", "b");
        assertEquals(0, RankTask.localRank(hosts, 0));
        assertEquals(0, RankTask.localRank(hosts, 1));
        assertEquals(1, RankTask.localRank(hosts, 2));
        assertEquals(2, RankTask.localRank(hosts, 3));
        assertEquals(1, RankTask.localRank(hosts, 4));
        assertEquals(3, RankTask.localSize(hosts, 3));
        assertEquals(2, RankTask.localSize(hosts, 4));
    }
}
