/*
 * The collector consumer's helpers of the C extension (native/_flatjson.h): scan_messages, one C pass over a poll's
 * messages, and native_strings, the Native String encoding of an Arrow string column.
 */
#include "_flatjson.h"

/* native_strings(offsets, data, offset, length) -> bytes: an Arrow string column (int32 offsets, UTF-8 data; the
 * slice [offset, offset + length)) in ClickHouse's Native encoding of String: per value, its byte length as an
 * unsigned LEB128 varint, then its bytes. The server insert path sends these bytes as they are
 * (storage/native.py). */
PyObject *native_strings(PyObject *self, PyObject *args) {
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

PyObject *scan_messages(PyObject *self, PyObject *args) {
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

int scan_init(void) {
    s_error = PyUnicode_InternFromString("error");
    s_value = PyUnicode_InternFromString("value");
    s_topic = PyUnicode_InternFromString("topic");
    s_partition = PyUnicode_InternFromString("partition");
    s_offset = PyUnicode_InternFromString("offset");
    return s_error && s_value && s_topic && s_partition && s_offset ? 0 : -1;
}
