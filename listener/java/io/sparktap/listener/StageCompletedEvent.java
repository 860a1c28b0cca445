package io.sparktap.listener;

import java.io.IOException;

import com.fasterxml.jackson.core.JsonGenerator;

import org.apache.spark.scheduler.StageInfo;

/** A finished stage attempt with its aggregates; the quantiles are computed when serialised (writer thread). */
final class StageCompletedEvent extends Event {
    private static final String[] LOCALITY_FIELDS = {"process_local", "node_local", "rack_local", "no_pref", "any"};

    final int stageId;
    final int stageAttempt;
    final String name;
    final long jobId;
    final long sqlExecutionId;
    final boolean succeeded;
    final String failureReason;
    final long submissionTime;
    final long completionTime;
    final int numTasks;
    /** The stage's SQL metric totals by name, indexed by {@link StageSqlSums}' constants; -1 where none. */
    final long[] sqlSums;
    /** {bytes, files} of the file scans the stage ran, from their own SQL metrics; null when none is known */
    final long[] scanInput;
    final StageStats stats;
    final ConnectTracker.Who who;

    StageCompletedEvent(long time, int stageId, int stageAttempt, String name, long jobId, long sqlExecutionId,
            boolean succeeded, String failureReason, long submissionTime, long completionTime, int numTasks,
            long[] sqlSums, long[] scanInput, StageStats stats, ConnectTracker.Who who) {
        super(EventType.STAGE_COMPLETED, time);
        this.stageId = stageId;
        this.stageAttempt = stageAttempt;
        this.name = name;
        this.jobId = jobId;
        this.sqlExecutionId = sqlExecutionId;
        this.succeeded = succeeded;
        this.failureReason = failureReason;
        this.submissionTime = submissionTime;
        this.completionTime = completionTime;
        this.numTasks = numTasks;
        this.sqlSums = sqlSums;
        this.scanInput = scanInput;
        this.stats = stats;
        this.who = who;
    }

    @Override
    void writeBody(JsonOut out) throws IOException {
        JsonGenerator g = out.gen();
        out.num("stage_id", stageId);
        out.count("stage_attempt", stageAttempt);
        out.str("name", name);
        out.optId("job_id", jobId);
        out.optId("sql_execution_id", sqlExecutionId);
        out.str("status", succeeded ? "succeeded" : "failed");
        out.opt("failure_reason", failureReason);
        out.optId("submission_time_ms", submissionTime);
        out.optId("completion_time_ms", completionTime);
        long duration = submissionTime >= 0 && completionTime >= submissionTime ? completionTime - submissionTime : 0;
        out.num("duration_ms", duration);
        out.num("num_tasks", numTasks);
        out.count("tasks_succeeded", stats.succeeded);
        out.count("tasks_failed", stats.failed);
        out.count("tasks_killed", stats.killed);
        out.count("tasks_resubmitted", stats.resubmitted);
        out.count("tasks_commit_denied", stats.commitDenied);
        out.count("slots", stats.slots);
        who.write(out);
        for (int metric = 0; metric < StageStats.METRICS; metric++) {
            StageStats.Quantiles q = stats.quantiles(metric);
            g.writeObjectFieldStart(StageStats.NAMES[metric]);
            g.writeNumberField("min", q.min);
            g.writeNumberField("p50", q.p50);
            g.writeNumberField("p75", q.p75);
            g.writeNumberField("p95", q.p95);
            g.writeNumberField("max", q.max);
            g.writeNumberField("sum", q.sum);
            g.writeEndObject();
        }
        g.writeObjectFieldStart("locality");
        for (int i = 0; i < LOCALITY_FIELDS.length; i++) {
            out.count(LOCALITY_FIELDS[i], stats.locality[i]);
        }
        g.writeEndObject();
        out.count("shuffle_local_blocks", stats.localBlocks);
        out.count("shuffle_remote_blocks", stats.remoteBlocks);
        out.count("shuffle_fetch_wait_ms", stats.fetchWait);
        out.count("shuffle_remote_bytes_to_disk", stats.remoteBytesToDisk);
        out.count("shuffle_records_read", stats.recordsRead);
        out.count("shuffle_records_written", stats.recordsWritten);
        out.count("input_records", stats.inputRecords);
        out.count("output_bytes", stats.outputBytes);
        out.count("output_records", stats.outputRecords);
        out.optId("output_files", sqlSums[StageSqlSums.WRITTEN_FILES]);
        if (scanInput != null) {
            out.optId("scan_bytes_read", scanInput[0]);
            out.optId("scan_files_read", scanInput[1]);
        }
        out.optId("sql_shuffle_write_bytes", sqlSums[StageSqlSums.SHUFFLE_WRITTEN]);
        out.optId("sql_shuffle_read_bytes", sqlSums[StageSqlSums.SHUFFLE_READ]);
        out.optId("sql_shuffle_read_remote_bytes", sqlSums[StageSqlSums.SHUFFLE_READ_REMOTE]);
        out.optId("sql_spill_bytes", sqlSums[StageSqlSums.SPILLED]);
        out.count("cpu_time_ns", stats.cpuTimeNs);
        out.count("peak_execution_memory_max", stats.peakExecutionMemoryMax);
    }

    /** A stage's name (free text): a Spark Connect stage's carries the request text, so it is redacted as SQL text
     * is. */
    static String name(StageInfo info, ConnectTracker.Who who, Redactor redactor) {
        if (!who.known()) {
            return redactor.text(info.name());
        }
        String name = redactor.description(info.name(), Redactor.TEXT_MAX_CHARS);
        return name == null ? "" : name;
    }
}
