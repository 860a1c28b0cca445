package io.sparktap.listener;

import org.apache.spark.scheduler.SparkListenerEvent;
import org.apache.spark.sql.execution.ui.SparkListenerSQLExecutionEnd;
import org.apache.spark.sql.execution.ui.SparkListenerSQLExecutionStart;
import org.apache.spark.sql.streaming.StreamingQueryListener;

/** The times spark-sql events carry, for the replay clock (its own class: a JVM without spark-sql only loses it). */
final class ReplaySqlTimes {
    private ReplaySqlTimes() {
    }

    static long timeOf(SparkListenerEvent e) {
        if (e instanceof SparkListenerSQLExecutionStart) {
            return ((SparkListenerSQLExecutionStart) e).time();
        } else if (e instanceof SparkListenerSQLExecutionEnd) {
            return ((SparkListenerSQLExecutionEnd) e).time();
        } else if (e instanceof StreamingQueryListener.QueryProgressEvent) {
            return StreamingTracker.epochMs(((StreamingQueryListener.QueryProgressEvent) e).progress().timestamp());
        } else if (e instanceof StreamingQueryListener.QueryStartedEvent) {
            return StreamingTracker.epochMs(((StreamingQueryListener.QueryStartedEvent) e).timestamp());
        }
        return -1L;
    }
}
