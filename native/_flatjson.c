/*
 * sparktap.native._flatjson: flat JSON objects -> column buffers, for the collector's hot path.
 *
 * A Reader knows the fields of one flat table (name, kind, required, integer bounds, allowed strings). read()
 * takes a sequence of message values and returns the rows of every message it *takes*, column by column, as
 * buffers Arrow wraps without a copy (arrowpath.py), plus the positions of the messages it did not take.
 *
 * It takes a message only when all of this holds, and otherwise leaves the message to the Python path, which
 * judges it against the pydantic contract (so this reader can only be stricter than the contract, never laxer):
 *   - bytes of at most max_bytes; one JSON object, optional JSON whitespace around and inside it;
 *   - every known field given once (a duplicate: not taken); an unknown key (a newer minor version's field) is
 *     skipped, as the model ignores it, when its value is a plain string, a number, true, false or null;
 *   - integer fields: -?(0|[1-9][0-9]*) within int64 and within the field's [lo, hi]; no fraction, no exponent,
 *     no quotes, no true/false;
 *   - boolean fields: true or false;
 *   - string fields: no escape sequence, no control character, valid UTF-8 (no overlong form, no surrogate,
 *     nothing above U+10FFFF), one of the allowed values when the field has a list of them;
 *   - no null in a known field (a missing field is the only way to get a null, so Arrow nulls mean "missing");
 *   - every required field present.
 * A missing optional field gets its fill value when the spec gives one (an int or bool column's default, within its
 * bounds: the row is then valid), else a null (its validity bit is clear) and the caller fills the column default.
 *
 * The parse runs without the GIL: the values are pinned in a tuple first, or read where they lie when they are a
 * MessageChunk's (_kafkachunk.c: the consumer's messages as librdkafka made them).
 */
#include "_kafkachunk.h"

#include <string.h>

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

static int buf_reserve(Buf *b, size_t extra) {
    size_t need = b->len + extra;
    if (need <= b->cap) {
        return 0;
    }
    size_t cap = b->cap ? b->cap : 1024;
    while (cap < need) {
        cap *= 2;
    }
    char *data;
    if (b->in_bytes) {
        data = malloc(cap);
        if (data != NULL) {
            memcpy(data, b->data, b->len);
            b->in_bytes = 0;
        }
    } else {
        data = realloc(b->data, cap);
    }
    if (data == NULL) {
        return -1;
    }
    b->data = data;
    b->cap = cap;
    return 0;
}

/* Room for ``size`` bytes in a new bytes object (with the GIL): 0, or -1 with an exception set. */
static int buf_start_in_bytes(Buf *b, size_t size) {
    b->bytes = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)size);
    if (b->bytes == NULL) {
        return -1;
    }
    b->data = PyBytes_AS_STRING(b->bytes);
    b->len = 0;
    b->cap = size;
    b->in_bytes = 1;
    return 0;
}

/* The buffer's bytes as a bytes object of exactly its length (with the GIL): its own bytes object shrunk in place
 * when it never left it, else a copy. A new reference, or NULL with an exception set. */
static PyObject *buf_take_bytes(Buf *b) {
    if (!b->in_bytes) {
        return PyBytes_FromStringAndSize(b->data, (Py_ssize_t)b->len);
    }
    PyObject *out = b->bytes;
    b->bytes = NULL;
    b->data = NULL;
    b->in_bytes = 0;
    if (_PyBytes_Resize(&out, (Py_ssize_t)b->len) < 0) {
        return NULL;
    }
    return out;
}

/* Frees what the buffer holds (with the GIL). */
static void buf_release(Buf *b) {
    if (!b->in_bytes) {
        free(b->data);
    }
    b->data = NULL;
    b->in_bytes = 0;
    Py_CLEAR(b->bytes);
}

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

static void free_fields(Field *fields, Py_ssize_t n) {
    if (fields == NULL) {
        return;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyMem_Free(fields[i].name);
        for (Py_ssize_t c = 0; c < fields[i].n_choices; c++) {
            PyMem_Free(fields[i].choices[c]);
        }
        PyMem_Free(fields[i].choices);
        PyMem_Free(fields[i].choice_lens);
    }
    PyMem_Free(fields);
}

static char *copy_bytes(PyObject *obj, Py_ssize_t *len, const char *what) {
    char *src;
    if (!PyBytes_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be bytes, got %s", what, Py_TYPE(obj)->tp_name);
        return NULL;
    }
    PyBytes_AsStringAndSize(obj, &src, len);
    char *out = PyMem_Malloc(*len ? (size_t)*len : 1);
    if (out == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    memcpy(out, src, (size_t)*len);
    return out;
}

static int Reader_init(Reader *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"fields", "max_bytes", NULL};
    PyObject *spec;
    Py_ssize_t max_bytes;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "On", kwlist, &spec, &max_bytes)) {
        return -1;
    }
    PyObject *seq = PySequence_Fast(spec, "fields must be a sequence of (name, kind, required, lo, hi, choices"
                                          "[, fill])");
    if (seq == NULL) {
        return -1;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    Field *fields = PyMem_Calloc(n ? (size_t)n : 1, sizeof(Field));
    if (fields == NULL) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *name, *choices, *fill = Py_None;
        Field *f = &fields[i];
        long long lo, hi;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "SipLLO|O;a field is (name: bytes, kind: int, "
                              "required: bool, lo: int, hi: int, choices: tuple[bytes, ...] | None[, fill: int | "
                              "None])", &name, &f->kind, &f->required, &lo, &hi, &choices, &fill)) {
            goto fail;
        }
        if (f->kind != KIND_INT && f->kind != KIND_BOOL && f->kind != KIND_STR) {
            PyErr_Format(PyExc_ValueError, "unknown field kind %d (0 int, 1 bool, 2 str)", f->kind);
            goto fail;
        }
        f->lo = lo;
        f->hi = hi;
        if (fill != Py_None) {
            long long v = PyLong_AsLongLong(fill);
            if (v == -1 && PyErr_Occurred()) {
                goto fail;
            }
            if (f->kind == KIND_STR || f->required || (f->kind == KIND_INT && (v < lo || v > hi)) ||
                (f->kind == KIND_BOOL && v != 0 && v != 1)) {
                PyErr_Format(PyExc_ValueError, "fill %lld: only an optional int field's value within [lo, hi] or "
                             "an optional bool field's 0 or 1 can be a fill", v);
                goto fail;
            }
            f->has_fill = 1;
            f->fill = v;
        }
        if ((f->name = copy_bytes(name, &f->name_len, "a field name")) == NULL) {
            goto fail;
        }
        for (Py_ssize_t c = 0; c < f->name_len; c++) {
            unsigned char ch = (unsigned char)f->name[c];
            if (ch < 0x20 || ch >= 0x7F || ch == '"' || ch == '\\') {
                PyErr_Format(PyExc_ValueError, "field name %R: only printable ASCII without quotes or backslashes "
                             "(names are matched in place)", name);
                goto fail;
            }
        }
        if (choices != Py_None) {
            PyObject *cs = PySequence_Fast(choices, "choices must be a sequence of bytes or None");
            if (cs == NULL) {
                goto fail;
            }
            Py_ssize_t nc = PySequence_Fast_GET_SIZE(cs);
            f->choices = PyMem_Calloc(nc ? (size_t)nc : 1, sizeof(char *));
            f->choice_lens = PyMem_Calloc(nc ? (size_t)nc : 1, sizeof(Py_ssize_t));
            if (f->choices == NULL || f->choice_lens == NULL) {
                Py_DECREF(cs);
                PyErr_NoMemory();
                goto fail;
            }
            for (Py_ssize_t c = 0; c < nc; c++) {
                f->choices[c] = copy_bytes(PySequence_Fast_GET_ITEM(cs, c), &f->choice_lens[c], "a choice");
                if (f->choices[c] == NULL) {
                    Py_DECREF(cs);
                    goto fail;
                }
                f->n_choices = c + 1;
            }
            Py_DECREF(cs);
            if (nc == 0) {
                f->n_choices = -1; /* an empty list of choices: no value is allowed */
            }
        }
    }
    Py_DECREF(seq);
    free_fields(self->fields, self->n_fields);
    self->fields = fields;
    self->n_fields = n;
    self->max_bytes = max_bytes;
    return 0;
fail:
    Py_DECREF(seq);
    free_fields(fields, n);
    return -1;
}

static void Reader_dealloc(Reader *self) {
    free_fields(self->fields, self->n_fields);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* ------------------------------------------------------------------------------------------------- parsing */

static inline const unsigned char *skip_ws(const unsigned char *p, const unsigned char *end) {
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) {
        p++;
    }
    return p;
}

/* A string's body from just after its opening quote: returns the closing quote, or NULL if the string is not
 * plain (escape, control character, invalid UTF-8) or not closed. */
/* 1 for the bytes a plain string runs on: printable ASCII but the quote and the backslash */
static unsigned char plain[256];

static const unsigned char *scan_string(const unsigned char *p, const unsigned char *end) {
    while (p < end) {
        while (p < end && plain[*p]) {
            p++;
        }
        if (p == end) {
            break;
        }
        unsigned char c = *p;
        if (c == '"') {
            return p;
        }
        if (c == '\\' || c < 0x20) {
            return NULL;
        }
        if (c < 0x80) {
            p++;
            continue;
        }
        /* UTF-8 (RFC 3629): the second byte's range depends on the first */
        int extra;
        unsigned char lo2 = 0x80, hi2 = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) {
            extra = 1;
        } else if (c == 0xE0) {
            extra = 2;
            lo2 = 0xA0;
        } else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) {
            extra = 2;
        } else if (c == 0xED) {
            extra = 2;
            hi2 = 0x9F; /* no surrogates */
        } else if (c == 0xF0) {
            extra = 3;
            lo2 = 0x90;
        } else if (c >= 0xF1 && c <= 0xF3) {
            extra = 3;
        } else if (c == 0xF4) {
            extra = 3;
            hi2 = 0x8F; /* nothing above U+10FFFF */
        } else {
            return NULL;
        }
        if (end - p <= extra || p[1] < lo2 || p[1] > hi2) {
            return NULL;
        }
        for (int k = 2; k <= extra; k++) {
            if (p[k] < 0x80 || p[k] > 0xBF) {
                return NULL;
            }
        }
        p += extra + 1;
    }
    return NULL;
}

static inline Py_ssize_t find_field(const Reader *r, const unsigned char *key, size_t len) {
    for (Py_ssize_t i = 0; i < r->n_fields; i++) {
        if ((size_t)r->fields[i].name_len == len && memcmp(r->fields[i].name, key, len) == 0) {
            return i;
        }
    }
    return -1;
}

static inline const unsigned char *skip_digits(const unsigned char *p, const unsigned char *end) {
    while (p < end && *p >= '0' && *p <= '9') {
        p++;
    }
    return p;
}

/* Past one JSON scalar: a plain string (as scan_string), a number, true, false or null; NULL for anything else
 * (an object or an array is left to the Python path). */
static const unsigned char *skip_scalar(const unsigned char *p, const unsigned char *end) {
    if (*p == '"') {
        const unsigned char *close = scan_string(p + 1, end);
        return close == NULL ? NULL : close + 1;
    }
    if (end - p >= 4 && (memcmp(p, "true", 4) == 0 || memcmp(p, "null", 4) == 0)) {
        return p + 4;
    }
    if (end - p >= 5 && memcmp(p, "false", 5) == 0) {
        return p + 5;
    }
    /* -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
    if (*p == '-') {
        p++;
    }
    if (p == end || *p < '0' || *p > '9') {
        return NULL;
    }
    p = *p == '0' ? p + 1 : skip_digits(p, end);
    if (p < end && *p == '.') {
        const unsigned char *digits = p + 1;
        p = skip_digits(digits, end);
        if (p == digits) {
            return NULL;
        }
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-')) {
            p++;
        }
        const unsigned char *digits = p;
        p = skip_digits(digits, end);
        if (p == digits) {
            return NULL;
        }
    }
    return p;
}

/* 1: the message is one row (its values are in row), 0: leave it to the Python path. */
static int parse_message(const Reader *r, const unsigned char *p, size_t size, Row *row) {
    const unsigned char *end = p + size;
    memset(row->present, 0, (size_t)r->n_fields);
    p = skip_ws(p, end);
    if (p == end || *p != '{') {
        return 0;
    }
    p = skip_ws(p + 1, end);
    if (p < end && *p == '}') {
        p++;
        goto done;
    }
    Py_ssize_t previous = -1;
    for (;;) {
        if (p == end || *p != '"') {
            return 0;
        }
        const unsigned char *key = p + 1;
        const unsigned char *close;
        Py_ssize_t f = row->next[previous + 1];
        /* the expected key, compared in place: field names are plain ASCII, so a match needs no scan */
        if (f >= 0 && (size_t)(end - key) > (size_t)r->fields[f].name_len &&
            memcmp(key, r->fields[f].name, (size_t)r->fields[f].name_len) == 0 && key[r->fields[f].name_len] == '"') {
            close = key + r->fields[f].name_len;
        } else {
            close = scan_string(key, end);
            if (close == NULL) {
                return 0;
            }
            f = find_field(r, key, (size_t)(close - key));
        }
        if (f >= 0 && row->present[f]) {
            return 0; /* a duplicate key */
        }
        p = skip_ws(close + 1, end);
        if (p == end || *p != ':') {
            return 0;
        }
        p = skip_ws(p + 1, end);
        if (p == end) {
            return 0;
        }
        if (f < 0) { /* a field of a newer minor version: ignored, as the model ignores it, if it is a scalar */
            p = skip_scalar(p, end);
            if (p == NULL) {
                return 0;
            }
            goto next;
        }
        row->next[previous + 1] = f;
        previous = f;
        const Field *field = &r->fields[f];
        switch (field->kind) {
        case KIND_INT: {
            int negative = 0;
            if (*p == '-') {
                negative = 1;
                p++;
            }
            if (p == end || *p < '0' || *p > '9') {
                return 0;
            }
            uint64_t magnitude = 0;
            if (*p == '0') {
                p++; /* a leading zero stands alone: "01" fails at the next delimiter */
            } else {
                int digits = 0;
                while (p < end && *p >= '0' && *p <= '9') {
                    if (++digits > 19) {
                        return 0;
                    }
                    magnitude = magnitude * 10 + (uint64_t)(*p - '0');
                    p++;
                }
            }
            int64_t value;
            if (negative) {
                if (magnitude > (uint64_t)INT64_MAX + 1) {
                    return 0;
                }
                value = magnitude == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)magnitude;
            } else {
                if (magnitude > (uint64_t)INT64_MAX) {
                    return 0;
                }
                value = (int64_t)magnitude;
            }
            if (value < field->lo || value > field->hi) {
                return 0;
            }
            row->ints[f] = value;
            break;
        }
        case KIND_BOOL:
            if (end - p >= 4 && memcmp(p, "true", 4) == 0) {
                row->ints[f] = 1;
                p += 4;
            } else if (end - p >= 5 && memcmp(p, "false", 5) == 0) {
                row->ints[f] = 0;
                p += 5;
            } else {
                return 0;
            }
            break;
        default: { /* KIND_STR */
            if (*p != '"') {
                return 0;
            }
            const unsigned char *value = p + 1;
            const unsigned char *stop = scan_string(value, end);
            if (stop == NULL) {
                return 0;
            }
            size_t len = (size_t)(stop - value);
            if (field->n_choices) {
                int allowed = 0;
                for (Py_ssize_t c = 0; c < field->n_choices; c++) {
                    if ((size_t)field->choice_lens[c] == len && memcmp(field->choices[c], value, len) == 0) {
                        allowed = 1;
                        break;
                    }
                }
                if (!allowed) {
                    return 0;
                }
            }
            row->strs[f] = value;
            row->str_lens[f] = len;
            p = stop + 1;
        }
        }
        row->present[f] = 1;
    next:
        p = skip_ws(p, end);
        if (p == end) {
            return 0;
        }
        if (*p == '}') {
            p++;
            break;
        }
        if (*p != ',') {
            return 0;
        }
        p = skip_ws(p + 1, end);
    }
done:
    if (skip_ws(p, end) != end) {
        return 0; /* anything after the object */
    }
    for (Py_ssize_t f = 0; f < r->n_fields; f++) {
        if (r->fields[f].required && !row->present[f]) {
            return 0;
        }
    }
    return 1;
}

/* Appends a parsed row to the columns; -1 when out of memory or a string column outgrows int32 offsets. */
static int commit_row(const Reader *r, const Row *row, Column *cols, Py_ssize_t index) {
    for (Py_ssize_t f = 0; f < r->n_fields; f++) {
        Column *col = &cols[f];
        int present = row->present[f];
        const Field *field = &r->fields[f];
        if (present || field->has_fill) {
            col->valid_at[index >> 3] |= (unsigned char)(1u << (index & 7));
        } else {
            col->nulls++;
        }
        switch (field->kind) {
        case KIND_INT: {
            int64_t v = present ? row->ints[f] : field->fill; /* fill is 0 unless the field has one */
            memcpy(col->fixed_at + 8 * index, &v, sizeof v);
            break;
        }
        case KIND_BOOL:
            col->fixed_at[index] = (char)(present ? row->ints[f] : field->fill);
            break;
        default: {
            size_t len = present ? row->str_lens[f] : 0;
            if (col->chars.len + len > (size_t)INT32_MAX) {
                return -1;
            }
            if (len) {
                if (buf_reserve(&col->chars, len) < 0) {
                    return -1;
                }
                memcpy(col->chars.data + col->chars.len, row->strs[f], len);
                col->chars.len += len;
            }
            int32_t offset = (int32_t)col->chars.len;
            memcpy(col->offsets_at + 4 * (index + 1), &offset, sizeof offset);
        }
        }
    }
    return 0;
}

static PyObject *Reader_read(Reader *self, PyObject *values) {
    int from_chunk = chunk_is_values(values);
    PyObject *pinned = from_chunk ? Py_NewRef(values) : PySequence_Tuple(values);
    if (pinned == NULL) {
        return NULL;
    }
    Py_ssize_t n = from_chunk ? chunk_length(pinned) : PyTuple_GET_SIZE(pinned);
    Py_ssize_t nf = self->n_fields;
    PyObject *result = NULL;
    const unsigned char **ptrs = PyMem_Calloc(n ? (size_t)n : 1, sizeof(*ptrs));
    size_t *sizes = PyMem_Calloc(n ? (size_t)n : 1, sizeof(*sizes));
    unsigned char *taken = PyMem_Calloc(n ? (size_t)n : 1, 1);
    Column *cols = PyMem_Calloc(nf ? (size_t)nf : 1, sizeof(Column));
    Row row = {
        PyMem_Calloc(nf ? (size_t)nf : 1, 1),
        PyMem_Calloc(nf ? (size_t)nf : 1, sizeof(int64_t)),
        PyMem_Calloc(nf ? (size_t)nf : 1, sizeof(unsigned char *)),
        PyMem_Calloc(nf ? (size_t)nf : 1, sizeof(size_t)),
        PyMem_Malloc(((size_t)nf + 1) * sizeof(Py_ssize_t)),
    };
    if (!ptrs || !sizes || !taken || !cols || !row.present || !row.ints || !row.strs || !row.str_lens || !row.next) {
        PyErr_NoMemory();
        goto out;
    }
    for (Py_ssize_t f = 0; f <= nf; f++) {
        row.next[f] = f < nf ? f : -1; /* until learnt: the fields' own order */
    }
    if (from_chunk) {
        if (chunk_values(pinned, ptrs, sizes, self->max_bytes) < 0) {
            goto out;
        }
    } else {
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *v = PyTuple_GET_ITEM(pinned, i);
            if (PyBytes_Check(v) && PyBytes_GET_SIZE(v) <= self->max_bytes) {
                ptrs[i] = (const unsigned char *)PyBytes_AS_STRING(v);
                sizes[i] = (size_t)PyBytes_GET_SIZE(v);
            }
        }
    }
    /* room for every message up front */
    Py_ssize_t bitmap = (n + 7) / 8 + 1;
    for (Py_ssize_t f = 0; f < nf; f++) {
        Column *col = &cols[f];
        int kind = self->fields[f].kind;
        col->validity = PyBytes_FromStringAndSize(NULL, bitmap);
        if (col->validity == NULL) {
            goto out;
        }
        col->valid_at = (unsigned char *)PyBytes_AS_STRING(col->validity);
        memset(col->valid_at, 0, (size_t)bitmap);
        if (kind == KIND_STR) {
            col->offsets = PyBytes_FromStringAndSize(NULL, 4 * (n + 1));
            if (col->offsets == NULL) {
                goto out;
            }
            col->offsets_at = PyBytes_AS_STRING(col->offsets);
            memset(col->offsets_at, 0, 4);
            if (buf_start_in_bytes(&col->chars, 64 * (size_t)n + 1) < 0) {
                goto out;
            }
        } else {
            col->fixed = PyBytes_FromStringAndSize(NULL, (kind == KIND_INT ? 8 : 1) * n + 1);
            if (col->fixed == NULL) {
                goto out;
            }
            col->fixed_at = PyBytes_AS_STRING(col->fixed);
        }
    }
    Py_ssize_t rows = 0;
    int failed = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        /* the next message's first 2 KiB, fetched while this one is parsed: the messages lie apart in memory and
         * each one's first touch was most of the reader's cost (bench/consume_objects.py); past 2 KiB the
         * hardware's own prefetch follows the parse */
        if (i + 1 < n && ptrs[i + 1] != NULL) {
            size_t ahead = sizes[i + 1] < 2048 ? sizes[i + 1] : 2048;
            for (size_t at = 0; at < ahead; at += 64) {
                __builtin_prefetch(ptrs[i + 1] + at);
            }
        }
        if (ptrs[i] == NULL || !parse_message(self, ptrs[i], sizes[i], &row)) {
            continue;
        }
        if (commit_row(self, &row, cols, rows) < 0) {
            failed = 1;
            break;
        }
        taken[i] = 1;
        rows++;
    }
    Py_END_ALLOW_THREADS
    if (failed) {
        PyErr_SetString(PyExc_MemoryError, "out of memory, or a string column of one read above 2 GiB: read "
                        "fewer messages at a time");
        goto out;
    }
    PyObject *columns = PyList_New(nf);
    PyObject *skipped = PyList_New(0);
    if (columns == NULL || skipped == NULL) {
        Py_XDECREF(columns);
        Py_XDECREF(skipped);
        goto out;
    }
    for (Py_ssize_t f = 0; f < nf; f++) {
        Column *col = &cols[f];
        PyObject *data = col->fixed;
        if (self->fields[f].kind == KIND_STR) {
            data = buf_take_bytes(&col->chars);
        } else {
            Py_INCREF(data);
        }
        PyObject *item = data == NULL ? NULL : Py_BuildValue(
            "(NOnO)", data, col->offsets ? col->offsets : Py_None, col->nulls, col->nulls ? col->validity : Py_None);
        if (item == NULL) {
            Py_DECREF(columns);
            Py_DECREF(skipped);
            goto out;
        }
        PyList_SET_ITEM(columns, f, item);
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!taken[i]) {
            PyObject *index = PyLong_FromSsize_t(i);
            if (index == NULL || PyList_Append(skipped, index) < 0) {
                Py_XDECREF(index);
                Py_DECREF(columns);
                Py_DECREF(skipped);
                goto out;
            }
            Py_DECREF(index);
        }
    }
    result = Py_BuildValue("(nNN)", rows, columns, skipped);
out:
    if (cols != NULL) {
        for (Py_ssize_t f = 0; f < nf; f++) {
            Py_XDECREF(cols[f].fixed);
            Py_XDECREF(cols[f].offsets);
            Py_XDECREF(cols[f].validity);
            buf_release(&cols[f].chars);
        }
    }
    PyMem_Free(cols);
    PyMem_Free(row.present);
    PyMem_Free(row.ints);
    PyMem_Free((void *)row.strs);
    PyMem_Free(row.str_lens);
    PyMem_Free(row.next);
    PyMem_Free((void *)ptrs);
    PyMem_Free(sizes);
    PyMem_Free(taken);
    Py_DECREF(pinned);
    return result;
}

static PyMethodDef Reader_methods[] = {
    {"read", (PyCFunction)Reader_read, METH_O,
     "read(values) -> (rows, columns, skipped): the rows of the messages taken, per field (values, offsets, "
     "nulls, validity); skipped lists the positions of the messages left to the Python path."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "sparktap.native._flatjson.Reader",
    .tp_basicsize = sizeof(Reader),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Reader(fields, max_bytes): flat JSON objects of one table into column buffers.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Reader_init,
    .tp_dealloc = (destructor)Reader_dealloc,
    .tp_methods = Reader_methods,
};

/* native_strings(offsets, data, offset, length) -> bytes: an Arrow string column (int32 offsets, UTF-8 data; the
 * slice [offset, offset + length)) in ClickHouse's Native encoding of String: per value, its byte length as an
 * unsigned LEB128 varint, then its bytes. The server insert path sends these bytes as they are
 * (storage/native.py). */
static PyObject *native_strings(PyObject *self, PyObject *args) {
    Py_buffer offs, data;
    Py_ssize_t offset, length;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*y*nn", &offs, &data, &offset, &length)) {
        return NULL;
    }
    PyObject *out = NULL;
    if (offset < 0 || length < 0 || (size_t)(offset + length + 1) * sizeof(int32_t) > (size_t)offs.len) {
        PyErr_SetString(PyExc_ValueError, "native_strings: the slice is outside the offsets buffer");
        goto done;
    }
    const int32_t *o = (const int32_t *)offs.buf + offset;
    if (o[0] < 0 || o[length] < o[0] || (Py_ssize_t)o[length] > data.len) {
        PyErr_SetString(PyExc_ValueError, "native_strings: the offsets point outside the data buffer");
        goto done;
    }
    Py_ssize_t size = (Py_ssize_t)(o[length] - o[0]) + length * 5; /* a 32-bit length takes at most 5 bytes */
    out = PyBytes_FromStringAndSize(NULL, size);
    if (out == NULL) {
        goto done;
    }
    unsigned char *w = (unsigned char *)PyBytes_AS_STRING(out);
    const unsigned char *src = (const unsigned char *)data.buf;
    for (Py_ssize_t i = 0; i < length; i++) {
        int32_t a = o[i], b = o[i + 1];
        if (b < a) {
            PyErr_SetString(PyExc_ValueError, "native_strings: the offsets decrease");
            Py_CLEAR(out);
            goto done;
        }
        uint32_t n = (uint32_t)(b - a);
        while (n >= 0x80) {
            *w++ = (unsigned char)(n | 0x80);
            n >>= 7;
        }
        *w++ = (unsigned char)n;
        memcpy(w, src + a, (size_t)(b - a));
        w += b - a;
    }
    if (_PyBytes_Resize(&out, (Py_ssize_t)(w - (unsigned char *)PyBytes_AS_STRING(out))) < 0) {
        out = NULL;
    }
done:
    PyBuffer_Release(&offs);
    PyBuffer_Release(&data);
    return out;
}


/* scan_messages(messages, room) -> (taken, rest, errors, values, size, offsets): one pass in C over a list of
 * consumed confluent-kafka Message objects (their methods called through the C-API: no Python loop per message).
 *   errors:  the messages whose error() is not None, in order (the caller logs them; partition EOFs among them);
 *   taken:   the other messages, from the first, while their value bytes fit in ``room`` (at least one; room < 0:
 *            all of them), values: their value() (bytes or None), size: those values' bytes;
 *   rest:    the messages without error past the budget (the caller rewinds them);
 *   offsets: {(topic, partition): (first offset, last offset)} of ``taken`` (a partition's messages come in offset
 *            order, so its first message has its lowest offset and its last one its highest);
 *   and, given a list ``where`` as a third argument, each taken message's partition and offset appended to it as
 *   two bytes objects of native int64s (what the pending batch keeps of each row instead of its message). */
static PyObject *s_error, *s_value, *s_topic, *s_partition, *s_offset;

/* A no-argument method of the messages (confluent-kafka's Message, or a test's Python class): the ordinary method
 * call. Only confluent-kafka's consumer hands out such objects; the collector's own consumer scans its chunks in
 * _kafkachunk.c without them. */
static PyObject *call_noargs(PyObject *obj, PyObject *name) { return PyObject_CallMethodNoArgs(obj, name); }

static int note_offset(PyObject *offsets, PyObject *msg, PyObject **last_topic, long *last_part, PyObject **entry,
                       long long *part_out, long long *offset_out) {
    PyObject *topic = call_noargs(msg, s_topic);
    if (topic == NULL) {
        return -1;
    }
    PyObject *part = call_noargs(msg, s_partition);
    PyObject *off = part ? call_noargs(msg, s_offset) : NULL;
    int rc = -1;
    if (off == NULL) {
        goto done;
    }
    long p = PyLong_AsLong(part);
    if (p == -1 && PyErr_Occurred()) {
        goto done;
    }
    long long o = PyLong_AsLongLong(off);
    if (o == -1 && PyErr_Occurred()) {
        goto done;
    }
    *part_out = p;
    *offset_out = o;
    int same = *entry != NULL && p == *last_part && (topic == *last_topic ||
                                                     PyObject_RichCompareBool(topic, *last_topic, Py_EQ) == 1);
    if (!same) {
        PyObject *key = PyTuple_Pack(2, topic, part);
        if (key == NULL) {
            goto done;
        }
        PyObject *found = PyDict_GetItemWithError(offsets, key);
        if (found == NULL) {
            if (PyErr_Occurred()) {
                Py_DECREF(key);
                goto done;
            }
            found = PyList_New(2);
            if (found == NULL || PyDict_SetItem(offsets, key, found) < 0) {
                Py_XDECREF(found);
                Py_DECREF(key);
                goto done;
            }
            Py_INCREF(off);
            PyList_SET_ITEM(found, 0, off);
            Py_INCREF(off);
            PyList_SET_ITEM(found, 1, off);
            Py_DECREF(found); /* the dict holds it */
        }
        Py_DECREF(key);
        Py_XSETREF(*last_topic, Py_NewRef(topic));
        *last_part = p;
        *entry = found;
    }
    if (PyList_SetItem(*entry, 1, Py_NewRef(off)) < 0) {
        goto done;
    }
    rc = 0;
done:
    Py_DECREF(topic);
    Py_XDECREF(part);
    Py_XDECREF(off);
    return rc;
}

static PyObject *scan_messages(PyObject *self, PyObject *args) {
    PyObject *messages, *where = NULL;
    long long room;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!L|O!", &PyList_Type, &messages, &room, &PyList_Type, &where)) {
        return NULL;
    }
    PyObject *taken = PyList_New(0), *rest = PyList_New(0), *errors = PyList_New(0), *values = PyList_New(0);
    PyObject *offsets = PyDict_New(), *result = NULL, *last_topic = NULL, *entry = NULL;
    long last_part = -1;
    long long used = 0;
    int full = 0;
    Py_ssize_t count = PyList_GET_SIZE(messages);
    /* where != NULL: each taken message's partition and offset, appended to it as two bytes of int64s */
    long long *parts = where ? PyMem_Malloc(sizeof(long long) * (size_t)(count ? count : 1)) : NULL;
    long long *offs = where ? PyMem_Malloc(sizeof(long long) * (size_t)(count ? count : 1)) : NULL;
    if (!taken || !rest || !errors || !values || !offsets || (where && (!parts || !offs))) {
        if (where && (!parts || !offs)) {
            PyErr_NoMemory();
        }
        goto out;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(messages); i++) {
        PyObject *msg = PyList_GET_ITEM(messages, i);
        PyObject *err = call_noargs(msg, s_error);
        if (err == NULL) {
            goto out;
        }
        int bad = err != Py_None;
        Py_DECREF(err);
        if (bad) {
            if (PyList_Append(errors, msg) < 0) {
                goto out;
            }
            continue;
        }
        if (full) {
            if (PyList_Append(rest, msg) < 0) {
                goto out;
            }
            continue;
        }
        PyObject *value = call_noargs(msg, s_value);
        if (value == NULL) {
            goto out;
        }
        long long size = PyBytes_Check(value) ? (long long)PyBytes_GET_SIZE(value) : 0;
        if (room >= 0 && used + size > room && PyList_GET_SIZE(taken) > 0) {
            Py_DECREF(value);
            full = 1;
            if (PyList_Append(rest, msg) < 0) {
                goto out;
            }
            continue;
        }
        used += size;
        int rc = PyList_Append(values, value);
        Py_DECREF(value);
        long long part_of = 0, offset_of = 0;
        if (rc < 0 || PyList_Append(taken, msg) < 0 ||
            note_offset(offsets, msg, &last_topic, &last_part, &entry, &part_of, &offset_of) < 0) {
            goto out;
        }
        if (where) {
            Py_ssize_t n = PyList_GET_SIZE(taken) - 1;
            parts[n] = part_of;
            offs[n] = offset_of;
        }
    }
    if (where) {
        Py_ssize_t n = PyList_GET_SIZE(taken);
        PyObject *p_bytes = PyBytes_FromStringAndSize((const char *)parts, n * (Py_ssize_t)sizeof(long long));
        PyObject *o_bytes = p_bytes ? PyBytes_FromStringAndSize((const char *)offs, n * (Py_ssize_t)sizeof(long long))
                                    : NULL;
        int bad = !o_bytes || PyList_Append(where, p_bytes) < 0 || PyList_Append(where, o_bytes) < 0;
        Py_XDECREF(p_bytes);
        Py_XDECREF(o_bytes);
        if (bad) {
            goto out;
        }
    }
    /* {key: [first, last]} -> {key: (first, last)} */
    PyObject *key, *pair;
    Py_ssize_t pos = 0;
    while (PyDict_Next(offsets, &pos, &key, &pair)) {
        PyObject *tuple = PyList_AsTuple(pair);
        if (tuple == NULL || PyDict_SetItem(offsets, key, tuple) < 0) {
            Py_XDECREF(tuple);
            goto out;
        }
        Py_DECREF(tuple);
    }
    result = Py_BuildValue("(OOOOLO)", taken, rest, errors, values, used, offsets);
out:
    Py_XDECREF(taken);
    Py_XDECREF(rest);
    Py_XDECREF(errors);
    Py_XDECREF(values);
    Py_XDECREF(offsets);
    Py_XDECREF(last_topic);
    PyMem_Free(parts);
    PyMem_Free(offs);
    return result;
}

static PyMethodDef module_methods[] = {
    {"native_strings", native_strings, METH_VARARGS,
     "native_strings(offsets, data, offset, length) -> bytes: an Arrow string column in ClickHouse's Native "
     "String encoding (varint length, bytes)."},
    {"scan_messages", scan_messages, METH_VARARGS,
     "scan_messages(messages, room) -> (taken, rest, errors, values, size, offsets): consumed Kafka messages split "
     "in one C pass (errors, those whose values fit in room bytes, the rest) with the values and per-partition "
     "(first, last) offsets of those taken; scan_messages(messages, room, where) also appends to the list where "
     "the partitions and the offsets of those taken, as two bytes of native int64s."},
    {"consume_chunk", consume_chunk, METH_VARARGS,
     "consume_chunk(consume, destroy, topic_name, queue, n, timeout_ms, make) -> MessageChunk or None: up to n "
     "messages from a librdkafka queue, kept as librdkafka made them (native/_kafkachunk.c)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_flatjson", "Flat JSON objects into column buffers (the collector's hot path).", -1,
    module_methods,
};

PyMODINIT_FUNC PyInit__flatjson(void) {
    for (int c = 0x20; c < 0x80; c++) {
        plain[c] = c != '"' && c != '\\';
    }
    if (PyType_Ready(&ReaderType) < 0 || chunk_types_ready() < 0) {
        return NULL;
    }
    s_error = PyUnicode_InternFromString("error");
    s_value = PyUnicode_InternFromString("value");
    s_topic = PyUnicode_InternFromString("topic");
    s_partition = PyUnicode_InternFromString("partition");
    s_offset = PyUnicode_InternFromString("offset");
    if (!s_error || !s_value || !s_topic || !s_partition || !s_offset) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) {
        return NULL;
    }
    if (PyModule_AddObjectRef(m, "Reader", (PyObject *)&ReaderType) < 0 ||
        PyModule_AddObjectRef(m, "MessageChunk", (PyObject *)&MessageChunkType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
