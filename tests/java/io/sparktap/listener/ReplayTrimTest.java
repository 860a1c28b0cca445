package io.sparktap.listener;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;

import org.junit.jupiter.api.Test;

/** The replay's cuts of a task end line (ReplayMain.Trimmed): what goes, and every line that must stay as it is. */
class ReplayTrimTest {
    private static final String HEAD = "{\"Event\":\"SparkListenerTaskEnd\",\"Stage ID\":1,";

    @Test
    void accumulablesAreEmptiedWhateverTheirStringsHold() {
        String accumulables = "[{\"ID\":1,\"Name\":\"a ] } [ { \\\" \\\\\",\"Update\":\"5\"},"
                + "{\"ID\":2,\"Name\":\"x\",\"Value\":[1,[2]]}]";
        String line = HEAD + "\"Task Info\":{\"Task ID\":7,\"Accumulables\":" + accumulables
                + ",\"Killed\":false},\"Task Metrics\":{}}";
        assertEquals(HEAD + "\"Task Info\":{\"Task ID\":7,\"Accumulables\":[],\"Killed\":false},\"Task Metrics\":{}}",
                ReplayMain.Trimmed.withoutAccumulables(line));
        String last = HEAD + "\"Task Info\":{\"Task ID\":7,\"Accumulables\":" + accumulables + "},\"X\":1}";
        assertEquals(HEAD + "\"Task Info\":{\"Task ID\":7,\"Accumulables\":[]},\"X\":1}",
                ReplayMain.Trimmed.withoutAccumulables(last));
    }

    @Test
    void theAccumulablesTheStagesSqlTotalsSumStay() {
        String kept = "{\"ID\":3,\"Name\":\"remote bytes read\",\"Update\":\"7\",\"Value\":\"9\"}";
        String photon = "{\"ID\":4,\"Name\":\"num bytes written\",\"Update\":\"2\"}";
        String line = HEAD + "\"Task Info\":{\"Accumulables\":[{\"ID\":1,\"Name\":\"number of output rows\","
                + "\"Update\":\"5\"}," + kept + ",{\"ID\":2,\"Name\":\"remote bytes read\\\" x\"}," + photon
                + "]},\"X\":1}";
        assertEquals(HEAD + "\"Task Info\":{\"Accumulables\":[" + kept + "," + photon + "]},\"X\":1}",
                ReplayMain.Trimmed.withoutAccumulables(line));
    }

    @Test
    void linesWithoutAccumulablesToEmptyStayTheSameObject() {
        String empty = HEAD + "\"Task Info\":{\"Accumulables\":[]},\"Task Metrics\":{}}";
        String noInfo = HEAD + "\"Accumulables\":[{\"ID\":1}]}";
        String unclosed = HEAD + "\"Task Info\":{\"Accumulables\":[{\"ID\":1}";
        String escapedKey = HEAD + "\"Task End Reason\":{\"Description\":\"\\\"Task Info\\\":{\"}}";
        for (String line : new String[] {empty, noInfo, unclosed, escapedKey}) {
            assertSame(line, ReplayMain.Trimmed.withoutAccumulables(line), line);
        }
    }

    @Test
    void pushBasedShuffleGoesOnlyAsTheLastFieldOfTheShuffleRead() {
        String line = HEAD + "\"Task Metrics\":{\"Shuffle Read Metrics\":{\"Remote Blocks Fetched\":1,"
                + "\"Push Based Shuffle\":{\"Corrupt Merged Block Chunks\":0,\"Merged Fetch Fallback Count\":0}},"
                + "\"Shuffle Write Metrics\":{\"Shuffle Bytes Written\":3}}}";
        assertEquals(HEAD + "\"Task Metrics\":{\"Shuffle Read Metrics\":{\"Remote Blocks Fetched\":1},"
                + "\"Shuffle Write Metrics\":{\"Shuffle Bytes Written\":3}}}",
                ReplayMain.Trimmed.withoutPushShuffle(line));
        String notLast = HEAD + "\"Task Metrics\":{\"Shuffle Read Metrics\":{\"A\":1,"
                + "\"Push Based Shuffle\":{\"B\":0},\"C\":2}}}";
        String noRead = HEAD + "\"Task Metrics\":{\"X\":{\"A\":1,\"Push Based Shuffle\":{\"B\":0}}}}";
        String unclosed = HEAD + "\"Task Metrics\":{\"Shuffle Read Metrics\":{\"A\":1,\"Push Based Shuffle\":{\"B\":0";
        for (String same : new String[] {notLast, noRead, unclosed}) {
            assertSame(same, ReplayMain.Trimmed.withoutPushShuffle(same), same);
        }
    }

    @Test
    void matchingBracketSkipsStringsAndEscapes() {
        String s = "[\"]\\\\\",{\"k\":\"}\\\"]\"},[1]]!";
        assertEquals(s.length() - 2, ReplayMain.Trimmed.matchingBracket(s, 0));
        assertEquals(-1, ReplayMain.Trimmed.matchingBracket("[1,2}", 0));
        assertEquals(-1, ReplayMain.Trimmed.matchingBracket("[1,[2]", 0));
    }
}
