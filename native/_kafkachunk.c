/*
 * sparktap.native._flatjson.MessageChunk: the messages of one consume call, held as librdkafka made them.
 *
 * confluent-kafka's consume() copies every message into a Python Message, with its value copied into a bytes
 * object of its own, and the collector then reads each of them once; those objects were most of what the
 * collector spent a row beyond the reader (issue 27, docs/benchmarks.md). The collector's own consumer
 * (collector/librdkafka.py) calls librdkafka's rd_kafka_consume_batch_queue here instead, and keeps what it
 * returns: a chunk. The reader (_flatjson.c) parses the values where librdkafka put them, and the chunk's scan gives
 * the batch its offsets and positions, both without a Python object per message. A message becomes a Python
 * Message only when one is asked for (a dead letter, an error, a rewind: ``chunk[i]``, made by the consumer's
 * ``make`` callable from the message's address).
 *
 * The messages are destroyed (rd_kafka_message_destroy) by ``release()``, or when the last view of them goes.
 * librdkafka's functions come in as addresses (the consumer loads librdkafka with ctypes): this extension links to
 * nothing but Python.
 */
#include "_kafkachunk.h"

#include <string.h>
#include <sys/types.h>

typedef ssize_t (*ConsumeFn)(void *queue, int timeout_ms, RdMessage **messages, size_t size);
typedef void (*DestroyFn)(RdMessage *message);
typedef const char *(*TopicNameFn)(void *rkt);

/* The messages of one consume call, owned until released. */
typedef struct {
    PyObject_HEAD
    RdMessage **msgs; /* NULL once released */
    Py_ssize_t count;
    DestroyFn destroy;
    TopicNameFn topic_name;
    PyObject *make; /* make(address) -> Message */
} Store;

static void store_release(Store *s) {
    if (s->msgs == NULL) {
        return;
    }
    RdMessage **msgs = s->msgs;
    Py_ssize_t count = s->count;
    s->msgs = NULL;
    s->count = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < count; i++) {
        s->destroy(msgs[i]);
    }
    Py_END_ALLOW_THREADS
    PyMem_RawFree((void *)msgs);
}

static void Store_dealloc(Store *s) {
    store_release(s);
    Py_XDECREF(s->make);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static PyTypeObject StoreType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "sparktap.native._flatjson._MessageStore",
    .tp_basicsize = sizeof(Store),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The messages of one consume call (owned by the chunks that view them).",
    .tp_dealloc = (destructor)Store_dealloc,
};

/* A view of a store's messages: a range of them, or a list of their positions. */
struct MessageChunk {
    PyObject_HEAD
    Store *store;
    Py_ssize_t n;
    Py_ssize_t start; /* idx == NULL: the store's messages start .. start + n */
    Py_ssize_t *idx;  /* else: their positions in the store (owned) */
    int values;       /* its items are the messages' values (bytes or None), not Messages */
};

static Py_ssize_t position(const MessageChunk *c, Py_ssize_t i) {
    return c->idx != NULL ? c->idx[i] : c->start + i;
}

static int live(const MessageChunk *c) {
    if (c->store->msgs == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "this chunk's messages were released (MessageChunk.release())");
        return 0;
    }
    return 1;
}

/* A new view (it takes ``idx``, which may be NULL for a range). */
static PyObject *new_view(Store *store, Py_ssize_t start, Py_ssize_t n, Py_ssize_t *idx, int values) {
    MessageChunk *c = PyObject_New(MessageChunk, &MessageChunkType);
    if (c == NULL) {
        PyMem_Free(idx);
        return NULL;
    }
    Py_INCREF(store);
    c->store = store;
    c->start = start;
    c->n = n;
    c->idx = idx;
    c->values = values;
    return (PyObject *)c;
}

/* The same messages, as a view of their values (``values`` 1) or of the messages (0). */
static PyObject *same_view(MessageChunk *c, int values) {
    Py_ssize_t *idx = NULL;
    if (c->idx != NULL) {
        idx = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(c->n ? c->n : 1));
        if (idx == NULL) {
            return PyErr_NoMemory();
        }
        memcpy(idx, c->idx, sizeof(Py_ssize_t) * (size_t)c->n);
    }
    return new_view(c->store, c->start, c->n, idx, values);
}

static void Chunk_dealloc(MessageChunk *c) {
    Py_XDECREF(c->store);
    PyMem_Free(c->idx);
    PyObject_Free(c);
}

static Py_ssize_t Chunk_length(MessageChunk *c) {
    return c->n;
}

static PyObject *make_message(Store *store, RdMessage *m) {
    PyObject *address = PyLong_FromVoidPtr((void *)m);
    if (address == NULL) {
        return NULL;
    }
    PyObject *msg = PyObject_CallOneArg(store->make, address);
    Py_DECREF(address);
    return msg;
}

static PyObject *Chunk_item(MessageChunk *c, Py_ssize_t i) {
    if (i < 0 || i >= c->n) {
        PyErr_SetString(PyExc_IndexError, "chunk index out of range");
        return NULL;
    }
    if (!live(c)) {
        return NULL;
    }
    RdMessage *m = c->store->msgs[position(c, i)];
    if (!c->values) {
        return make_message(c->store, m);
    }
    if (m->err != 0 || m->payload == NULL) {
        Py_RETURN_NONE;
    }
    return PyBytes_FromStringAndSize((const char *)m->payload, (Py_ssize_t)m->len);
}

int chunk_is_values(PyObject *obj) {
    return Py_IS_TYPE(obj, &MessageChunkType) && ((MessageChunk *)obj)->values;
}

Py_ssize_t chunk_length(PyObject *obj) {
    return ((MessageChunk *)obj)->n;
}

int chunk_values(PyObject *obj, const unsigned char **ptrs, size_t *sizes, Py_ssize_t max_bytes) {
    MessageChunk *c = (MessageChunk *)obj;
    if (!live(c)) {
        return -1;
    }
    RdMessage **msgs = c->store->msgs;
    for (Py_ssize_t i = 0; i < c->n; i++) {
        RdMessage *m = msgs[position(c, i)];
        if (m->err == 0 && m->payload != NULL && m->len <= (size_t)max_bytes) {
            ptrs[i] = (const unsigned char *)m->payload;
            sizes[i] = m->len;
        }
    }
    return 0;
}

/* The (first, last) offsets of the partition being scanned, kept in C until the partition changes. */
typedef struct {
    PyObject *offsets; /* {(topic, partition): (first, last)} */
    void *rkt;         /* the topic of ``topic`` */
    PyObject *topic;   /* its name */
    int32_t partition;
    int64_t first, last;
    int open; /* a partition is being followed */
} Span;

static int span_close(Span *s) {
    if (!s->open) {
        return 0;
    }
    s->open = 0;
    PyObject *key = Py_BuildValue("(Oi)", s->topic, (int)s->partition);
    if (key == NULL) {
        return -1;
    }
    PyObject *seen = PyDict_GetItemWithError(s->offsets, key);
    int64_t first = s->first;
    if (seen != NULL) { /* the partition came before, apart (several partitions interleaved in one chunk) */
        first = PyLong_AsLongLong(PyTuple_GET_ITEM(seen, 0));
    } else if (PyErr_Occurred()) {
        Py_DECREF(key);
        return -1;
    }
    PyObject *pair = Py_BuildValue("(LL)", (long long)first, (long long)s->last);
    int rc = pair == NULL ? -1 : PyDict_SetItem(s->offsets, key, pair);
    Py_XDECREF(pair);
    Py_DECREF(key);
    return rc;
}

static int span_add(Span *s, Store *store, RdMessage *m) {
    if (s->open && m->rkt == s->rkt && m->partition == s->partition) {
        s->last = m->offset;
        return 0;
    }
    if (span_close(s) < 0) {
        return -1;
    }
    if (s->topic == NULL || m->rkt != s->rkt) {
        const char *name = m->rkt != NULL ? store->topic_name(m->rkt) : "";
        PyObject *topic = PyUnicode_DecodeUTF8(name, (Py_ssize_t)strlen(name), "replace");
        if (topic == NULL) {
            return -1;
        }
        Py_XSETREF(s->topic, topic);
        s->rkt = m->rkt;
    }
    s->partition = m->partition;
    s->first = s->last = m->offset;
    s->open = 1;
    return 0;
}

static PyObject *bytes_of(const int64_t *values, Py_ssize_t n) {
    return PyBytes_FromStringAndSize((const char *)values, n * (Py_ssize_t)sizeof(int64_t));
}

/* scan(room, where=None) -> (taken, rest, errors, values, size, offsets): what scan_messages (_flatjson.c) gives for
 * a list of Messages, from the messages as they lie: taken and rest are chunks (views of these messages), values a
 * view of taken's values, errors a list of Messages. */
static PyObject *Chunk_scan(MessageChunk *self, PyObject *args) {
    long long room;
    PyObject *where = NULL;
    if (!PyArg_ParseTuple(args, "L|O!", &room, &PyList_Type, &where)) {
        return NULL;
    }
    if (!live(self)) {
        return NULL;
    }
    Py_ssize_t n = self->n;
    size_t slots = (size_t)(n ? n : 1);
    Py_ssize_t *taken = PyMem_Malloc(sizeof(Py_ssize_t) * slots), *rest = PyMem_Malloc(sizeof(Py_ssize_t) * slots);
    int64_t *parts = where ? PyMem_Malloc(sizeof(int64_t) * slots) : NULL;
    int64_t *offs = where ? PyMem_Malloc(sizeof(int64_t) * slots) : NULL;
    PyObject *errors = PyList_New(0), *result = NULL;
    Span span = {PyDict_New(), NULL, NULL, 0, 0, 0, 0};
    if (!taken || !rest || (where && (!parts || !offs))) {
        PyErr_NoMemory();
        goto out;
    }
    if (errors == NULL || span.offsets == NULL) {
        goto out;
    }
    Store *store = self->store;
    Py_ssize_t nt = 0, nr = 0;
    long long used = 0;
    int full = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t pos = position(self, i);
        RdMessage *m = store->msgs[pos];
        if (m->err != 0) {
            PyObject *msg = make_message(store, m);
            if (msg == NULL || PyList_Append(errors, msg) < 0) {
                Py_XDECREF(msg);
                goto out;
            }
            Py_DECREF(msg);
            continue;
        }
        if (full) {
            rest[nr++] = pos;
            continue;
        }
        long long size = m->payload != NULL ? (long long)m->len : 0;
        if (room >= 0 && used + size > room && nt > 0) {
            full = 1;
            rest[nr++] = pos;
            continue;
        }
        used += size;
        if (where) {
            parts[nt] = m->partition;
            offs[nt] = m->offset;
        }
        taken[nt++] = pos;
        if (span_add(&span, store, m) < 0) {
            goto out;
        }
    }
    if (span_close(&span) < 0) {
        goto out;
    }
    if (where) {
        PyObject *p_bytes = bytes_of(parts, nt);
        PyObject *o_bytes = p_bytes ? bytes_of(offs, nt) : NULL;
        int bad = !o_bytes || PyList_Append(where, p_bytes) < 0 || PyList_Append(where, o_bytes) < 0;
        Py_XDECREF(p_bytes);
        Py_XDECREF(o_bytes);
        if (bad) {
            goto out;
        }
    }
    PyObject *t_view, *r_view, *v_view;
    if (self->idx == NULL && PyList_GET_SIZE(errors) == 0) { /* no gaps: ranges */
        t_view = new_view(store, self->start, nt, NULL, 0);
        r_view = new_view(store, self->start + nt, nr, NULL, 0);
        v_view = new_view(store, self->start, nt, NULL, 1);
    } else {
        Py_ssize_t *t_copy = PyMem_Malloc(sizeof(Py_ssize_t) * slots);
        if (t_copy == NULL) {
            PyErr_NoMemory();
            goto out;
        }
        memcpy(t_copy, taken, sizeof(Py_ssize_t) * (size_t)nt);
        t_view = new_view(store, 0, nt, taken, 0);
        r_view = new_view(store, 0, nr, rest, 0);
        v_view = new_view(store, 0, nt, t_copy, 1);
        taken = rest = NULL; /* the views own them now */
    }
    if (t_view != NULL && r_view != NULL && v_view != NULL) {
        result = Py_BuildValue("(OOOOLO)", t_view, r_view, errors, v_view, used, span.offsets);
    }
    Py_XDECREF(t_view);
    Py_XDECREF(r_view);
    Py_XDECREF(v_view);
out:
    PyMem_Free(taken);
    PyMem_Free(rest);
    PyMem_Free(parts);
    PyMem_Free(offs);
    Py_XDECREF(errors);
    Py_XDECREF(span.offsets);
    Py_XDECREF(span.topic);
    return result;
}

static PyObject *Chunk_values(MessageChunk *self, PyObject *noargs) {
    (void)noargs;
    return same_view(self, 1);
}

static PyObject *Chunk_messages(MessageChunk *self, PyObject *noargs) {
    (void)noargs;
    return same_view(self, 0);
}

static PyObject *Chunk_release(MessageChunk *self, PyObject *noargs) {
    (void)noargs;
    store_release(self->store);
    Py_RETURN_NONE;
}

static PyObject *Chunk_released(MessageChunk *self, void *closure) {
    (void)closure;
    return PyBool_FromLong(self->store->msgs == NULL);
}

static PyMethodDef Chunk_methods[] = {
    {"scan", (PyCFunction)Chunk_scan, METH_VARARGS,
     "scan(room, where=None) -> (taken, rest, errors, values, size, offsets): scan_messages for the messages as "
     "they lie (taken and rest are chunks, values a view of taken's values, errors a list of Messages)."},
    {"values", (PyCFunction)Chunk_values, METH_NOARGS, "values() -> the same messages as a sequence of their values."},
    {"messages", (PyCFunction)Chunk_messages, METH_NOARGS, "messages() -> the same messages as a sequence of Messages."},
    {"release", (PyCFunction)Chunk_release, METH_NOARGS,
     "release(): destroy the messages now, for this chunk and every view of them (using one afterwards raises)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Chunk_getset[] = {
    {"released", (getter)Chunk_released, NULL, "whether the messages were released", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods Chunk_as_sequence = {
    .sq_length = (lenfunc)Chunk_length,
    .sq_item = (ssizeargfunc)Chunk_item,
};

PyTypeObject MessageChunkType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "sparktap.native._flatjson.MessageChunk",
    .tp_basicsize = sizeof(MessageChunk),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Consumed Kafka messages as librdkafka made them (consume_chunk): a sequence of Messages made on "
              "demand, or of their values (values()).",
    .tp_dealloc = (destructor)Chunk_dealloc,
    .tp_as_sequence = &Chunk_as_sequence,
    .tp_methods = Chunk_methods,
    .tp_getset = Chunk_getset,
};

static void *address_of(PyObject *value, const char *what) {
    void *p = PyLong_AsVoidPtr(value);
    if (p == NULL && !PyErr_Occurred()) {
        PyErr_Format(PyExc_ValueError, "consume_chunk: %s is NULL", what);
    }
    return p;
}

/* consume_chunk(consume, destroy, topic_name, queue, n, timeout_ms, make) -> MessageChunk or None
 *
 * consume, destroy, topic_name: the addresses of librdkafka's rd_kafka_consume_batch_queue,
 * rd_kafka_message_destroy and rd_kafka_topic_name; queue: the consumer queue's; make(address) -> Message.
 * Takes up to n messages already queued; when none is and timeout_ms is not 0, waits up to timeout_ms for one and
 * then takes what is queued behind it (never more than librdkafka has fetched when the wait ends: collector/kafka.py
 * consume_queued says why). The GIL is released meanwhile (librdkafka serves the group's callbacks in the call:
 * they take it back). None: librdkafka failed the call (rd_kafka_last_error() says why). */
PyObject *consume_chunk(PyObject *self, PyObject *args) {
    PyObject *consume_o, *destroy_o, *topic_o, *queue_o, *make;
    Py_ssize_t n;
    int timeout_ms;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOOniO", &consume_o, &destroy_o, &topic_o, &queue_o, &n, &timeout_ms, &make)) {
        return NULL;
    }
    ConsumeFn consume = (ConsumeFn)address_of(consume_o, "consume");
    DestroyFn destroy = consume ? (DestroyFn)address_of(destroy_o, "destroy") : NULL;
    TopicNameFn topic_name = destroy ? (TopicNameFn)address_of(topic_o, "topic_name") : NULL;
    void *queue = topic_name ? address_of(queue_o, "queue") : NULL;
    if (queue == NULL) {
        return NULL;
    }
    if (n < 1 || n > 1000000) {
        PyErr_SetString(PyExc_ValueError, "consume_chunk: n must be between 1 and 1,000,000");
        return NULL;
    }
    if (!PyCallable_Check(make)) {
        PyErr_SetString(PyExc_TypeError, "consume_chunk: make must be callable");
        return NULL;
    }
    RdMessage **msgs = PyMem_RawMalloc(sizeof(RdMessage *) * (size_t)n);
    if (msgs == NULL) {
        return PyErr_NoMemory();
    }
    ssize_t got;
    Py_BEGIN_ALLOW_THREADS
    got = consume(queue, 0, msgs, (size_t)n);
    if (got == 0 && timeout_ms != 0) {
        got = consume(queue, timeout_ms, msgs, 1);
        if (got == 1 && n > 1) {
            ssize_t more = consume(queue, 0, msgs + 1, (size_t)(n - 1));
            if (more > 0) {
                got += more;
            }
        }
    }
    Py_END_ALLOW_THREADS
    if (got < 0) {
        PyMem_RawFree((void *)msgs);
        Py_RETURN_NONE;
    }
    Store *store = PyObject_New(Store, &StoreType);
    if (store == NULL) {
        for (ssize_t i = 0; i < got; i++) {
            destroy(msgs[i]);
        }
        PyMem_RawFree((void *)msgs);
        return NULL;
    }
    store->msgs = msgs;
    store->count = (Py_ssize_t)got;
    store->destroy = destroy;
    store->topic_name = topic_name;
    Py_INCREF(make);
    store->make = make;
    PyObject *chunk = new_view(store, 0, (Py_ssize_t)got, NULL, 0);
    Py_DECREF(store);
    return chunk;
}

int chunk_types_ready(void) {
    if (PyType_Ready(&StoreType) < 0 || PyType_Ready(&MessageChunkType) < 0) {
        return -1;
    }
    return 0;
}
