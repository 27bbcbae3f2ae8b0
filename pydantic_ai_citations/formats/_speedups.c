/*
 * Optional accelerator for `pydantic_ai_citations.formats.openai_markers`: the scan loop behind
 * `MarkerScanner` and `extract_markers`, for markers written with the real delimiters.
 *
 * It does exactly what the pure-Python loop `_scan_real` does (the tests run both on the same inputs and
 * compare every marker and problem): find candidates, look each marker text up in the cache, and build the
 * frozen `Marker` objects. Everything with a decision in it stays in Python and is called back: parsing a
 * marker text seen for the first time (`parse(raw, families, cache)` fills the cache) and building the
 * `unterminated_marker` / `malformed_marker` problems. Without a C compiler the package uses the Python loop.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#define OPENER 0xE200
#define CLOSER 0xE201

static PyObject *str_raw, *str_family, *str_source_ids, *str_locator, *str_start, *str_end;
static PyObject *empty_tuple, *empty_str;

typedef struct {
    PyObject_HEAD
    PyObject *chunks;       /* list[str]: the text from an opener still open (empty if none is open) */
    Py_ssize_t held;        /* offset of chunks[0] in the whole text */
    Py_ssize_t total;       /* length of the text so far */
    PyObject *families;     /* frozenset[str], passed to `parse` */
    PyObject *cache;        /* dict[str, tuple | str]: marker text -> (raw, family, ids, locator) or message */
    PyObject *problems;     /* list[CitationProblem], shared with the Python wrapper */
    PyObject *parse;        /* (raw, families, cache) -> cache entry */
    PyObject *unterminated; /* (raw, start, end) -> CitationProblem */
    PyObject *malformed;    /* (message, raw, start) -> CitationProblem */
    PyObject *closed_error; /* (delta) -> exception instance raised by `feed` after `close` */
    PyTypeObject *marker_type;
    int closed;
} Scanner;

static int
Scanner_traverse(Scanner *self, visitproc visit, void *arg)
{
    Py_VISIT(self->chunks);
    Py_VISIT(self->families);
    Py_VISIT(self->cache);
    Py_VISIT(self->problems);
    Py_VISIT(self->parse);
    Py_VISIT(self->unterminated);
    Py_VISIT(self->malformed);
    Py_VISIT(self->closed_error);
    Py_VISIT(self->marker_type);
    return 0;
}

static int
Scanner_clear(Scanner *self)
{
    Py_CLEAR(self->chunks);
    Py_CLEAR(self->families);
    Py_CLEAR(self->cache);
    Py_CLEAR(self->problems);
    Py_CLEAR(self->parse);
    Py_CLEAR(self->unterminated);
    Py_CLEAR(self->malformed);
    Py_CLEAR(self->closed_error);
    Py_CLEAR(self->marker_type);
    return 0;
}

static void
Scanner_dealloc(Scanner *self)
{
    PyObject_GC_UnTrack(self);
    Scanner_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
Scanner_init(Scanner *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"families", "cache", "problems", "parse", "unterminated", "malformed",
                             "closed_error", "marker_type", NULL};
    PyObject *families, *cache, *problems, *parse, *unterminated, *malformed, *closed_error, *marker_type;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO!O!OOOOO!", kwlist, &families, &PyDict_Type, &cache,
                                     &PyList_Type, &problems, &parse, &unterminated, &malformed, &closed_error,
                                     &PyType_Type, &marker_type)) {
        return -1;
    }
    PyObject *chunks = PyList_New(0);
    if (chunks == NULL) {
        return -1;
    }
    Scanner_clear(self);
    self->chunks = chunks;
    self->held = 0;
    self->total = 0;
    self->closed = 0;
    Py_INCREF(families);
    self->families = families;
    Py_INCREF(cache);
    self->cache = cache;
    Py_INCREF(problems);
    self->problems = problems;
    Py_INCREF(parse);
    self->parse = parse;
    Py_INCREF(unterminated);
    self->unterminated = unterminated;
    Py_INCREF(malformed);
    self->malformed = malformed;
    Py_INCREF(closed_error);
    self->closed_error = closed_error;
    Py_INCREF(marker_type);
    self->marker_type = (PyTypeObject *)marker_type;
    return 0;
}

/* `s[i:end]` opened a marker that never closes: append `unterminated(raw, start, end)` to the problems. */
static int
unterminated_at(Scanner *self, PyObject *s, Py_ssize_t base, Py_ssize_t i, Py_ssize_t end)
{
    int rc = -1;
    PyObject *raw = PyUnicode_Substring(s, i, end);
    PyObject *start = raw == NULL ? NULL : PyLong_FromSsize_t(base + i);
    PyObject *stop = start == NULL ? NULL : PyLong_FromSsize_t(base + end);
    PyObject *problem = stop == NULL ? NULL : PyObject_CallFunctionObjArgs(self->unterminated, raw, start, stop, NULL);
    if (problem != NULL) {
        rc = PyList_Append(self->problems, problem);
    }
    Py_XDECREF(problem);
    Py_XDECREF(stop);
    Py_XDECREF(start);
    Py_XDECREF(raw);
    return rc;
}

static int
set_field(PyObject *marker, PyObject *name, PyObject *value)
{
    /* Bypasses the frozen dataclass's `__setattr__`, as `object.__setattr__` does. */
    return PyObject_GenericSetAttr(marker, name, value);
}

/* The complete marker text `s[i:j]` at offset `base + i`: a `Marker` appended to `result`, or a problem. */
static int
emit(Scanner *self, PyObject *s, Py_ssize_t base, Py_ssize_t i, Py_ssize_t j, PyObject *result)
{
    PyObject *raw = PyUnicode_Substring(s, i, j);
    if (raw == NULL) {
        return -1;
    }
    PyObject *entry = PyDict_GetItemWithError(self->cache, raw); /* borrowed */
    if (entry != NULL) {
        Py_INCREF(entry);
    }
    else if (PyErr_Occurred()) {
        Py_DECREF(raw);
        return -1;
    }
    else {
        entry = PyObject_CallFunctionObjArgs(self->parse, raw, self->families, self->cache, NULL);
        if (entry == NULL) {
            Py_DECREF(raw);
            return -1;
        }
    }
    int rc = -1;
    if (PyUnicode_Check(entry)) { /* a message: `malformed(message, raw, start)` */
        PyObject *start = PyLong_FromSsize_t(base + i);
        PyObject *problem = start == NULL ? NULL
                                          : PyObject_CallFunctionObjArgs(self->malformed, entry, raw, start, NULL);
        Py_XDECREF(start);
        if (problem != NULL) {
            rc = PyList_Append(self->problems, problem);
            Py_DECREF(problem);
        }
        goto done;
    }
    if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 4) {
        PyErr_SetString(PyExc_TypeError, "marker cache entries must be 4-tuples or messages");
        goto done;
    }
    PyObject *marker = self->marker_type->tp_new(self->marker_type, empty_tuple, NULL);
    if (marker == NULL) {
        goto done;
    }
    PyObject *start = PyLong_FromSsize_t(base + i);
    PyObject *end = start == NULL ? NULL : PyLong_FromSsize_t(base + j);
    if (end == NULL || set_field(marker, str_raw, PyTuple_GET_ITEM(entry, 0)) < 0 ||
        set_field(marker, str_family, PyTuple_GET_ITEM(entry, 1)) < 0 ||
        set_field(marker, str_source_ids, PyTuple_GET_ITEM(entry, 2)) < 0 ||
        set_field(marker, str_locator, PyTuple_GET_ITEM(entry, 3)) < 0 || set_field(marker, str_start, start) < 0 ||
        set_field(marker, str_end, end) < 0) {
        Py_XDECREF(start);
        Py_XDECREF(end);
        Py_DECREF(marker);
        goto done;
    }
    Py_DECREF(start);
    Py_DECREF(end);
    rc = PyList_Append(result, marker);
    Py_DECREF(marker);
done:
    Py_DECREF(entry);
    Py_DECREF(raw);
    return rc;
}

/* Scan `s`, the text from offset `base` that ends with the piece just fed: markers into `result`, problems into
 * `self->problems`; an opener still open at the end is kept in `self->chunks` (which must be empty). */
static int
scan(Scanner *self, PyObject *s, Py_ssize_t base, PyObject *result)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    Py_ssize_t i = PyUnicode_FindChar(s, OPENER, 0, n, 1);
    while (i >= 0) {
        Py_ssize_t j = PyUnicode_FindChar(s, CLOSER, i + 1, n, 1);
        if (j == -2) {
            return -1;
        }
        Py_ssize_t k = PyUnicode_FindChar(s, OPENER, i + 1, j >= 0 ? j : n, 1);
        if (k == -2) {
            return -1;
        }
        if (k >= 0) { /* another opener before any closer: this one never closes */
            if (unterminated_at(self, s, base, i, k) < 0) {
                return -1;
            }
            i = k;
            continue;
        }
        if (j < 0) { /* open at the end: keep it for the next piece */
            PyObject *tail = PyUnicode_Substring(s, i, n);
            if (tail == NULL) {
                return -1;
            }
            int rc = PyList_Append(self->chunks, tail);
            Py_DECREF(tail);
            self->held = base + i;
            return rc;
        }
        if (emit(self, s, base, i, j + 1, result) < 0) {
            return -1;
        }
        i = PyUnicode_FindChar(s, OPENER, j + 1, n, 1);
    }
    return i == -2 ? -1 : 0;
}

/* Join and empty `self->chunks`. */
static PyObject *
take_text(Scanner *self)
{
    Py_ssize_t count = PyList_GET_SIZE(self->chunks);
    PyObject *s;
    if (count == 1) {
        s = PyList_GET_ITEM(self->chunks, 0);
        Py_INCREF(s);
    }
    else {
        s = PyUnicode_Join(empty_str, self->chunks);
        if (s == NULL) {
            return NULL;
        }
    }
    if (PyList_SetSlice(self->chunks, 0, count, NULL) < 0) {
        Py_DECREF(s);
        return NULL;
    }
    return s;
}

static PyObject *
Scanner_feed(Scanner *self, PyObject *delta)
{
    if (!PyUnicode_Check(delta)) {
        PyErr_Format(PyExc_TypeError, "MarkerScanner.feed() takes a str, not %.100s", Py_TYPE(delta)->tp_name);
        return NULL;
    }
    if (self->closed) {
        PyObject *exc = PyObject_CallOneArg(self->closed_error, delta);
        if (exc != NULL) {
            PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
            Py_DECREF(exc);
        }
        return NULL;
    }
    Py_ssize_t n = PyUnicode_GET_LENGTH(delta);
    Py_ssize_t base = self->total;
    PyObject *result = PyList_New(0);
    if (result == NULL) {
        return NULL;
    }
    /* A 1-byte string holds no U+E200 or U+E201: nothing opens or closes. */
    int wide = PyUnicode_KIND(delta) != PyUnicode_1BYTE_KIND;
    Py_ssize_t c = wide ? PyUnicode_FindChar(delta, CLOSER, 0, n, 1) : -1;
    if (c == -2) {
        goto error;
    }
    if (c < 0) { /* no marker completes without a closer: keep the text from an opener, if any */
        if (PyList_GET_SIZE(self->chunks) > 0) {
            if (PyList_Append(self->chunks, delta) < 0) {
                goto error;
            }
        }
        else if (wide) {
            Py_ssize_t i = PyUnicode_FindChar(delta, OPENER, 0, n, 1);
            if (i == -2) {
                goto error;
            }
            if (i >= 0) {
                PyObject *tail = PyUnicode_Substring(delta, i, n);
                if (tail == NULL || PyList_Append(self->chunks, tail) < 0) {
                    Py_XDECREF(tail);
                    goto error;
                }
                Py_DECREF(tail);
                self->held = base + i;
            }
        }
        self->total = base + n;
        return result;
    }
    PyObject *s;
    if (PyList_GET_SIZE(self->chunks) > 0) {
        if (PyList_Append(self->chunks, delta) < 0) {
            goto error;
        }
        base = self->held;
        s = take_text(self);
    }
    else {
        s = delta;
        Py_INCREF(s);
    }
    if (s == NULL) {
        goto error;
    }
    self->total += n;
    if (scan(self, s, base, result) < 0) {
        Py_DECREF(s);
        goto error;
    }
    Py_DECREF(s);
    return result;
error:
    Py_DECREF(result);
    return NULL;
}

static PyObject *
Scanner_close(Scanner *self, PyObject *Py_UNUSED(ignored))
{
    if (self->closed) {
        Py_RETURN_NONE;
    }
    self->closed = 1;
    if (PyList_GET_SIZE(self->chunks) == 0) {
        Py_RETURN_NONE;
    }
    /* What is held has no closer after its opener: each opener in it starts an unterminated marker running to
     * the next opener or the end. */
    Py_ssize_t base = self->held;
    PyObject *s = take_text(self);
    if (s == NULL) {
        return NULL;
    }
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    Py_ssize_t i = PyUnicode_FindChar(s, OPENER, 0, n, 1);
    while (i >= 0) {
        Py_ssize_t k = PyUnicode_FindChar(s, OPENER, i + 1, n, 1);
        if (k == -2 || unterminated_at(self, s, base, i, k < 0 ? n : k) < 0) {
            Py_DECREF(s);
            return NULL;
        }
        i = k;
    }
    Py_DECREF(s);
    if (i == -2) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef Scanner_methods[] = {
    {"feed", (PyCFunction)Scanner_feed, METH_O, "Add the next piece of text; return the markers it completed."},
    {"close", (PyCFunction)Scanner_close, METH_NOARGS, "End the text; report markers left open."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ScannerType = {
    PyVarObject_HEAD_INIT(NULL, 0) /* the macro ends with a comma */
    .tp_name = "pydantic_ai_citations.formats._speedups.Scanner",
    .tp_basicsize = sizeof(Scanner),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The marker scan loop of `openai_markers._scan_real`, in C.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Scanner_init,
    .tp_dealloc = (destructor)Scanner_dealloc,
    .tp_traverse = (traverseproc)Scanner_traverse,
    .tp_clear = (inquiry)Scanner_clear,
    .tp_methods = Scanner_methods,
};

static struct PyModuleDef speedups_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "pydantic_ai_citations.formats._speedups",
    .m_doc = "Optional C scan loop for OpenAI private-use citation markers.",
    .m_size = -1,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    if (PyType_Ready(&ScannerType) < 0) {
        return NULL;
    }
    str_raw = PyUnicode_InternFromString("raw");
    str_family = PyUnicode_InternFromString("family");
    str_source_ids = PyUnicode_InternFromString("source_ids");
    str_locator = PyUnicode_InternFromString("locator");
    str_start = PyUnicode_InternFromString("start");
    str_end = PyUnicode_InternFromString("end");
    empty_tuple = PyTuple_New(0);
    empty_str = PyUnicode_FromStringAndSize("", 0);
    if (!str_raw || !str_family || !str_source_ids || !str_locator || !str_start || !str_end || !empty_tuple ||
        !empty_str) {
        return NULL;
    }
    PyObject *module = PyModule_Create(&speedups_module);
    if (module == NULL) {
        return NULL;
    }
    Py_INCREF(&ScannerType);
    if (PyModule_AddObject(module, "Scanner", (PyObject *)&ScannerType) < 0) {
        Py_DECREF(&ScannerType);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
