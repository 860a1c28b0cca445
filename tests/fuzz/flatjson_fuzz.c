/*
 * libFuzzer target for the collector's C reader (native/_flatjson*.c) and the decode path around it.
 *
 * The reader's sources are compiled into this binary, with the sanitizers (-fsanitize=fuzzer,address,undefined), and
 * registered as the module sparktap.native._flatjson before anything imports it: the collector's Python code
 * (the Arrow path, decode.py) then runs on the instrumented reader. Each input goes to tests/fuzz/oracle.py:one(),
 * which splits it into messages at NUL bytes and checks the reader against orjson and the decode path's
 * "stored or dead-lettered, exactly one of them" property, and reads the same messages again through a MessageChunk
 * (fuzz_chunk below: the consumer's messages as librdkafka keeps them); a failed check aborts (a finding, input saved).
 *
 * Environment: SPARKTAP_FUZZ_SITE (the venv's site-packages: the editable sparktap install), SPARKTAP_FUZZ_DIR (this
 * directory, for oracle.py). Build and run: tests/fuzz/run.sh (see docs/fuzzing.md).
 */
#include "../../native/_flatjson.c"
#include "../../native/_flatjson_read.c"
#include "../../native/_flatjson_scan.c"
#include "../../native/_kafkachunk.c"

#include <stdio.h>
#include <stdlib.h>

static PyObject *one = NULL;

/* A stand-in for librdkafka behind MessageChunk (native/_kafkachunk.c): fuzz_chunk(values) hands the values to
 * consume_chunk as librdkafka messages whose payloads are heap blocks of exactly their size (ASan sees a read past
 * one), on partitions 0, 1, 2 in turn with offset = position, of the topic "fuzz". */
typedef struct {
    RdMessage **msgs;
    size_t n, next;
} FakeQueue;

static ssize_t fake_consume(void *queue, int timeout_ms, RdMessage **out, size_t size) {
    FakeQueue *q = queue;
    size_t k = 0;
    (void)timeout_ms;
    while (k < size && q->next < q->n) {
        out[k++] = q->msgs[q->next++];
    }
    return (ssize_t)k;
}

static void fake_destroy(RdMessage *m) {
    free(m->payload);
    free(m);
}

static const char *fake_topic_name(void *rkt) {
    (void)rkt;
    return "fuzz";
}

static PyObject *address(void *p) {
    return PyLong_FromVoidPtr(p);
}

static PyObject *fuzz_chunk(PyObject *self, PyObject *args) {
    PyObject *values, *make;
    if (!PyArg_ParseTuple(args, "O!O", &PyList_Type, &values, &make)) {
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(values);
    FakeQueue q = {calloc((size_t)(n ? n : 1), sizeof(RdMessage *)), (size_t)n, 0};
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = PyList_GET_ITEM(values, i);
        RdMessage *m = calloc(1, sizeof(RdMessage));
        m->rkt = (void *)&q;
        m->partition = (int32_t)(i % 3);
        m->offset = i;
        if (PyBytes_Check(v)) {
            m->len = (size_t)PyBytes_GET_SIZE(v);
            m->payload = malloc(m->len ? m->len : 1);
            memcpy(m->payload, PyBytes_AS_STRING(v), m->len);
        }
        q.msgs[i] = m;
    }
    PyObject *call = Py_BuildValue("(NNNNniO)", address((void *)(uintptr_t)fake_consume),
                                   address((void *)(uintptr_t)fake_destroy), address((void *)(uintptr_t)fake_topic_name),
                                   address(&q), n ? n : 1, 0, make);
    PyObject *chunk = call ? consume_chunk(self, call) : NULL;
    Py_XDECREF(call);
    for (size_t i = q.next; i < q.n; i++) { /* not taken (an error above): freed here */
        fake_destroy(q.msgs[i]);
    }
    free(q.msgs);
    return chunk;
}

static PyMethodDef fuzz_methods[] = {
    {"fuzz_chunk", fuzz_chunk, METH_VARARGS, "fuzz_chunk(values, make) -> MessageChunk of these values"},
    {NULL, NULL, 0, NULL},
};

static void fail(const char *what) {
    fprintf(stderr, "flatjson_fuzz: %s\n", what);
    if (PyErr_Occurred()) {
        PyErr_Print();
    }
    abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    Py_InitializeEx(0);
    const char *site = getenv("SPARKTAP_FUZZ_SITE");
    const char *dir = getenv("SPARKTAP_FUZZ_DIR");
    if (site == NULL || dir == NULL) {
        fail("set SPARKTAP_FUZZ_SITE (the venv's site-packages) and SPARKTAP_FUZZ_DIR (tests/fuzz)");
    }
    PyObject *module = PyInit__flatjson();
    if (module == NULL) {
        fail("cannot create the _flatjson module");
    }
    if (PyModule_AddFunctions(module, fuzz_methods) < 0) {
        fail("cannot add fuzz_chunk");
    }
    PyObject *modules = PyImport_GetModuleDict();
    if (PyDict_SetItemString(modules, "sparktap.native._flatjson", module) < 0) {
        fail("cannot register sparktap.native._flatjson");
    }
    Py_DECREF(module);
    PyObject *globals = PyDict_New();
    PyDict_SetItemString(globals, "__builtins__", PyEval_GetBuiltins());
    PyObject *site_obj = PyUnicode_FromString(site), *dir_obj = PyUnicode_FromString(dir);
    PyDict_SetItemString(globals, "SITE", site_obj);
    PyDict_SetItemString(globals, "DIR", dir_obj);
    Py_XDECREF(site_obj);
    Py_XDECREF(dir_obj);
    PyObject *r = PyRun_String(
        "import site, sys\n"
        "site.addsitedir(SITE)\n"
        "sys.path.insert(0, DIR)\n"
        "import sparktap.collector\n"
        "sys.modules['sparktap.collector']._flatjson = sys.modules['sparktap.native._flatjson']\n"
        "import oracle\n"
        "oracle.setup()\n",
        Py_file_input, globals, globals);
    if (r == NULL) {
        fail("cannot set up the oracle");
    }
    Py_DECREF(r);
    PyObject *oracle = PyImport_ImportModule("oracle");
    if (oracle == NULL) {
        fail("cannot import oracle");
    }
    one = PyObject_GetAttrString(oracle, "one");
    Py_DECREF(oracle);
    Py_DECREF(globals);
    if (one == NULL) {
        fail("oracle.one is missing");
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    PyObject *arg = PyBytes_FromStringAndSize((const char *)data, (Py_ssize_t)size);
    if (arg == NULL) {
        fail("out of memory");
    }
    PyObject *result = PyObject_CallOneArg(one, arg);
    Py_DECREF(arg);
    if (result == NULL) {
        fail("a check failed for this input");
    }
    Py_DECREF(result);
    return 0;
}
