package io.sparktap.listener;

import static org.junit.jupiter.api.Assertions.assertEquals;

import com.fasterxml.jackson.databind.ObjectMapper;

import org.junit.jupiter.api.Test;

/** The rows a Delta commit wrote, from its operationMetrics (the figures of a real Delta 3.3 table's history). */
class DeltaCommitsTest {
    private static long rows(String metrics) throws Exception {
        return DeltaCommits.rowsWritten(new ObjectMapper().readTree(metrics));
    }

    @Test
    void rowsWrittenByOperation() throws Exception {
        // WRITE and MERGE: the rows in the files they added
        assertEquals(1000, rows("{\"numOutputRows\": \"1000\", \"numFiles\": \"4\"}"));
        assertEquals(1000, rows("{\"numOutputRows\": \"1000\", \"numTargetRowsInserted\": \"500\", "
                + "\"numTargetRowsUpdated\": \"500\", \"numTargetRowsCopied\": \"0\"}"));
        // UPDATE rewrites the rows it updated and those it copied from the files it touched
        assertEquals(250, rows("{\"numUpdatedRows\": \"100\", \"numCopiedRows\": \"150\", \"numAddedFiles\": \"1\"}"));
        // DELETE writes only the rows it copied
        assertEquals(900, rows("{\"numDeletedRows\": \"100\", \"numCopiedRows\": \"900\"}"));
        // none of them: unknown
        assertEquals(-1, rows("{\"numAddedFiles\": \"0\"}"));
    }
}
