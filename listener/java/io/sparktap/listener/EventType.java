package io.sparktap.listener;

import com.fasterxml.jackson.core.io.SerializedString;

/** Every event family of the contract (schemas/events.py), with its wire name. */
enum EventType {
    APP_START("app_start"),
    APP_END("app_end"),
    JOB_START("job_start"),
    JOB_END("job_end"),
    SQL_START("sql_start"),
    SQL_END("sql_end"),
    SQL_PLAN_STATS("sql_plan_stats"),
    TABLE_ACCESS("table_access"),
    STAGE_SUBMITTED("stage_submitted"),
    STAGE_COMPLETED("stage_completed"),
    TASK_END("task_end"),
    AQE_PLAN_UPDATE("aqe_plan_update"),
    AQE_SHUFFLE_READ("aqe_shuffle_read"),
    EXECUTOR_ADDED("executor_added"),
    EXECUTOR_REMOVED("executor_removed"),
    EXECUTOR_METRICS("executor_metrics"),
    STREAMING_QUERY_START("streaming_query_start"),
    STREAMING_QUERY_PROGRESS("streaming_query_progress"),
    STREAMING_QUERY_END("streaming_query_end"),
    OPERATION("operation"),
    LISTENER_HEALTH("listener_health");

    static final EventType[] ALL = values();

    final String wire;
    final SerializedString serialized;

    EventType(String wire) {
        this.wire = wire;
        this.serialized = new SerializedString(wire);
    }
}
