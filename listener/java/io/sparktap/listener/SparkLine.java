package io.sparktap.listener;

import java.io.InputStream;
import java.util.Properties;

/**
 * Which Spark line this jar was built for, and whether the running driver is on it.
 *
 * <p>Each jar carries {@code build.properties} (written by listener/javabuild.py): the artifact name, the Spark
 * major version and oldest minor it links against, its Scala binary version and the Java release of its classes.
 * This class is compiled for Java 8 in every artifact and touches Spark and Scala only through reflection, so the
 * check itself runs on any line and any JVM, before anything that could fail to link.
 */
final class SparkLine {
    final String artifact;
    final int sparkMajor;
    final int sparkMinMinor;
    final String scalaBinary;
    final int javaRelease;

    private SparkLine(Properties p) {
        artifact = p.getProperty("artifact", "unknown");
        sparkMajor = Integer.parseInt(p.getProperty("spark.major", "0"));
        sparkMinMinor = Integer.parseInt(p.getProperty("spark.min.minor", "0"));
        scalaBinary = p.getProperty("scala.binary", "");
        javaRelease = Integer.parseInt(p.getProperty("java.release", "8"));
    }

    /** A line from build.properties-style values (tests, tools). */
    static SparkLine of(Properties p) {
        return new SparkLine(p);
    }

    /** This jar's line, from its build.properties. */
    static SparkLine ofThisJar() throws java.io.IOException {
        Properties p = new Properties();
        try (InputStream in = SparkLine.class.getResourceAsStream("build.properties")) {
            if (in == null) {
                throw new java.io.IOException("build.properties is missing from the listener jar");
            }
            p.load(in);
        }
        return new SparkLine(p);
    }

    String describe() {
        return "Spark " + sparkMajor + ".x / Scala " + scalaBinary + " (" + artifact + ".jar)";
    }

    /** "Spark 3.5.9 / Scala 2.12.18 / Java 11.0.13" for the running driver. */
    static String runtime() {
        return "Spark " + sparkVersion() + " / Scala " + scalaVersion() + " / Java "
                + System.getProperty("java.version", "?");
    }

    static String sparkVersion() {
        try {
            Class<?> pkg = Class.forName("org.apache.spark.package$");
            Object module = pkg.getField("MODULE$").get(null);
            return String.valueOf(pkg.getMethod("SPARK_VERSION").invoke(module));
        } catch (ReflectiveOperationException | LinkageError e) {
            return "unknown";
        }
    }

    static String scalaVersion() {
        try {
            return String.valueOf(Class.forName("scala.util.Properties").getMethod("versionNumberString").invoke(null));
        } catch (ReflectiveOperationException | LinkageError e) {
            return "unknown";
        }
    }

    /** The artifact to install for a Spark/Scala pair, or null when no sparktap artifact supports it. */
    static String artifactFor(int major, int minor, String scalaBinary) {
        if (major == 3 && minor >= 3 && scalaBinary.equals("2.12")) {
            return "sparktap-listener-spark3_2.12.jar";
        }
        if (major >= 4 && scalaBinary.equals("2.13")) {
            return "sparktap-listener-spark4_2.13.jar";
        }
        return null;
    }

    /** Why this jar cannot run in this driver (one line naming the versions and what to install), or null. */
    String problem() {
        String spark = sparkVersion();
        String scala = scalaVersion();
        int[] sv = majorMinor(spark);
        int[] sc = majorMinor(scala);
        String scalaBin = sc[0] < 0 ? "unknown" : sc[0] + "." + sc[1];
        int java = javaFeature(System.getProperty("java.specification.version", "0"));
        boolean sparkOk = sparkMajor >= 4 ? sv[0] >= 4 : sv[0] == sparkMajor && sv[1] >= sparkMinMinor;
        if (sparkOk && scalaBin.equals(scalaBinary) && java >= javaRelease) {
            return null;
        }
        String found = "the driver runs " + runtime();
        String want = artifactFor(sv[0], sv[1], scalaBin);
        String fix;
        if (want == null) {
            fix = "no sparktap listener supports this Spark/Scala line (supported: Spark 3.3-3.5 on Scala 2.12, "
                    + "Spark 4.x on Scala 2.13); set --conf spark.sparktap.enabled=false or remove the listener";
        } else if (want.equals(artifact + ".jar") && java < javaRelease) {
            fix = "this artifact needs Java " + javaRelease + " or newer: run the driver on Java " + javaRelease;
        } else {
            fix = "put " + want + " on spark.jars instead (`sparktap listener-jar --spark-version " + sv[0] + "."
                    + Math.max(sv[1], 0) + "` prints its path)";
        }
        return "this listener jar is for " + describe() + ", but " + found + ": " + fix;
    }

    static int[] majorMinor(String version) {
        int[] out = {-1, -1};
        String[] parts = version.split("[.\\-+]");
        for (int i = 0; i < 2 && i < parts.length; i++) {
            try {
                out[i] = Integer.parseInt(parts[i]);
            } catch (NumberFormatException e) {
                return out;
            }
        }
        return out;
    }

    static int javaFeature(String spec) {
        String s = spec.startsWith("1.") ? spec.substring(2) : spec;
        int[] mm = majorMinor(s);
        return mm[0];
    }
}
