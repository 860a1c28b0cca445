package io.sparktap.listener;

import java.io.File;
import java.io.FileInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.net.URI;
import java.net.URISyntaxException;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Pattern;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

/**
 * The files of one event log, on the local disk (a plain path) or through Hadoop's {@link FileSystem} (a URI:
 * {@code file://}, {@code hdfs://}, {@code s3a://}, {@code gs://}, {@code abfs://}, whichever FileSystem classes are
 * on the class path). A log is one file, or a rolling {@code eventlog_v2_*} directory whose {@code events_N_*} files
 * are read in order of N.
 */
final class ReplayFiles {
    private static final Pattern URI_LIKE = Pattern.compile("^[a-zA-Z][a-zA-Z0-9+.-]*:/.*");
    private static Configuration hadoopConf;

    private ReplayFiles() {
    }

    /** One file of a log. */
    interface LogFile {
        String name();

        InputStream open() throws IOException;

        boolean readable();
    }

    static boolean isUri(String path) {
        return URI_LIKE.matcher(path).matches();
    }

    /** Hadoop's configuration as Spark builds it ({@code spark.hadoop.*} system properties, HADOOP_CONF_DIR). */
    static synchronized Configuration hadoop() {
        if (hadoopConf == null) {
            hadoopConf = org.apache.spark.deploy.SparkHadoopUtil$.MODULE$.get()
                    .newConfiguration(new org.apache.spark.SparkConf(true));
        }
        return hadoopConf;
    }

    /** The log's files in reading order, and whether it is still being written. */
    static final class Log {
        final List<LogFile> files;
        final boolean inProgress;

        Log(List<LogFile> files, boolean inProgress) {
            this.files = files;
            this.inProgress = inProgress;
        }
    }

    static Log open(String path) throws IOException {
        return isUri(path) ? openHadoop(path) : openLocal(new File(path));
    }

    private static Log openLocal(File log) throws IOException {
        List<LogFile> files = new ArrayList<>();
        if (!log.isDirectory()) {
            files.add(local(log));
            return new Log(files, log.getName().endsWith(ReplayLines.IN_PROGRESS));
        }
        File[] all = log.listFiles();
        if (all == null) {
            throw new IOException("cannot list the directory");
        }
        List<String> status = new ArrayList<>();
        for (File f : all) {
            if (f.getName().startsWith("events_")) {
                files.add(local(f));
            } else if (f.getName().startsWith("appstatus_")) {
                status.add(f.getName());
            }
        }
        return rolling(files, status);
    }

    private static Log rolling(List<LogFile> files, List<String> status) throws IOException {
        if (files.isEmpty()) {
            throw new IOException("no events_N_* file in this rolling event log directory");
        }
        files.sort((a, b) -> Long.compare(rollIndex(a.name()), rollIndex(b.name())));
        boolean inProgress = status.isEmpty();
        for (String s : status) {
            inProgress |= s.endsWith(ReplayLines.IN_PROGRESS);
        }
        return new Log(files, inProgress);
    }

    static long rollIndex(String name) {
        String[] parts = name.split("_", 3);
        try {
            return parts.length > 1 ? Long.parseLong(parts[1]) : Long.MAX_VALUE;
        } catch (NumberFormatException e) {
            return Long.MAX_VALUE;
        }
    }

    private static LogFile local(File f) {
        return new LogFile() {
            @Override
            public String name() {
                return f.getName();
            }

            @Override
            public InputStream open() throws IOException {
                return new FileInputStream(f);
            }

            @Override
            public boolean readable() {
                return f.canRead();
            }
        };
    }

    private static Log openHadoop(String uri) throws IOException {
        Path path;
        try {
            path = new Path(new URI(uri));
        } catch (URISyntaxException | IllegalArgumentException e) {
            throw new IOException("not a valid URI: " + e.getMessage());
        }
        FileSystem fs;
        try {
            fs = path.getFileSystem(hadoop());
        } catch (IOException | RuntimeException | LinkageError e) {
            throw new IOException("no Hadoop FileSystem for scheme=\"" + path.toUri().getScheme() + "\" ("
                    + e.getClass().getSimpleName() + ": " + e.getMessage() + "): put its connector jar on the "
                    + "class path (sparktap import --engine spark --packages ...)");
        }
        FileStatus status = fs.getFileStatus(path);
        List<LogFile> files = new ArrayList<>();
        if (!status.isDirectory()) {
            files.add(hadoopFile(fs, status));
            return new Log(files, path.getName().endsWith(ReplayLines.IN_PROGRESS));
        }
        List<String> appStatus = new ArrayList<>();
        for (FileStatus s : fs.listStatus(path)) {
            String name = s.getPath().getName();
            if (name.startsWith("events_") && !s.isDirectory()) {
                files.add(hadoopFile(fs, s));
            } else if (name.startsWith("appstatus_")) {
                appStatus.add(name);
            }
        }
        return rolling(files, appStatus);
    }

    private static LogFile hadoopFile(FileSystem fs, FileStatus status) {
        Path p = status.getPath();
        return new LogFile() {
            @Override
            public String name() {
                return p.getName();
            }

            @Override
            public InputStream open() throws IOException {
                return fs.open(p, 1 << 16);
            }

            @Override
            public boolean readable() {
                return true; // the FileSystem says on open (an AccessControlException names the file)
            }
        };
    }
}
