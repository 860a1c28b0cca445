package io.sparktap.listener;

/** The job that submitted a stage, and that job's SQL execution (-1: none). */
final class StageOwner {
    final long jobId;
    final long sqlExecutionId;

    StageOwner(long jobId, long sqlExecutionId) {
        this.jobId = jobId;
        this.sqlExecutionId = sqlExecutionId;
    }
}
