package io.sparktap.listener;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.function.Consumer;

import org.apache.spark.scheduler.JobFailed;
import org.apache.spark.scheduler.JobResult;
import org.apache.spark.scheduler.SparkListenerJobEnd;
import org.apache.spark.scheduler.SparkListenerJobStart;

/**
 * {@code job_start} and {@code job_end}, and the job that submitted each stage of a running job (its SQL execution
 * and Spark Connect operation), which the stage and task events carry. Bus thread only.
 */
final class JobEvents {
    private final Redactor redactor;
    private final Consumer<Event> submit;
    private final Map<Integer, RunningJob> jobs = new HashMap<>(); // job id -> its start
    private final Map<Integer, StageOwner> stageJob = new HashMap<>(); // stage id -> the job that submitted it

    JobEvents(Redactor redactor, Consumer<Event> submit) {
        this.redactor = redactor;
        this.submit = submit;
    }

    /** The running job that submitted this stage, or null. */
    StageOwner owner(int stageId) {
        return stageJob.get(stageId);
    }

    void clear() {
        jobs.clear();
        stageJob.clear();
    }

    void started(SparkListenerJobStart e) {
        Properties props = e.properties();
        long sqlId = ListenerCore.parseId(props == null ? null : props.getProperty("spark.sql.execution.id"));
        String group = props == null ? null : props.getProperty("spark.jobGroup.id");
        String description = props == null ? null : props.getProperty("spark.job.description");
        List<String> tags = ConnectTracker.tags(props == null ? null : props.getProperty("spark.job.tags"));
        ConnectTracker.Who who = ConnectTracker.who(tags);
        List<String> safeTags = new ArrayList<>(tags.size());
        for (String tag : tags) {
            safeTags.add(ConnectTracker.safeTag(redactor, tag));
        }
        int jobId = e.jobId();
        int[] stageIds = Scala.ints(e.stageIds());
        for (int stageId : stageIds) {
            stageJob.put(stageId, new StageOwner(jobId, sqlId, who));
        }
        jobs.put(jobId, new RunningJob(e.time(), sqlId));
        String safeGroup = redactor.text(group);
        String safeDescription = redactor.description(description, Redactor.TEXT_MAX_CHARS);
        submit.accept(Event.of(EventType.JOB_START, e.time(), out -> {
            out.num("job_id", jobId);
            out.ints("stage_ids", stageIds);
            out.optId("sql_execution_id", sqlId);
            out.opt("job_group", safeGroup);
            out.opt("description", safeDescription);
            if (!safeTags.isEmpty()) {
                out.strings("job_tags", safeTags);
            }
            who.write(out);
        }));
    }

    void ended(SparkListenerJobEnd e) {
        int jobId = e.jobId();
        RunningJob job = jobs.remove(jobId);
        long duration = job != null ? Math.max(0L, e.time() - job.startTimeMs) : -1L;
        JobResult result = e.jobResult();
        boolean failed = result instanceof JobFailed;
        String reason = null;
        if (failed) {
            Exception ex = ((JobFailed) result).exception();
            reason = redactor.text(ex == null ? null : String.valueOf(ex.getMessage()));
        }
        for (Iterator<StageOwner> it = stageJob.values().iterator(); it.hasNext();) {
            if (it.next().jobId == jobId) {
                it.remove();
            }
        }
        String failureReason = reason;
        submit.accept(Event.of(EventType.JOB_END, e.time(), out -> {
            out.num("job_id", jobId);
            out.str("result", failed ? "failed" : "succeeded");
            out.opt("failure_reason", failureReason);
            out.optId("duration_ms", duration);
        }));
    }
}
