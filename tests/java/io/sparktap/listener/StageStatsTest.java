package io.sparktap.listener;

import static org.junit.jupiter.api.Assertions.assertEquals;

import org.junit.jupiter.api.Test;

/** Stage quantiles: nearest rank, exact up to the sample limit, min/max/sum always exact. */
class StageStatsTest {
    private static long[] row(long duration) {
        long[] r = new long[StageStats.METRICS];
        r[StageStats.DURATION] = duration;
        r[StageStats.SHUFFLE_READ] = 2 * duration;
        r[StageStats.GC_TIME] = -duration; // Spark reports -1 for unknown: counted as 0
        return r;
    }

    private static StageStats.Quantiles q(long min, long p50, long p75, long p95, long max, long sum) {
        return new StageStats.Quantiles(min, p50, p75, p95, max, sum);
    }

    @Test
    void nearestRankOfTwentyTasks() {
        StageStats s = new StageStats(1_000);
        for (int i = 20; i >= 1; i--) {
            s.measure(row(i * 10L));
        }
        assertEquals(20, s.measured);
        // ranks ceil(p * 20): p50 -> 10th, p75 -> 15th, p95 -> 19th
        assertEquals(q(10, 100, 150, 190, 200, 2100), s.quantiles(StageStats.DURATION));
        assertEquals(q(20, 200, 300, 380, 400, 4200), s.quantiles(StageStats.SHUFFLE_READ));
        assertEquals(q(0, 0, 0, 0, 0, 0), s.quantiles(StageStats.GC_TIME));
    }

    @Test
    void oneTaskAndNoTask() {
        StageStats s = new StageStats(100);
        assertEquals(q(0, 0, 0, 0, 0, 0), s.quantiles(StageStats.DURATION));
        s.measure(row(42));
        assertEquals(q(42, 42, 42, 42, 42, 42), s.quantiles(StageStats.DURATION));
    }

    @Test
    void beyondTheSampleLimitMinMaxSumStayExactAndTheSampleIsBounded() {
        StageStats s = new StageStats(100);
        long sum = 0;
        for (int i = 1; i <= 10_000; i++) {
            s.measure(row(i));
            sum += i;
        }
        assertEquals(100, s.samples);
        assertEquals(100, s.values[StageStats.DURATION].length);
        StageStats.Quantiles q = s.quantiles(StageStats.DURATION);
        assertEquals(1, q.min);
        assertEquals(10_000, q.max);
        assertEquals(sum, q.sum);
        // a uniform sample of 1..10000: its median is near 5000 (seeded, so the same on every run)
        assertEquals(true, q.p50 > 3_500 && q.p50 < 6_500, "p50 " + q.p50);
    }

    @Test
    void nearestRankEdges() {
        long[] sorted = {1, 2, 3, 4};
        assertEquals(0, StageStats.nearestRank(sorted, 0, 0.5));
        assertEquals(1, StageStats.nearestRank(sorted, 4, 0.0));
        assertEquals(2, StageStats.nearestRank(sorted, 4, 0.5));
        assertEquals(3, StageStats.nearestRank(sorted, 4, 0.75));
        assertEquals(4, StageStats.nearestRank(sorted, 4, 0.95));
        assertEquals(4, StageStats.nearestRank(sorted, 4, 1.0));
    }

    @Test
    void slotsKeepTheMost() {
        StageStats s = new StageStats(10);
        s.seeSlots(4);
        s.seeSlots(8);
        s.seeSlots(2);
        assertEquals(8, s.slots);
    }
}
