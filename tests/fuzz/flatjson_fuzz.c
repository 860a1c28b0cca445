/*
 * libFuzzer target for the collector's C reader (collector/_flatjson.c) and the decode path around it.
 *
 * The reader's source is compiled into this binary, with the sanitizers (-fsanitize=fuzzer,address,undefined), and
 * registered as the module sparktap.collector._flatjson before anything imports it: the collector's Python code
 * (the Arrow path, decode.py) then runs on the instrumented reader. Each input goes to tests/fuzz/oracle.py:one(),
 * which splits it into messages at NUL bytes and checks the reader against orjson and the decode path's
 * "stored or dead-lettered, exactly one of them" property; a failed check aborts (a finding, input saved).
 *
 * Environment: SPARKTAP_FUZZ_SITE (the venv's site-packages: the editable sparktap install), SPARKTAP_FUZZ_DIR (this
 * directory, for oracle.py). Build and run: tests/fuzz/run.sh (see docs/fuzzing.md).
 */
#include "../../collector/_flatjson.c"
#include "../../collector/_kafkachunk.c"

#include <stdio.h>
#include <stdlib.h>

static PyObject *one = NULL;

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
    PyObject *modules = PyImport_GetModuleDict();
    if (PyDict_SetItemString(modules, "sparktap.collector._flatjson", module) < 0) {
        fail("cannot register sparktap.collector._flatjson");
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
        "sys.modules['sparktap.collector']._flatjson = sys.modules['sparktap.collector._flatjson']\n"
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
