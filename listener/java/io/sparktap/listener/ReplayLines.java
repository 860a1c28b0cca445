package io.sparktap.listener;

import java.io.ByteArrayOutputStream;
import java.io.FilterInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.List;

import org.apache.spark.SparkConf;
import org.apache.spark.io.CompressionCodec;
import org.apache.spark.io.CompressionCodec$;

/**
 * The complete lines of one event log (a file, or the {@code events_N_*} files of a rolling log, in order), as the
 * Scala iterator {@code ReplayListenerBus.replay} reads. Decompresses with Spark's own codec, chosen by the file
 * name as Spark does ({@code EventLogFileWriter.codecName}).
 *
 * <p>Only lines ending in a newline are handed out: the last, unfinished line of a log being written (or of a
 * truncated one) is left out, so importing a growing log twice reads the same events in the same order. When it
 * stops early (a partial last line, a stream that cannot be decompressed further), {@link #stop} says where.
 */
final class ReplayLines extends scala.collection.AbstractIterator<String> {
    static final List<String> CODECS = java.util.Arrays.asList("lz4", "lzf", "snappy", "zstd");
    static final String IN_PROGRESS = ".inprogress";

    private final List<ReplayFiles.LogFile> files;
    private final SparkConf codecConf = new SparkConf(false);
    private int fileIndex = -1;
    private InputStream in;
    private final Counting counting = new Counting();
    private String next;
    private final ByteArrayOutputStream line = new ByteArrayOutputStream(4096);
    /** Bytes read in bulk from the (decompressed) stream; lines are cut out of it, not read a byte at a time. */
    private final byte[] buf = new byte[1 << 16];
    private int pos;
    private int limit;
    /** Complete lines handed out so far (over all files). */
    long lines;
    /** Line number of the current file of the last line handed out. */
    long fileLine;
    /** File and line (in that file) of the last line handed out. */
    String lastFile = "";
    long lastLine;
    /** Why reading stopped before the end (null: it did not), e.g. a partial last line. */
    String stop;
    /** Whether the stop was a partial last line (expected while a log is in progress). */
    boolean partialTail;

    /** A line longer than this stops the log where it starts: what is buffered of a line never exceeds it. */
    private final long maxLineBytes;

    ReplayLines(List<ReplayFiles.LogFile> files, long maxLineBytes) {
        this.files = files;
        this.maxLineBytes = maxLineBytes;
    }

    /** Stops at an over-long line (returns true) with a stop message naming it. */
    private boolean overLong(long length) {
        if (length <= maxLineBytes) {
            return false;
        }
        stop = "line " + (fileLine + 1) + " of file=\"" + currentFile().name() + "\" is longer than the line cap of "
                + maxLineBytes + " bytes (--max-line-mb): the events before it were imported";
        closeQuietly();
        return true;
    }

    /** Bytes read from disk so far (compressed size for a compressed log). */
    long bytesRead() {
        return counting.count;
    }

    ReplayFiles.LogFile currentFile() {
        return fileIndex >= 0 && fileIndex < files.size() ? files.get(fileIndex) : null;
    }

    /** The codec short name of an event log file, "" for plain; IOException naming it when Spark has no such codec. */
    static String codecOf(String fileName) throws IOException {
        String name = fileName.endsWith(IN_PROGRESS)
                ? fileName.substring(0, fileName.length() - IN_PROGRESS.length()) : fileName;
        int dot = name.indexOf('.');
        if (dot < 0) {
            return "";
        }
        String codec = name.substring(name.lastIndexOf('.') + 1);
        if (!CODECS.contains(codec)) {
            throw new IOException("unknown compression codec=\"" + codec + "\" in the file name (Spark writes "
                    + "lz4, lzf, snappy or zstd, or no extension for a plain log)");
        }
        return codec;
    }

    private boolean openNext() {
        closeQuietly();
        fileIndex++;
        if (fileIndex >= files.size()) {
            return false;
        }
        ReplayFiles.LogFile f = files.get(fileIndex);
        fileLine = 0;
        try {
            String codec = codecOf(f.name());
            counting.reset(f.open());
            if (codec.isEmpty()) {
                in = counting;
            } else {
                CompressionCodec c = CompressionCodec$.MODULE$.createCodec(codecConf, codec);
                in = c.compressedInputStream(counting);
            }
            return true;
        } catch (IOException | RuntimeException e) {
            stop = "cannot open file=\"" + f.name() + "\": " + e.getMessage();
            in = null;
            return false;
        }
    }

    private String readLine() {
        while (true) {
            if (in == null) {
                if (stop != null || !openNext()) {
                    return null;
                }
                pos = 0;
                limit = 0;
            }
            line.reset();
            try {
                while (true) {
                    if (pos >= limit) {
                        int n = in.read(buf, 0, buf.length);
                        if (n < 0) {
                            break;
                        }
                        pos = 0;
                        limit = n;
                        continue;
                    }
                    int start = pos;
                    int i = start;
                    byte[] b = buf;
                    int end = limit;
                    while (i < end && b[i] != '\n') {
                        i++;
                    }
                    if (overLong((long) line.size() + (i - start))) {
                        return null;
                    }
                    if (i < end) {
                        pos = i + 1;
                        fileLine++;
                        if (line.size() == 0) {
                            return new String(b, start, i - start, StandardCharsets.UTF_8);
                        }
                        line.write(b, start, i - start);
                        return new String(line.toByteArray(), StandardCharsets.UTF_8);
                    }
                    line.write(b, start, end - start); // a line longer than what is buffered: keep its head
                    pos = end;
                }
                if (line.size() > 0) {
                    partialTail = true;
                    stop = "line " + (fileLine + 1) + " of file=\"" + currentFile().name()
                            + "\" is incomplete (the log ends mid-line: truncated, or still being written)";
                    closeQuietly();
                    return null;
                }
                closeQuietly(); // clean end of this file: on to the next one
            } catch (IOException | RuntimeException e) {
                partialTail = true;
                stop = "cannot read file=\"" + currentFile().name() + "\" after line " + fileLine + ": "
                        + e.getClass().getSimpleName() + (e.getMessage() == null ? "" : " " + e.getMessage())
                        + " (truncated, or still being written)";
                closeQuietly();
                return null;
            }
        }
    }

    private void closeQuietly() {
        if (in != null) {
            try {
                in.close();
            } catch (IOException | RuntimeException ignored) {
                // nothing to do: the file was read
            }
            in = null;
        }
    }

    @Override
    public boolean hasNext() {
        if (next == null) {
            next = readLine();
        }
        return next != null;
    }

    @Override
    public String next() {
        if (!hasNext()) {
            throw new java.util.NoSuchElementException();
        }
        String out = next;
        next = null;
        lines++;
        ReplayFiles.LogFile f = currentFile();
        lastFile = f == null ? "" : f.name();
        lastLine = fileLine;
        return out;
    }

    /** Counts the bytes read from the file under the decompressor. */
    private static final class Counting extends FilterInputStream {
        long count;

        Counting() {
            super(null);
        }

        void reset(InputStream stream) {
            in = stream;
        }

        @Override
        public int read() throws IOException {
            int b = super.read();
            if (b >= 0) {
                count++;
            }
            return b;
        }

        @Override
        public int read(byte[] b, int off, int len) throws IOException {
            int n = super.read(b, off, len);
            if (n > 0) {
                count += n;
            }
            return n;
        }

        @Override
        public long skip(long n) throws IOException {
            long s = super.skip(n);
            count += Math.max(0L, s);
            return s;
        }
    }
}
