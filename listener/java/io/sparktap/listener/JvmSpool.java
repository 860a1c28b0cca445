package io.sparktap.listener;

import java.io.BufferedOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.DirectoryStream;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.PosixFilePermission;
import java.nio.file.attribute.PosixFilePermissions;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * The in-JVM producer's spool: the same directory and file format as the relay's (listener/spool.py, whose
 * docstring is the reference), so a relay or {@code sparktap relay-drain} resends what a driver JVM spooled and the
 * other way round. Segments {@code seg-<time_ns>-<pid>-<n>.open|.seg|.sending-<pid>}, a header line
 * {@code #sparktap-spool 1 <topic>}, then {@code <key>\t<value>} lines; the directory is 0700 and each file 0600;
 * the total is bounded by spark.sparktap.relay.spoolMaxBytes (plus a small reserve for listener_health).
 */
final class JvmSpool {
    static final byte[] HEADER_PREFIX = "#sparktap-spool 1 ".getBytes(StandardCharsets.UTF_8);
    static final long SEGMENT_BYTES = 4L << 20;
    static final long HEALTH_RESERVE_BYTES = 64L << 10;
    private static final long RESCAN_NANOS = 5_000_000_000L;
    private static final Pattern NAME = Pattern.compile("^seg-(\\d{20})-(\\d+)-(\\d+)\\.(open|seg|sending-(\\d+))$");
    private static final Set<PosixFilePermission> FILE_MODE = PosixFilePermissions.fromString("rw-------");
    private static final Set<PosixFilePermission> DIR_MODE = PosixFilePermissions.fromString("rwx------");

    /** A claimed segment being resent. */
    static final class Segment {
        final Path path;
        final String stem;
        final String topic;
        final List<byte[][]> records;

        Segment(Path path, String stem, String topic, List<byte[][]> records) {
            this.path = path;
            this.stem = stem;
            this.topic = topic;
            this.records = records;
        }
    }

    final Path dir;
    final long maxBytes;
    final String topic;
    final long pid;
    /** Why nothing can be spooled (one line), or null. */
    String problem;
    private int counter;
    private Path openPath;
    private OutputStream openFile;
    private long openRecords;
    private long openBytes;
    private long bytes;
    private long scannedAtNanos;

    JvmSpool(String configuredDir, long maxBytes, String topic) {
        this.dir = configuredDir == null ? defaultDir() : Paths.get(configuredDir);
        this.maxBytes = Math.max(0L, maxBytes);
        this.topic = topic;
        this.pid = pid();
        if (this.maxBytes == 0) {
            problem = "spooling is off (spark.sparktap.relay.spoolMaxBytes=0)";
        } else {
            try {
                if (!Files.isDirectory(dir)) {
                    Files.createDirectories(dir);
                    Files.setPosixFilePermissions(dir, DIR_MODE);
                }
                problem = privateDir(dir);
            } catch (IOException | UnsupportedOperationException | SecurityException e) {
                problem = "cannot create spool dir=\"" + dir + "\": " + e;
            }
        }
        rescan();
    }

    /** {@code <tmp>/sparktap-spool-<user>}, as spool.default_spool_dir() makes it (TMPDIR first, like Python). */
    static Path defaultDir() {
        String tmp = System.getenv("TMPDIR");
        if (tmp == null || tmp.isEmpty() || !Files.isDirectory(Paths.get(tmp))) {
            tmp = System.getProperty("java.io.tmpdir", "/tmp");
        }
        String user = System.getProperty("user.name", "");
        String safe = user.replaceAll("[^A-Za-z0-9_.-]", "_");
        return Paths.get(tmp, "sparktap-spool-" + (safe.isEmpty() ? "user" : safe));
    }

    static long pid() {
        String name = ManagementFactory.getRuntimeMXBean().getName(); // "pid@host" (Java 8 has no ProcessHandle)
        try {
            return Long.parseLong(name.substring(0, name.indexOf('@')));
        } catch (RuntimeException e) {
            return 0L;
        }
    }

    private static String privateDir(Path dir) throws IOException {
        String owner = Files.getOwner(dir).getName();
        String me = System.getProperty("user.name", "");
        if (!owner.equals(me)) {
            return "spool dir=\"" + dir + "\" belongs to " + owner + ", not to this user: not spooling there; remove "
                    + "it or set spark.sparktap.relay.spoolDir to a directory of this user";
        }
        Set<PosixFilePermission> mode = Files.getPosixFilePermissions(dir);
        if (!mode.equals(DIR_MODE)) {
            Files.setPosixFilePermissions(dir, DIR_MODE);
        }
        return null;
    }

    boolean usable() {
        return problem == null;
    }

    static byte[] safeKey(String key) {
        return key.replace('\t', '_').replace('\n', '_').replace('\r', '_').getBytes(StandardCharsets.UTF_8);
    }

    long rescan() {
        long total = 0;
        if (usable()) {
            try (DirectoryStream<Path> entries = Files.newDirectoryStream(dir, "seg-*")) {
                for (Path p : entries) {
                    try {
                        total += Files.size(p);
                    } catch (IOException e) {
                        // removed meanwhile
                    }
                }
            } catch (IOException e) {
                // counted as empty
            }
        }
        bytes = total;
        scannedAtNanos = System.nanoTime();
        return total;
    }

    private long sizeBytes() {
        if (System.nanoTime() - scannedAtNanos > RESCAN_NANOS) {
            rescan();
        }
        return bytes;
    }

    /** Append one record; false if it does not fit or cannot be written (the caller counts it as lost). */
    boolean append(byte[] key, byte[] value, int offset, int length, boolean priority) {
        if (!usable()) {
            return false;
        }
        long record = key.length + 2L + length;
        long limit = maxBytes + (priority ? HEALTH_RESERVE_BYTES : 0);
        if (sizeBytes() + record > limit) {
            return false;
        }
        try {
            OutputStream out = writer();
            out.write(key);
            out.write('\t');
            out.write(value, offset, length);
            out.write('\n');
        } catch (IOException e) {
            problem = "cannot write to spool dir=\"" + dir + "\": " + e.getMessage();
            closeOpen();
            return false;
        }
        bytes += record;
        openRecords++;
        openBytes += record;
        if (openBytes >= SEGMENT_BYTES) {
            seal();
        }
        return true;
    }

    private static long timeNs() {
        Instant now = Instant.now();
        return now.getEpochSecond() * 1_000_000_000L + now.getNano();
    }

    private OutputStream writer() throws IOException {
        if (openFile == null) {
            counter++;
            String name = String.format("seg-%020d-%d-%06d.open", timeNs(), pid, counter);
            Path path = dir.resolve(name);
            OutputStream out = new BufferedOutputStream(createPrivate(path), 256 * 1024);
            byte[] header = header(topic);
            out.write(header);
            bytes += header.length;
            openPath = path;
            openFile = out;
            openRecords = 0;
            openBytes = header.length;
        }
        return openFile;
    }

    private static byte[] header(String topic) {
        byte[] t = (topic + "\n").getBytes(StandardCharsets.UTF_8);
        byte[] h = Arrays.copyOf(HEADER_PREFIX, HEADER_PREFIX.length + t.length);
        System.arraycopy(t, 0, h, HEADER_PREFIX.length, t.length);
        return h;
    }

    /** A new file only this user can read or write (0600 whatever the umask); fails if it exists. */
    private static OutputStream createPrivate(Path path) throws IOException {
        Files.createFile(path, PosixFilePermissions.asFileAttribute(FILE_MODE));
        Files.setPosixFilePermissions(path, FILE_MODE);
        return Files.newOutputStream(path, StandardOpenOption.WRITE, StandardOpenOption.APPEND);
    }

    long openRecords() {
        return openRecords;
    }

    void flush() {
        if (openFile != null) {
            try {
                openFile.flush();
            } catch (IOException e) {
                // the next append reports it
            }
        }
    }

    /** Close the segment being written so that it can be resent (a segment with no record is removed). */
    void seal() {
        Path path = openPath;
        long records = openRecords;
        long written = openBytes;
        closeOpen();
        if (path == null) {
            return;
        }
        try {
            if (records == 0) {
                Files.deleteIfExists(path);
                bytes -= written;
            } else {
                String name = path.getFileName().toString();
                Files.move(path, path.resolveSibling(name.substring(0, name.length() - ".open".length()) + ".seg"),
                        StandardCopyOption.ATOMIC_MOVE);
            }
        } catch (IOException e) {
            // an .open file of a dead pid is claimable all the same
        }
    }

    private void closeOpen() {
        OutputStream out = openFile;
        openFile = null;
        openPath = null;
        openRecords = 0;
        openBytes = 0;
        if (out != null) {
            try {
                out.close();
            } catch (IOException e) {
                // nothing more to do
            }
        }
    }

    /** Segments anyone may resend, oldest first: sealed ones, and ones whose writer or claimer is gone. */
    List<Path> claimable() {
        List<Path> found = new ArrayList<>();
        if (!usable()) {
            return found;
        }
        try (DirectoryStream<Path> entries = Files.newDirectoryStream(dir, "seg-*")) {
            for (Path p : entries) {
                Matcher m = NAME.matcher(p.getFileName().toString());
                if (!m.matches()) {
                    continue;
                }
                String kind = m.group(4);
                long owner = kind.equals("open") ? Long.parseLong(m.group(2))
                        : m.group(5) == null ? 0L : Long.parseLong(m.group(5));
                if (kind.equals("seg") || (owner != pid && !pidAlive(owner))) {
                    found.add(p);
                }
            }
        } catch (IOException | RuntimeException e) {
            return found;
        }
        Collections.sort(found, (a, b) -> a.getFileName().toString().compareTo(b.getFileName().toString()));
        return found;
    }

    /** Whether a process is alive; where /proc is missing, every pid counts as alive (its files are left alone). */
    static boolean pidAlive(long pid) {
        if (pid <= 0) {
            return false;
        }
        if (!Files.isDirectory(Paths.get("/proc/self"))) {
            return true;
        }
        return Files.exists(Paths.get("/proc", Long.toString(pid)));
    }

    /** The oldest claimable segment, claimed (atomic rename) and read; null when there is none. */
    Segment claimNext() {
        for (Path p : claimable()) {
            String name = p.getFileName().toString();
            String stem = name.substring(0, name.indexOf('.'));
            Path claimed = p.resolveSibling(stem + ".sending-" + pid);
            byte[] data;
            try {
                Files.move(p, claimed, StandardCopyOption.ATOMIC_MOVE);
                data = Files.readAllBytes(claimed);
            } catch (IOException e) {
                continue; // someone else was faster
            }
            return parse(claimed, stem, data, topic);
        }
        return null;
    }

    /** Topic and records of a segment; a torn last line (a crash mid-write) is skipped (as spool.parse_segment). */
    static Segment parse(Path path, String stem, byte[] data, String defaultTopic) {
        String segTopic = defaultTopic;
        List<byte[][]> records = new ArrayList<>();
        int start = 0;
        int index = 0;
        for (int i = 0; i < data.length; i++) {
            if (data[i] != '\n') {
                continue;
            }
            int len = i - start;
            if (len > 0) {
                if (index == 0 && startsWith(data, start, HEADER_PREFIX)) {
                    String t = new String(data, start + HEADER_PREFIX.length, len - HEADER_PREFIX.length,
                            StandardCharsets.UTF_8);
                    segTopic = t.isEmpty() ? defaultTopic : t;
                } else {
                    int tab = -1;
                    for (int j = start; j < i; j++) {
                        if (data[j] == '\t') {
                            tab = j;
                            break;
                        }
                    }
                    if (tab >= 0 && tab + 1 < i && data[tab + 1] == '{') {
                        records.add(new byte[][] {Arrays.copyOfRange(data, start, tab),
                            Arrays.copyOfRange(data, tab + 1, i)});
                    }
                }
            }
            index++;
            start = i + 1;
        }
        return new Segment(path, stem, segTopic, records);
    }

    private static boolean startsWith(byte[] data, int at, byte[] prefix) {
        if (data.length - at < prefix.length) {
            return false;
        }
        for (int i = 0; i < prefix.length; i++) {
            if (data[at + i] != prefix[i]) {
                return false;
            }
        }
        return true;
    }

    /** All of a claimed segment was delivered: remove it. */
    void finish(Segment s) {
        try {
            long size = Files.size(s.path);
            Files.deleteIfExists(s.path);
            bytes = Math.max(0L, bytes - size);
        } catch (IOException e) {
            // already gone
        }
    }

    /**
     * Put the undelivered records of a claimed segment back under the segment's own name (so it keeps its place in
     * the order), sealed; the delivered ones are not resent.
     */
    void writeBack(Segment s, List<byte[][]> undelivered) {
        if (undelivered.isEmpty()) {
            finish(s);
            return;
        }
        Path tmp = s.path.resolveSibling(s.stem + ".tmp-" + pid);
        try {
            Files.deleteIfExists(tmp);
            try (OutputStream out = new BufferedOutputStream(createPrivate(tmp), 256 * 1024)) {
                out.write(header(s.topic));
                for (byte[][] r : undelivered) {
                    out.write(r[0]);
                    out.write('\t');
                    out.write(r[1]);
                    out.write('\n');
                }
            }
            Files.move(tmp, s.path.resolveSibling(s.stem + ".seg"), StandardCopyOption.ATOMIC_MOVE);
            Files.deleteIfExists(s.path);
        } catch (FileAlreadyExistsException e) {
            problem = "cannot write back to spool dir=\"" + dir + "\": " + e.getMessage();
        } catch (IOException e) {
            // the claimed file stays: claimable again once this JVM is gone (at-least-once, nothing lost)
        }
        rescan();
    }

    void close() {
        seal();
    }
}
