package io.sparktap.listener;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

/** The identifier rule the listener applies to spark.sparktap.cluster, spark.app.id and the attempt id. */
class IdentifiersTest {
    @Test
    void realIdsAreValid() {
        for (String id : new String[] {"prod-eu", "local-1700000000000", "application_1700000000000_0001",
            "app-20231126021212-0000", "spark-5f1c0a9b8e4d", "team.a:etl@eu+1=x/y", "1", "a"}) {
            assertTrue(Identifiers.valid(id), id);
        }
        StringBuilder max = new StringBuilder("a");
        while (max.length() < Identifiers.MAX_LENGTH) {
            max.append('b');
        }
        assertTrue(Identifiers.valid(max.toString()));
        assertFalse(Identifiers.valid(max.append('c').toString()));
    }

    @Test
    void canariesAreRefused() {
        for (String id : new String[] {"", "\\') UNION ALL SELECT 1 --", "a\\b", "a'b", "a\"b", "a`b",
            "$__timeFilter", "a$b", "a{b}", "a b", "a\tb", "a\nb", "abc\n", "a\u0000b", "-leading", ".x", "é", "a;b",
            "a%b", "a*b"}) {
            assertFalse(Identifiers.valid(id), id);
        }
        assertFalse(Identifiers.valid(null));
    }

    @Test
    void theProblemIsOneLineNamingTheSettingTheValueAndTheRule() {
        assertNull(Identifiers.problem("spark.sparktap.cluster", "prod", "fix"));
        assertEquals("spark.sparktap.cluster=\"\\\\') UNION\\u000a\" is not a valid identifier: use 1-128 ASCII "
                + "letters, digits and . _ : @ / + = -, starting with a letter or digit "
                + "(--conf spark.sparktap.cluster=<name>)",
                Identifiers.problem("spark.sparktap.cluster", "\\') UNION\n", "--conf spark.sparktap.cluster=<name>"));
        char[] long300 = new char[300];
        java.util.Arrays.fill(long300, 'x');
        String p = Identifiers.problem("k", new String(long300), "f");
        assertTrue(p.startsWith("k=\"" + new String(long300, 0, 64) + "…(300 characters)\" is not"), p);
    }
}
