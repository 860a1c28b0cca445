package io.sparktap.listener;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

import org.apache.spark.SparkConf;
import org.apache.spark.Success$;
import org.apache.spark.TaskState;
import org.apache.spark.executor.ExecutorMetrics;
import org.apache.spark.executor.TaskMetrics;
import org.apache.spark.scheduler.AccumulableInfo;
import org.apache.spark.scheduler.JobSucceeded$;
import org.apache.spark.scheduler.ReplayListenerBus;
import org.apache.spark.scheduler.SparkListenerApplicationEnd;
import org.apache.spark.scheduler.SparkListenerApplicationStart;
import org.apache.spark.scheduler.SparkListenerEvent;
import org.apache.spark.scheduler.SparkListenerJobEnd;
import org.apache.spark.scheduler.SparkListenerJobStart;
import org.apache.spark.scheduler.SparkListenerStageCompleted;
import org.apache.spark.scheduler.SparkListenerStageSubmitted;
import org.apache.spark.scheduler.SparkListenerTaskEnd;
import org.apache.spark.scheduler.StageInfo;
import org.apache.spark.scheduler.TaskInfo;
import org.apache.spark.scheduler.TaskLocality;
import org.apache.spark.scheduler.TaskLocation;
import org.apache.spark.storage.RDDInfo;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import scala.Option;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;

/**
 * The listener core against the contract's example events (schemas/examples.py), without a Spark run: Spark's own
 * listener events, built with their public constructors to carry the examples' values, are posted through the
 * listener facade into a core in replay mode (as ReplayMain does) and the JSON it writes is compared field by field
 * with the examples, which tests/fixtures/junit.py exports (system property {@code sparktap.contract.examples}: per
 * event type the example with every field, defaults included, and the names of the fields the example sets).
 *
 * <p>The comparison: every field the listener writes has the example's value (or, for a field the example leaves at
 * its default, the default), and every field the example sets is written, or left out where the example's value is
 * the contract's default (the listener leaves out zeros, false and empty values: a reader takes the default; inside
 * an object, such as the locality histogram, a key left out is a zero). Normalised, because no constructed event
 * decides them the way the examples do:
 * <ul>
 * <li>every event: {@code seq} (the core numbers its own events), {@code emitted_at_ms} (the wall clock) and
 * {@code event_time_ms} (the time of the Spark event: the examples put every event at one instant, a job's end and a
 * task's finish cannot be at its start);</li>
 * <li>app_start and app_end: {@code properties} (the listener sends the same allowed conf at both ends; each example
 * shows one key): the written map must hold the example's entries;</li>
 * <li>job_start: {@code job_tags} without the Spark Connect operation tag (the job's user, session and operation ids,
 * written again from their cleaned parts and checked as {@code user_id}, {@code session_id}, {@code operation_id});
 * the example shows the application's own tag only;</li>
 * <li>stage and task events: {@code user_id}, {@code session_id}, {@code operation_id} are the job_start example's
 * (the listener attributes a stage and its tasks to their job's Connect operation; their examples show none);</li>
 * <li>stage_completed: the quantile objects ({@code task_duration_ms}, {@code run_time_ms}, ...) compare by their
 * keys (the examples' figures are no distribution four tasks make); the sums and the locality histogram are exact.</li>
 * </ul>
 */
class ContractExamplesTest {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static JsonNode examples;
    /** The listener's JSON per event type, in the order written. */
    private static final Map<String, List<JsonNode>> written = new LinkedHashMap<>();

    private static final List<String> QUANTILES = Arrays.asList("task_duration_ms", "run_time_ms", "gc_time_ms",
            "input_bytes", "shuffle_read_bytes", "shuffle_read_local_bytes", "shuffle_read_remote_bytes",
            "shuffle_write_bytes", "memory_spill_bytes", "disk_spill_bytes", "shuffle_read_records",
            "input_records_per_task");
    private static final List<String> CONNECT_IDS = Arrays.asList("user_id", "session_id", "operation_id");

    @BeforeAll
    static void replayConstructedEvents() throws Exception {
        String path = System.getProperty("sparktap.contract.examples");
        assertTrue(path != null && new File(path).isFile(), "no examples file: sparktap.contract.examples=" + path);
        examples = JSON.readTree(new File(path));
        JsonNode app = example("app_start");
        long t = app.get("event_time_ms").asLong();

        SparkConf conf = new SparkConf(false)
                .set("spark.app.id", app.get("app_id").asText())
                .set("spark.app.name", app.get("app_name").asText())
                .set("spark.app.attempt.id", app.get("app_attempt").asText())
                .set("spark.master", app.get("master").asText())
                .set("spark.sql.adaptive.enabled", "true")
                .set("spark.executor.memory", "4g")
                .set("spark.sparktap.enabled", "true")
                .set("spark.sparktap.kafka.bootstrap.servers", "replay") // never used: no relay on replay
                .set("spark.sparktap.cluster", app.get("cluster").asText())
                .set("spark.sparktap.tag.team", "payments")
                .set("spark.sparktap.tag.cost_centre", "cc-42");
        Clock.replayReset();
        ListenerCore core = new ListenerCore(conf, SparkLine.ofThisJar(), true);
        assertTrue(core.active, "the core is off: " + core.offReason());
        core.replaySparkVersion = app.get("spark_version").asText();
        ReplayListenerBus bus = new ReplayListenerBus();
        bus.addListener(new SparkTapListener(core));
        JsonOut out = new JsonOut(core.envelope());

        JsonNode jobStart = example("job_start");
        JsonNode stage = example("stage_completed");
        JsonNode task = example("task_end");
        int jobId = jobStart.get("job_id").asInt();
        int stageId = stage.get("stage_id").asInt();
        int numTasks = stage.get("num_tasks").asInt();
        StageInfo info = stageInfo(example("stage_submitted"));

        post(core, out, new SparkListenerApplicationStart(app.get("app_name").asText(),
                Option.apply(app.get("app_id").asText()), t, app.get("user").asText(),
                Option.apply(app.get("app_attempt").asText()), Option.empty(), Option.empty()), bus);
        Properties jobProps = new Properties();
        jobProps.setProperty("spark.sql.execution.id", jobStart.get("sql_execution_id").asText());
        jobProps.setProperty("spark.jobGroup.id", jobStart.get("job_group").asText());
        jobProps.setProperty("spark.job.description", jobStart.get("description").asText());
        jobProps.setProperty("spark.job.tags", ConnectTracker.TAG_PREFIX + jobStart.get("user_id").asText()
                + "_Session_" + jobStart.get("session_id").asText() + "_Operation_"
                + jobStart.get("operation_id").asText() + "," + jobStart.get("job_tags").get(0).asText());
        StageInfo parent = new StageInfo(stageId - 1, 0, "parent", numTasks, seq(new ArrayList<RDDInfo>()),
                seq(new ArrayList<Object>()), "", TaskMetrics.empty(), seq(new ArrayList<Seq<TaskLocation>>()),
                Option.empty(), 0, false, 0);
        post(core, out, new SparkListenerJobStart(jobId, t, seq(Arrays.asList(parent, info)), jobProps), bus);
        post(core, out, new SparkListenerStageSubmitted(info, new Properties()), bus);
        // four tasks: the first is the task_end example; the others make the stage's sums and localities the
        // stage_completed example's
        long[] fetchWait = {1, 1, 1, 9};
        long[] recordsRead = {50, 50, 50, 850};
        long[] recordsWritten = {4, 2, 2, 2};
        long[] inputRecords = {100, 100, 100, 700};
        long[] cpu = {30_000_000, 31_000_000, 31_000_000, 31_000_000};
        long[] peak = {1024, 1024, 1024, 65_536};
        for (int i = 0; i < numTasks; i++) {
            post(core, out, taskEnd(task, i, fetchWait[i], recordsRead[i], recordsWritten[i], inputRecords[i],
                    cpu[i], peak[i]), bus);
        }
        info.completionTime_$eq(Option.apply((Object) stage.get("completion_time_ms").asLong()));
        long accumulatorId = 901;
        info.accumulables().put(accumulatorId, new AccumulableInfo(accumulatorId,
                Option.apply("number of written files"), Option.empty(),
                Option.apply((Object) stage.get("output_files").asLong()), false, false, Option.apply("sql")));
        post(core, out, new SparkListenerStageCompleted(info), bus);
        JsonNode jobEnd = example("job_end");
        post(core, out, new SparkListenerJobEnd(jobId, t + jobEnd.get("duration_ms").asLong(), JobSucceeded$.MODULE$),
                bus);
        JsonNode appEnd = example("app_end");
        post(core, out, new SparkListenerApplicationEnd(t + appEnd.get("duration_ms").asLong(), Option.empty()),
                bus);
    }

    private static JsonNode example(String type) {
        JsonNode e = examples.get(type);
        assertTrue(e != null, "no example of " + type);
        return e.get("full");
    }

    @SuppressWarnings("unchecked")
    private static <T> Seq<T> seq(List<? extends T> items) {
        return (Seq<T>) CollectionConverters.asScala((List<T>) items).toList();
    }

    private static StageInfo stageInfo(JsonNode s) {
        List<Object> parents = new ArrayList<>();
        for (JsonNode p : s.get("parent_stage_ids")) {
            parents.add(p.asInt());
        }
        StageInfo info = new StageInfo(s.get("stage_id").asInt(), s.get("stage_attempt").asInt(),
                s.get("name").asText(), s.get("num_tasks").asInt(), seq(new ArrayList<RDDInfo>()), seq(parents), "",
                TaskMetrics.empty(), seq(new ArrayList<Seq<TaskLocation>>()), Option.empty(), 0, false, 0);
        info.submissionTime_$eq(Option.apply((Object) s.get("submission_time_ms").asLong()));
        return info;
    }

    private static SparkListenerTaskEnd taskEnd(JsonNode e, int i, long fetchWait, long recordsRead,
            long recordsWritten, long inputRecords, long cpuNs, long peak) {
        long launch = e.get("launch_time_ms").asLong();
        TaskInfo info = new TaskInfo(e.get("task_id").asLong() + i, e.get("index").asInt() + i,
                e.get("attempt").asInt(), e.get("index").asInt() + i, launch, e.get("executor_id").asText(),
                e.get("host").asText(), i < 3 ? TaskLocality.PROCESS_LOCAL() : TaskLocality.NODE_LOCAL(),
                e.get("speculative").asBoolean());
        info.markFinished(TaskState.FINISHED(), e.get("finish_time_ms").asLong());
        // the exchanges' own SQL metrics, a quarter of the stage_completed example's totals from each of its 4 tasks
        JsonNode stage = example("stage_completed");
        long remote = stage.get("sql_shuffle_read_remote_bytes").asLong() / 4;
        String[] names = {"shuffle bytes written", "remote bytes read", "local bytes read", "spill size"};
        long[] updates = {stage.get("sql_shuffle_write_bytes").asLong() / 4, remote,
            stage.get("sql_shuffle_read_bytes").asLong() / 4 - remote, stage.get("sql_spill_bytes").asLong() / 4};
        List<AccumulableInfo> accumulables = new ArrayList<>();
        for (int k = 0; k < names.length; k++) {
            accumulables.add(new AccumulableInfo(700 + k, Option.apply(names[k]), Option.apply((Object) updates[k]),
                    Option.empty(), false, false, Option.apply("sql")));
        }
        info.setAccumulables(seq(accumulables));
        TaskMetrics m = new TaskMetrics();
        m.setExecutorRunTime(e.get("run_time_ms").asLong());
        m.setExecutorCpuTime(cpuNs);
        m.setJvmGCTime(e.get("gc_time_ms").asLong());
        m.setExecutorDeserializeTime(e.get("deserialize_time_ms").asLong());
        m.setResultSize(e.get("result_size_bytes").asLong());
        m.setPeakExecutionMemory(peak);
        m.inputMetrics().setBytesRead(e.get("input_bytes").asLong());
        m.inputMetrics().setRecordsRead(inputRecords);
        m.shuffleReadMetrics().setLocalBlocksFetched(e.get("shuffle_local_blocks").asInt());
        m.shuffleReadMetrics().setRemoteBlocksFetched(e.get("shuffle_remote_blocks").asInt());
        m.shuffleReadMetrics().setLocalBytesRead(e.get("shuffle_local_bytes").asLong());
        m.shuffleReadMetrics().setRemoteBytesRead(e.get("shuffle_remote_bytes").asLong());
        m.shuffleReadMetrics().setFetchWaitTime(fetchWait);
        m.shuffleReadMetrics().setRecordsRead(recordsRead);
        m.shuffleWriteMetrics().incBytesWritten(e.get("shuffle_write_bytes").asLong());
        m.shuffleWriteMetrics().incRecordsWritten(recordsWritten);
        m.shuffleWriteMetrics().incWriteTime(e.get("shuffle_write_time_ns").asLong());
        return new SparkListenerTaskEnd(e.get("stage_id").asInt(), e.get("stage_attempt").asInt(), "ResultTask",
                Success$.MODULE$, info, new ExecutorMetrics(), m);
    }

    /** Post one event as ReplayMain does (the replay clock moved to its time), then take what the core wrote. */
    private static void post(ListenerCore core, JsonOut out, SparkListenerEvent e, ReplayListenerBus bus) {
        long t = ReplayMain.timeOf(e);
        if (t > 0) {
            Clock.replayed(t);
        }
        bus.postToAll(e); // Spark's bus calls the listener's callback for the event, as it does live
        core.drainReplayed(ev -> {
            try {
                out.event(ev);
                JsonNode node = JSON.readTree(new String(out.array(), 0, out.size(), StandardCharsets.UTF_8));
                written.computeIfAbsent(node.get("event_type").asText(), k -> new ArrayList<>()).add(node);
            } catch (java.io.IOException ex) {
                throw new java.io.UncheckedIOException(ex);
            }
        });
    }

    /** The differences between what the listener wrote and the example, field by field, after normalising. */
    private static List<String> differences(String type, JsonNode actual) {
        JsonNode expected = example(type);
        Set<String> set = new TreeSet<>();
        examples.get(type).get("set").forEach(f -> set.add(f.asText()));
        ObjectNode a = actual.deepCopy();
        ObjectNode x = expected.deepCopy();
        for (String volatileField : Arrays.asList("seq", "emitted_at_ms", "event_time_ms")) {
            assertTrue(a.has(volatileField), type + " has no " + volatileField);
            a.remove(volatileField);
            x.remove(volatileField);
        }
        List<String> out = new ArrayList<>();
        if (type.equals("app_start") || type.equals("app_end")) {
            JsonNode props = a.remove("properties");
            JsonNode wanted = x.remove("properties");
            for (Iterator<Map.Entry<String, JsonNode>> it = wanted.fields(); it.hasNext();) {
                Map.Entry<String, JsonNode> kv = it.next();
                if (props == null || !kv.getValue().equals(props.get(kv.getKey()))) {
                    out.add(type + ".properties." + kv.getKey() + ": written " + (props == null ? null
                            : props.get(kv.getKey())) + ", example " + kv.getValue());
                }
            }
        }
        if (type.equals("job_start")) {
            ArrayNode tags = JSON.createArrayNode();
            for (JsonNode tag : a.get("job_tags")) {
                if (!tag.asText().startsWith(ConnectTracker.TAG_PREFIX)) {
                    tags.add(tag);
                }
            }
            a.set("job_tags", tags);
        } else if (type.startsWith("stage_") || type.equals("task_end")) {
            for (String id : CONNECT_IDS) {
                x.set(id, example("job_start").get(id));
            }
        }
        if (type.equals("stage_completed")) {
            for (String q : QUANTILES) {
                JsonNode aq = a.remove(q);
                JsonNode xq = x.remove(q);
                List<String> ak = new ArrayList<>();
                List<String> xk = new ArrayList<>();
                if (aq != null) {
                    aq.fieldNames().forEachRemaining(ak::add);
                }
                xq.fieldNames().forEachRemaining(xk::add);
                if (!new TreeSet<>(ak).equals(new TreeSet<>(xk))) {
                    out.add(type + "." + q + ": written keys " + ak + ", example keys " + xk);
                }
            }
        }
        for (Iterator<Map.Entry<String, JsonNode>> it = a.fields(); it.hasNext();) {
            Map.Entry<String, JsonNode> kv = it.next();
            JsonNode want = x.get(kv.getKey());
            if (want == null) {
                out.add(type + "." + kv.getKey() + ": written " + kv.getValue() + ", not in the contract");
            } else if (!sameValue(want, kv.getValue())) {
                out.add(type + "." + kv.getKey() + ": written " + kv.getValue() + ", example " + want);
            }
        }
        JsonNode defaults = examples.get(type).get("defaults");
        for (String field : set) {
            if (!x.has(field) || a.has(field)) {
                continue;
            }
            if (!(defaults.has(field) && sameValue(defaults.get(field), x.get(field)))) {
                out.add(type + "." + field + ": the example sets it (" + x.get(field) + "), the listener wrote none");
            }
        }
        return out;
    }

    /** JSON equality with numbers compared by value (the examples' 0.0 and the listener's 0 are one number), and
     * inside an object a key the listener left out standing for a zero, false or empty value. */
    private static boolean sameValue(JsonNode want, JsonNode got) {
        if (want.isNumber() && got.isNumber()) {
            return want.decimalValue().compareTo(got.decimalValue()) == 0;
        }
        if (want.isObject() && got.isObject()) {
            for (Iterator<Map.Entry<String, JsonNode>> it = want.fields(); it.hasNext();) {
                Map.Entry<String, JsonNode> kv = it.next();
                JsonNode g = got.get(kv.getKey());
                if (g == null ? !empty(kv.getValue()) : !sameValue(kv.getValue(), g)) {
                    return false;
                }
            }
            for (Iterator<String> it = got.fieldNames(); it.hasNext();) {
                if (!want.has(it.next())) {
                    return false;
                }
            }
            return true;
        }
        return want.equals(got);
    }

    private static boolean empty(JsonNode v) {
        return v.isNull() || (v.isNumber() && v.decimalValue().signum() == 0) || (v.isBoolean() && !v.asBoolean())
                || (v.isTextual() && v.asText().isEmpty()) || (v.isContainerNode() && v.size() == 0);
    }

    private static void check(String type, int index) {
        List<JsonNode> events = written.get(type);
        assertTrue(events != null && events.size() > index, "the listener wrote no " + type + " (wrote "
                + written.keySet() + ")");
        assertEquals(new ArrayList<String>(), differences(type, events.get(index)), "written: " + events.get(index));
    }

    @Test
    void appStartMatchesTheExample() {
        check("app_start", 0);
    }

    @Test
    void jobStartMatchesTheExample() {
        check("job_start", 0);
    }

    @Test
    void stageSubmittedMatchesTheExample() {
        check("stage_submitted", 0);
    }

    @Test
    void taskEndMatchesTheExample() {
        assertEquals(4, written.get("task_end").size());
        check("task_end", 0);
    }

    @Test
    void stageCompletedMatchesTheExample() {
        check("stage_completed", 0);
    }

    @Test
    void jobEndMatchesTheExample() {
        check("job_end", 0);
    }

    @Test
    void appEndMatchesTheExample() {
        check("app_end", 0);
    }

    @Test
    void eventsAreNumberedInOrder() {
        List<Long> seqs = new ArrayList<>();
        for (List<JsonNode> events : written.values()) {
            for (JsonNode e : events) {
                seqs.add(e.get("seq").asLong());
            }
        }
        seqs.sort(null);
        for (int i = 0; i < seqs.size(); i++) {
            assertEquals(i + 1, seqs.get(i), "seq " + seqs);
        }
    }
}
