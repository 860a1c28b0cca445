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
#include "_flatjson.h"

/* Room for ``size`` bytes in a new bytes object (with the GIL): 0, or -1 with an exception set. */
int buf_start_in_bytes(Buf *b, size_t size) {
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
PyObject *buf_take_bytes(Buf *b) {
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
void buf_release(Buf *b) {
    if (!b->in_bytes) {
        free(b->data);
    }
    b->data = NULL;
    b->in_bytes = 0;
    Py_CLEAR(b->bytes);
}

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
    parse_init();
    if (PyType_Ready(&ReaderType) < 0 || chunk_types_ready() < 0 || scan_init() < 0) {
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
