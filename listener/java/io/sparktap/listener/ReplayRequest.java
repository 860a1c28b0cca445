package io.sparktap.listener;

import java.io.DataInputStream;
import java.io.EOFException;
import java.io.FileInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

/**
 * One framed request on the replay JVM's stdin ({@link ReplayMain}'s class comment): a log to replay, by path or as
 * files the importer already opened and checked.
 */
final class ReplayRequest {
    static final int PATH = 0;
    static final int OPENED = 1;
    static final int MAX_TEXT = 1 << 20;
    static final int MAX_FILES = 1 << 20;
    final long id;
    final String path;
    /** The log's files when the importer opened them (kind OPENED), else null: {@link ReplayFiles#open}. */
    final ReplayFiles.Log opened;

    ReplayRequest(long id, String path, ReplayFiles.Log opened) {
        this.id = id;
        this.path = path;
        this.opened = opened;
    }

    /** The next request, or null at the end of the stream; IOException when the stream is not framed. */
    static ReplayRequest read(DataInputStream in) throws IOException {
        long id;
        try {
            id = in.readLong();
        } catch (EOFException end) {
            return null;
        }
        int kind = in.readUnsignedByte();
        String path = text(in);
        if (kind == PATH) {
            return new ReplayRequest(id, path, null);
        }
        if (kind != OPENED) {
            throw new IOException("unknown request kind " + kind);
        }
        boolean inProgress = in.readUnsignedByte() != 0;
        int n = in.readInt();
        if (n < 0 || n > MAX_FILES) {
            throw new IOException("a log of " + n + " files");
        }
        List<ReplayFiles.LogFile> files = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            files.add(opened(text(in), text(in)));
        }
        return new ReplayRequest(id, path, new ReplayFiles.Log(files, inProgress));
    }

    private static String text(DataInputStream in) throws IOException {
        int len = in.readInt();
        if (len < 0 || len > MAX_TEXT) {
            throw new IOException("a text of " + len + " bytes");
        }
        byte[] bytes = new byte[len];
        in.readFully(bytes);
        return new String(bytes, StandardCharsets.UTF_8);
    }

    private static ReplayFiles.LogFile opened(String name, String openPath) {
        return new ReplayFiles.LogFile() {
            @Override
            public String name() {
                return name;
            }

            @Override
            public InputStream open() throws IOException {
                return new FileInputStream(openPath);
            }

            @Override
            public boolean readable() {
                return true; // the importer opened it: a regular file it can read
            }
        };
    }
}
