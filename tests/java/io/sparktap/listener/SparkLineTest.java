package io.sparktap.listener;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Properties;

import org.junit.jupiter.api.Test;

/** The line check, run on the Spark 4 / Scala 2.13 / Java 17 class path the JUnit run uses. */
class SparkLineTest {
    private static SparkLine line(String artifact, int major, int minMinor, String scala, int release) {
        Properties p = new Properties();
        p.setProperty("artifact", artifact);
        p.setProperty("spark.major", Integer.toString(major));
        p.setProperty("spark.min.minor", Integer.toString(minMinor));
        p.setProperty("scala.binary", scala);
        p.setProperty("java.release", Integer.toString(release));
        return SparkLine.of(p);
    }

    @Test
    void versionsParse() {
        assertArrayEquals(new int[] {3, 5}, SparkLine.majorMinor("3.5.9"));
        assertArrayEquals(new int[] {4, 0}, SparkLine.majorMinor("4.0.1-SNAPSHOT"));
        assertArrayEquals(new int[] {2, 13}, SparkLine.majorMinor("2.13.16"));
        assertArrayEquals(new int[] {-1, -1}, SparkLine.majorMinor("unknown"));
        assertEquals(8, SparkLine.javaFeature("1.8"));
        assertEquals(17, SparkLine.javaFeature("17"));
        assertEquals(11, SparkLine.javaFeature("11.0.2"));
    }

    @Test
    void artifactPerSparkAndScala() {
        assertEquals("sparktap-listener-spark3_2.12.jar", SparkLine.artifactFor(3, 3, "2.12"));
        assertEquals("sparktap-listener-spark3_2.12.jar", SparkLine.artifactFor(3, 5, "2.12"));
        assertEquals("sparktap-listener-spark4_2.13.jar", SparkLine.artifactFor(4, 1, "2.13"));
        assertNull(SparkLine.artifactFor(3, 2, "2.12"));
        assertNull(SparkLine.artifactFor(3, 5, "2.13"));
    }

    @Test
    void theRightJarHasNoProblem() {
        assertTrue(SparkLine.sparkVersion().startsWith("4."), SparkLine.sparkVersion());
        assertNull(line("sparktap-listener-spark4_2.13", 4, 0, "2.13", 17).problem());
    }

    @Test
    void theOtherLinesJarSaysWhichToInstall() {
        SparkLine spark3 = line("sparktap-listener-spark3_2.12", 3, 3, "2.12", 8);
        String problem = spark3.problem();
        assertTrue(problem.startsWith("this listener jar is for Spark 3.x / Scala 2.12 "
                + "(sparktap-listener-spark3_2.12.jar), but the driver runs Spark 4."), problem);
        assertTrue(problem.endsWith(": put sparktap-listener-spark4_2.13.jar on spark.jars instead "
                + "(`sparktap listener-jar --spark-version " + SparkLine.majorMinor(SparkLine.sparkVersion())[0]
                + "." + SparkLine.majorMinor(SparkLine.sparkVersion())[1] + "` prints its path)"), problem);
    }

    @Test
    void aNewerJavaReleaseThanTheDriversIsNamed() {
        String problem = line("sparktap-listener-spark4_2.13", 4, 0, "2.13", 99).problem();
        assertTrue(problem.endsWith(": this artifact needs Java 99 or newer: run the driver on Java 99"), problem);
    }
}
