package io.sparktap.listener;

import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import org.apache.spark.SparkConf;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The transport contract test's harness (tests/integration/test_listener_jvm_transport.py): the same fixed events,
 * through the listener's own writer of one transport, to Kafka; no SparkContext. In the listener's package, so it
 * builds the package-private pipeline and writers the listener uses.
 *
 * <p>Arguments: transport (kafka|relay), bootstrap servers, topic, spool dir, the relay's python, the seconds the
 * writer gets to finish (an unreachable broker: the listener's flush deadline then ends in the spool), and
 * spark.sparktap.relay.startTimeoutMs (how long the writer waits for Kafka at start).
 */
public final class TransportContract {
    private static final Logger LOG = LoggerFactory.getLogger("io.sparktap.listener.TransportContract");

    public static void main(String[] args) throws Exception {
        SparkConf conf = new SparkConf(false)
                .set("spark.sparktap.transport", args[0])
                .set("spark.sparktap.kafka.bootstrap.servers", args[1])
                .set("spark.sparktap.kafka.topic", args[2])
                .set("spark.sparktap.relay.spoolDir", args[3])
                .set("spark.sparktap.relay.python", args[4])
                .set("spark.sparktap.relay.statusIntervalMs", "100")
                .set("spark.sparktap.relay.startTimeoutMs", args[6])
                .set("spark.sparktap.relay.flushTimeoutMs", "2000");
        long seconds = Long.parseLong(args[5]);
        ListenerConfig cfg = ListenerConfig.from(conf);
        if (cfg.problem != null) {
            throw new IllegalStateException(cfg.problem);
        }
        EventPipeline pipeline = new EventPipeline(10_000, new CallbackErrors());
        JsonOut.Envelope envelope = new JsonOut.Envelope("contract", "app-20260101000000-0042", "1", "contract ✓");
        RelayStatus status = new RelayStatus();
        EventWriter.Owner owner = new EventWriter.Owner() {
            @Override
            public void disable(String oneLine) {
                System.err.println("DISABLED " + oneLine);
            }

            @Override
            public void failed(String where, Throwable t) {
                System.err.println("FAILED " + where + " " + t);
            }
        };
        Transport writer = args[0].equals("kafka") ? new KafkaWriter(cfg, pipeline, envelope, status, LOG, owner)
                : new EventWriter(cfg, pipeline, envelope, status, LOG, owner);
        Thread thread = new Thread(writer, "sparktap-writer");
        thread.start();
        for (int i = 0; i < 500; i++) {
            final int n = i;
            Map<String, String> props = new LinkedHashMap<>();
            props.put("k" + n, "tab\tquote\"backslash\\newline\nunicode é中\u2028 " + n);
            pipeline.submit(Event.of(EventType.values()[n % (EventType.values().length - 1)], 1_700_000_000_000L + n,
                    out -> {
                        out.str("text", "événement #" + n + " \u0001 </script>");
                        out.num("big", Long.MAX_VALUE - n);
                        out.real("ratio", n / 7.0);
                        out.flag("even", n % 2 == 0);
                        out.ints("ids", new int[] {n, -n, Integer.MIN_VALUE});
                        out.strings("names", Arrays.asList("a", "", "ü" + n));
                        out.stringMap("properties", props);
                        out.opt("absent", null);
                    }));
        }
        writer.requestStop(System.nanoTime() + TimeUnit.SECONDS.toNanos(seconds));
        if (!writer.awaitDone(TimeUnit.SECONDS.toMillis(seconds + 5))) {
            throw new IllegalStateException("the writer did not finish");
        }
        RelayStatus.Totals t = status.totals();
        System.out.println("{\"written\":" + status.writtenTotal() + ",\"spooled\":" + t.spooled + ",\"lost\":" + t.lost
                + "}");
    }
}
