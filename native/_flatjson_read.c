/*
 * The C reader's read() (native/_flatjson.h): a sequence of messages into column buffers. One flat JSON message is
 * parsed into a row, taken only when it meets every rule native/_flatjson.c lists, and the row committed to the
 * columns; the parse runs without the GIL. The per-message code is in one file with the loop that calls it, all
 * static, so the compiler inlines it there (with the parse and buf_reserve in another file, a read took 8-11 %
 * longer). The fuzz target (tests/fuzz/flatjson_fuzz.c) and its coverage gate read this file.
 */
#include "_flatjson.h"

/* Grows the buffer (C heap, no GIL needed) to hold ``extra`` more bytes: 0, or -1 when out of memory. */
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

void parse_init(void) {
    for (int c = 0x20; c < 0x80; c++) {
        plain[c] = c != '"' && c != '\\';
    }
}

PyObject *Reader_read(Reader *self, PyObject *values) {
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
