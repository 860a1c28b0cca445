package io.sparktap.listener;

import java.io.IOException;

import org.apache.spark.ExceptionFailure;
import org.apache.spark.Success$;
import org.apache.spark.TaskEndReason;
import org.apache.spark.TaskFailedReason;
import org.apache.spark.TaskKilled;
import org.apache.spark.executor.ShuffleReadMetrics;
import org.apache.spark.executor.ShuffleWriteMetrics;
import org.apache.spark.executor.TaskMetrics;
import org.apache.spark.scheduler.SparkListenerTaskEnd;
import org.apache.spark.scheduler.TaskInfo;

/** One finished task attempt: values copied out of Spark's objects on the bus thread (no references kept). */
final class TaskEndEvent extends Event {
    static final String[] LOCALITY = {"PROCESS_LOCAL", "NODE_LOCAL", "NO_PREF", "RACK_LOCAL", "ANY"};
    /** Index into LocalityHistogram order: process_local, node_local, rack_local, no_pref, any. */
    static final int[] LOCALITY_TO_HISTOGRAM = {0, 1, 3, 2, 4};

    static final int SUCCESS = 0;
    static final int FAILED = 1;
    static final int KILLED = 2;
    static final String[] STATUS = {"SUCCESS", "FAILED", "KILLED"};

    final int stageId;
    final int stageAttempt;
    final long taskId;
    final int index;
    final int attempt;
    final String executorId;
    final String host;
    final int locality; // TaskLocality id: 0..4
    final boolean speculative;
    final int status;
    final String failureClass;
    final String failureMessage;
    final long launchTime;
    final long finishTime;
    final long duration;
    final boolean hasMetrics;
    long runTime;
    long cpuTimeNs;
    long gcTime;
    long deserializeTime;
    long resultSize;
    long inputBytes;
    long inputRecords;
    long outputBytes;
    long outputRecords;
    long localBlocks;
    long remoteBlocks;
    long localBytes;
    long remoteBytes;
    long remoteBytesToDisk;
    long fetchWait;
    long recordsRead;
    long writeBytes;
    long writeRecords;
    long writeTimeNs;
    long memorySpill;
    long diskSpill;
    long peakExecutionMemory;
    ConnectTracker.Who who = ConnectTracker.Who.NONE;
    /** Ended after its stage attempt's completion (a speculative copy killed, a cancelled stage's tasks): not in that
     * stage_completed's totals, which the views correct from this row (detection/stage_rows.py). */
    boolean late;

    TaskEndEvent(SparkListenerTaskEnd e, Redactor redactor) {
        super(EventType.TASK_END, finishTimeOf(e.taskInfo()));
        TaskInfo info = e.taskInfo();
        this.stageId = e.stageId();
        this.stageAttempt = e.stageAttemptId();
        this.taskId = info.taskId();
        this.index = info.index();
        this.attempt = info.attemptNumber();
        this.executorId = info.executorId();
        this.host = info.host();
        int loc = info.taskLocality().id();
        this.locality = loc >= 0 && loc < LOCALITY.length ? loc : 4;
        this.speculative = info.speculative();
        TaskEndReason reason = e.reason();
        if (reason == Success$.MODULE$) {
            status = SUCCESS;
            failureClass = null;
            failureMessage = null;
        } else {
            status = reason instanceof TaskKilled || info.killed() ? KILLED : FAILED;
            failureClass = reasonName(reason);
            failureMessage = redactor.text(failureText(reason), 500);
        }
        this.launchTime = Math.max(0L, info.launchTime());
        this.finishTime = Math.max(launchTime, info.finishTime());
        this.duration = finishTime - launchTime;
        TaskMetrics m = e.taskMetrics();
        this.hasMetrics = m != null;
        if (m != null) {
            runTime = m.executorRunTime();
            cpuTimeNs = m.executorCpuTime();
            gcTime = m.jvmGCTime();
            deserializeTime = m.executorDeserializeTime();
            resultSize = m.resultSize();
            inputBytes = m.inputMetrics().bytesRead();
            inputRecords = m.inputMetrics().recordsRead();
            outputBytes = m.outputMetrics().bytesWritten();
            outputRecords = m.outputMetrics().recordsWritten();
            ShuffleReadMetrics r = m.shuffleReadMetrics();
            localBlocks = r.localBlocksFetched();
            remoteBlocks = r.remoteBlocksFetched();
            localBytes = r.localBytesRead();
            remoteBytes = r.remoteBytesRead();
            remoteBytesToDisk = r.remoteBytesReadToDisk();
            fetchWait = r.fetchWaitTime();
            recordsRead = r.recordsRead();
            ShuffleWriteMetrics w = m.shuffleWriteMetrics();
            writeBytes = w.bytesWritten();
            writeRecords = w.recordsWritten();
            writeTimeNs = w.writeTime();
            memorySpill = m.memoryBytesSpilled();
            diskSpill = m.diskBytesSpilled();
            peakExecutionMemory = m.peakExecutionMemory();
        }
    }

    private static long finishTimeOf(TaskInfo info) {
        return info.finishTime() > 0 ? info.finishTime() : info.launchTime();
    }

    static String reasonName(TaskEndReason reason) {
        String name = reason.getClass().getSimpleName();
        return name.endsWith("$") ? name.substring(0, name.length() - 1) : name;
    }

    private static String failureText(TaskEndReason reason) {
        if (reason instanceof ExceptionFailure) {
            ExceptionFailure ef = (ExceptionFailure) reason;
            return ef.className() + ": " + ef.description();
        }
        if (reason instanceof TaskFailedReason) {
            String text = ((TaskFailedReason) reason).toErrorString();
            return text == null ? null : text.trim();
        }
        return reason.toString();
    }

    @Override
    void writeBody(JsonOut out) throws IOException {
        out.num("stage_id", stageId);
        out.count("stage_attempt", stageAttempt);
        out.num("task_id", taskId);
        out.num("index", index);
        out.count("attempt", attempt);
        out.str("executor_id", executorId);
        out.str("host", host);
        out.str("locality", LOCALITY[locality]);
        out.flag("speculative", speculative);
        out.flag("late", late);
        out.str("status", STATUS[status]);
        out.opt("failure_class", failureClass);
        out.opt("failure_message", failureMessage);
        out.num("launch_time_ms", launchTime);
        out.num("finish_time_ms", finishTime);
        out.num("duration_ms", duration);
        out.count("run_time_ms", runTime);
        out.count("cpu_time_ns", cpuTimeNs);
        out.count("gc_time_ms", gcTime);
        out.count("deserialize_time_ms", deserializeTime);
        out.count("result_size_bytes", resultSize);
        out.count("input_bytes", inputBytes);
        out.count("input_records", inputRecords);
        out.count("output_bytes", outputBytes);
        out.count("output_records", outputRecords);
        out.count("shuffle_local_blocks", localBlocks);
        out.count("shuffle_remote_blocks", remoteBlocks);
        out.count("shuffle_local_bytes", localBytes);
        out.count("shuffle_remote_bytes", remoteBytes);
        out.count("shuffle_remote_bytes_to_disk", remoteBytesToDisk);
        out.count("shuffle_fetch_wait_ms", fetchWait);
        out.count("shuffle_records_read", recordsRead);
        out.count("shuffle_write_bytes", writeBytes);
        out.count("shuffle_write_records", writeRecords);
        out.count("shuffle_write_time_ns", writeTimeNs);
        out.count("memory_spill_bytes", memorySpill);
        out.count("disk_spill_bytes", diskSpill);
        out.count("peak_execution_memory", peakExecutionMemory);
        who.write(out);
    }
}
