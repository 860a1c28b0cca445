package io.sparktap.listener;

/** A job between its start and end: when it started and the SQL execution it runs for (-1: none). */
final class RunningJob {
    final long startTimeMs;
    final long sqlExecutionId;

    RunningJob(long startTimeMs, long sqlExecutionId) {
        this.startTimeMs = startTimeMs;
        this.sqlExecutionId = sqlExecutionId;
    }
}
