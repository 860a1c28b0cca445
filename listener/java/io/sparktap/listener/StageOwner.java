package io.sparktap.listener;

/** The job that submitted a stage, and that job's SQL execution (-1: none). */
final class StageOwner {
    final long jobId;
    final long sqlExecutionId;
    final ConnectTracker.Who who;

    StageOwner(long jobId, long sqlExecutionId, ConnectTracker.Who who) {
        this.jobId = jobId;
        this.sqlExecutionId = sqlExecutionId;
        this.who = who;
    }
}
