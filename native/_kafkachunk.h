/*
 * Consumed Kafka messages held as librdkafka made them (native/_kafkachunk.c), shared with the reader
 * (native/_flatjson.c), which parses their values where they lie.
 */
#ifndef SPARKTAP_KAFKACHUNK_H
#define SPARKTAP_KAFKACHUNK_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>

/* librdkafka's public rd_kafka_message_t (rdkafka.h): its layout is part of librdkafka's ABI */
typedef struct {
    int err;
    void *rkt;
    int32_t partition;
    void *payload;
    size_t len;
    void *key;
    size_t key_len;
    int64_t offset;
    void *_private;
} RdMessage;

typedef struct MessageChunk MessageChunk;
extern PyTypeObject MessageChunkType;

/* Whether ``obj`` is a chunk's values view (``MessageChunk.values()``). */
int chunk_is_values(PyObject *obj);

/* The number of messages in a chunk's view. */
Py_ssize_t chunk_length(PyObject *obj);

/* The view's values where they lie: ptrs[i] and sizes[i] for each message (NULL for a message without a value or
 * of more than max_bytes); -1 with an exception set when the chunk was released. Valid while the chunk is. */
int chunk_values(PyObject *obj, const unsigned char **ptrs, size_t *sizes, Py_ssize_t max_bytes);

/* consume_chunk(...): see _kafkachunk.c */
PyObject *consume_chunk(PyObject *self, PyObject *args);

/* PyType_Ready for the chunk's types; 0 or -1 */
int chunk_types_ready(void);

#endif
