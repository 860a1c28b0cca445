import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.spark.SparkConf;
import org.apache.spark.api.java.JavaPairRDD;
import org.apache.spark.api.java.JavaRDD;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.scheduler.SparkListener;
import org.apache.spark.scheduler.SparkListenerJobEnd;
import org.apache.spark.scheduler.SparkListenerStageCompleted;
import org.apache.spark.scheduler.SparkListenerTaskEnd;

import scala.Tuple2;

/**
 * A Java Spark application for tests/integration/test_listener_jvm_transport.py: a few jobs (a narrow one and a
 * shuffle, so several stages and task attempts), counted by its own SparkListener; after SparkContext.stop() (the
 * listener bus has delivered everything) it writes {"jobs", "stages", "tasks", "python"} as JSON to args[0].
 *
 * <p>With args[1] (a folder) it runs in three phases: after phase N (but the last) it creates {@code phase-N} there
 * and waits for {@code go-N} (so a test can stop the broker for phase 2 and start it again for phase 3). "python" says whether a python3 or
 * python could be started from this JVM (the test runs it on a PATH without one).
 */
public final class SparktapCountingApp {
    private static final int PHASES = 3;

    public static void main(String[] args) throws Exception {
        Path out = Paths.get(args[0]);
        Path control = args.length > 1 ? Paths.get(args[1]) : null;
        AtomicLong jobs = new AtomicLong();
        AtomicLong stages = new AtomicLong();
        AtomicLong tasks = new AtomicLong();
        JavaSparkContext sc = new JavaSparkContext(new SparkConf().setAppName("sparktap-jvm-transport"));
        sc.sc().addSparkListener(new SparkListener() {
            @Override
            public void onJobEnd(SparkListenerJobEnd e) {
                jobs.incrementAndGet();
            }

            @Override
            public void onStageCompleted(SparkListenerStageCompleted e) {
                stages.incrementAndGet();
            }

            @Override
            public void onTaskEnd(SparkListenerTaskEnd e) {
                tasks.incrementAndGet();
            }
        });
        List<Integer> numbers = new ArrayList<>();
        for (int i = 0; i < 2000; i++) {
            numbers.add(i);
        }
        for (int phase = 1; phase <= PHASES; phase++) {
            JavaRDD<Integer> rdd = sc.parallelize(numbers, 8);
            long evens = rdd.filter(n -> n % 2 == 0).count();
            JavaPairRDD<Integer, Integer> sums = rdd.mapToPair(n -> new Tuple2<>(n % 10, n)).reduceByKey(Integer::sum, 6);
            long groups = sums.count();
            if (evens != 1000 || groups != 10) {
                throw new IllegalStateException("wrong results: " + evens + " " + groups);
            }
            if (control != null && phase < PHASES) {
                Files.createFile(control.resolve("phase-" + phase));
                Path go = control.resolve("go-" + phase);
                long until = System.nanoTime() + 300_000_000_000L;
                while (!Files.exists(go) && System.nanoTime() < until) {
                    Thread.sleep(50);
                }
            }
        }
        sc.stop();
        String json = "{\"jobs\":" + jobs.get() + ",\"stages\":" + stages.get() + ",\"tasks\":" + tasks.get()
                + ",\"python\":" + canStart("python3", "python") + "}";
        Files.write(out, json.getBytes(StandardCharsets.UTF_8));
    }

    private static boolean canStart(String... names) {
        for (String name : names) {
            try {
                Process p = new ProcessBuilder(name, "--version").redirectErrorStream(true).start();
                p.waitFor();
                return true;
            } catch (IOException | InterruptedException e) {
                // not on the PATH
            }
        }
        return false;
    }
}
