/*
 * The collector's C reader (sparktap.native._flatjson), shared by its three files:
 *   _flatjson.c        the Reader type (its field list, the rules of what it takes) and the module;
 *   _flatjson_read.c   Reader.read(): each message parsed into a row, committed to the columns (the fuzzed code);
 *   _flatjson_scan.c   the consumer's helpers: scan_messages (a poll's messages split by a byte budget) and
 *                      native_strings (an Arrow string column in ClickHouse's Native encoding).
 */
#ifndef SPARKTAP_FLATJSON_H
#define SPARKTAP_FLATJSON_H

#include "_kafkachunk.h"

#include <string.h>

/* The functions the reader's files share stay inside the extension: not exported, so the compiler calls them
 * directly, as it would a static function (an exported one goes through the PLT and is never inlined). */
#define FJ_SHARED __attribute__((visibility("hidden")))

enum { KIND_INT = 0, KIND_BOOL = 1, KIND_STR = 2 };

/* A growing byte buffer. It starts inside a bytes object made with the GIL (``in_bytes``: written in place, then
 * shrunk to its length and handed out as it is, no copy); past that room it moves to the C heap (no GIL needed), and
 * its bytes object is copied from there at the end. */
typedef struct {
    char *data;
    size_t len;
    size_t cap;
    PyObject *bytes; /* the bytes object it started in (NULL: none); released with the GIL */
    int in_bytes;    /* data points into ``bytes`` */
} Buf;

typedef struct {
    char *name;
    Py_ssize_t name_len;
    int kind;
    int required;
    int64_t lo;
    int64_t hi;
    Py_ssize_t n_choices;
    char **choices;
    Py_ssize_t *choice_lens;
    int has_fill; /* a missing value is stored as fill, not as a null */
    int64_t fill;
} Field;

typedef struct {
    PyObject_HEAD
    Py_ssize_t n_fields;
    Field *fields;
    Py_ssize_t max_bytes;
} Reader;

/* One message's values before they are known to be good: committed to the columns only if the whole message is. */
typedef struct {
    unsigned char *present;
    int64_t *ints;
    const unsigned char **strs;
    size_t *str_lens;
    Py_ssize_t *next; /* next[f + 1]: the field that followed f in the last message (next[0]: the first field) */
} Row;

/* Per column output of one read() call: bytes objects sized for every message up front, written in place (the
 * characters of a string column too, in room for 64 bytes a message, moved to the C heap if they outgrow it). */
typedef struct {
    PyObject *fixed;    /* int: int64 per row, bool: uint8 per row */
    PyObject *offsets;  /* str: int32 per row, plus one */
    PyObject *validity; /* bit per row: the field was present */
    char *fixed_at;
    char *offsets_at;
    unsigned char *valid_at;
    Buf chars; /* str: the values' bytes */
    Py_ssize_t nulls;
} Column;

/* Room for ``size`` bytes in a new bytes object (with the GIL): 0, or -1 with an exception set. */
FJ_SHARED int buf_start_in_bytes(Buf *b, size_t size);

/* The buffer's bytes as a bytes object of exactly its length (with the GIL), or NULL with an exception set. */
FJ_SHARED PyObject *buf_take_bytes(Buf *b);

/* Frees what the buffer holds (with the GIL). */
FJ_SHARED void buf_release(Buf *b);

/* Fills the parser's tables; once, before the first read (the module's init). */
FJ_SHARED void parse_init(void);

/* Reader.read(values): see the method's doc in _flatjson.c. */
FJ_SHARED PyObject *Reader_read(Reader *self, PyObject *values);

/* The module functions of _flatjson_scan.c (their docs are in the module's method table) and its init. */
FJ_SHARED PyObject *native_strings(PyObject *self, PyObject *args);
FJ_SHARED PyObject *scan_messages(PyObject *self, PyObject *args);
FJ_SHARED int scan_init(void);

#endif
