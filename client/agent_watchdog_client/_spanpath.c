/* The span processor's path in C: what client/agent_watchdog_client/processor.py's
 * WatchdogSpanProcessor.on_start and on_end do, fused into the SDK's multi-processor by
 * processor.install() when this extension is built (it is optional: without a compiler the
 * package installs and the Python path runs; tests run both).
 *
 * Why: on_start and on_end are on every span's path. In Python they cost ~5 % of a bare SDK
 * span's instructions (bench/client_overhead.py: 1.04-1.07 in CPU time); here the same work
 * costs a fraction of that. The Python code stays the reference: every constant (the kinds,
 * the operation names, the name prefixes, the bounds) is read from that module when the path
 * is made, and every uncommon case (attributes the SDK would not let us write directly, a span
 * whose kind needs the conventions' full reading, a span that becomes a call when it ends)
 * calls the Python functions that handle it there: classify_start, _stamp, _classified_at_end.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#ifndef Py_T_PYSSIZET /* before 3.12 */
#define Py_T_PYSSIZET T_PYSSIZET
#define Py_T_BOOL T_BOOL
#define Py_T_OBJECT_EX T_OBJECT_EX
#define Py_READONLY READONLY
#endif

#define KIND_OTHER 0
#define KIND_LLM 1
#define KIND_TOOL 2
#define KIND_AGENT 3

/* The counts of a run the span path writes: the base of tally.RunTally (which adds the rest in
 * Python). Read and written from Python through its members; here, as plain fields. */
typedef struct {
    PyObject_HEAD
    Py_ssize_t agent_spans, tool_spans, tools_ended, model_spans, ended_calls, unsynced_dropped;
    char changed, keep_spans;
    PyObject *span_attributes; /* the attributes stamped on each span of the run */
    PyObject *unsynced;        /* ended call spans waiting for the next sync (a deque) */
} Counts;

static PyTypeObject CountsType;
#define AS_COUNTS(run) ((Counts *)(run))

static PyObject *s_name, *s_attributes, *s_dict, *s_maxlen, *s_immutable, *s_context,
    *s_start_time, *s_agent_started, *s_agent_ended, *s_span_processors, *s_on_start, *s_on_end, *s_get, *s_append,
    *s_kwnames_parent;

typedef struct {
    PyObject_HEAD
    PyObject *chain;             /* the SDK multi-processor: its _span_processors run first */
    PyObject *open;              /* OPEN_SPANS: span id -> (run, start, counted) */
    PyObject *live_runs;         /* LIVE_RUNS */
    PyObject *run_key;           /* RUN_KEY */
    PyObject *current_context;   /* () -> the current context */
    PyObject *classify_start;    /* (name, attributes) -> kind */
    PyObject *stamp;             /* (span, attributes) -> the span's attributes */
    PyObject *classified_at_end; /* (span, attributes) -> None */
    PyObject *llm_operations, *tool_operations, *call_id;
    PyObject *kind_keys;         /* KIND_KEYS as a tuple, gen_ai.operation.name first */
    PyObject *name_prefixes, *output_tool_spans;
    Py_UCS4 initials[8];
    Py_ssize_t n_initials, max_open, max_unsynced, untracked_calls;
} SpanPath;

/* ---- small helpers ------------------------------------------------------------------------ */

/* getattr(obj, name), or NULL with no error set when it has no such attribute. */
static PyObject *
attr_or_null(PyObject *obj, PyObject *name, int *failed)
{
    PyObject *value = PyObject_GetAttr(obj, name);
    if (value == NULL) {
        if (PyErr_ExceptionMatches(PyExc_AttributeError))
            PyErr_Clear();
        else
            *failed = 1;
    }
    return value;
}

/* mapping.get(key): a new reference, None when absent, NULL on error. */
static PyObject *
mapping_get(PyObject *mapping, PyObject *key)
{
    if (PyDict_Check(mapping)) {
        PyObject *value = PyDict_GetItemWithError(mapping, key);
        if (value == NULL) {
            if (PyErr_Occurred())
                return NULL;
            Py_RETURN_NONE;
        }
        return Py_NewRef(value);
    }
    return PyObject_CallMethodOneArg(mapping, s_get, key);
}

/* key in mapping: 1, 0, or -1 on error. */
static int
has_key(PyObject *mapping, PyObject *key)
{
    return PyDict_Check(mapping) ? PyDict_Contains(mapping, key)
                                 : PySequence_Contains(mapping, key);
}

/* name.startswith(prefixes), behind a test of its first character (most names fail it). */
static int
has_prefix(SpanPath *self, PyObject *name, PyObject *prefixes, int check_initial)
{
    if (!PyUnicode_Check(name) || PyUnicode_GET_LENGTH(name) == 0)
        return 0;
    if (check_initial) {
        Py_UCS4 first = PyUnicode_READ_CHAR(name, 0);
        int found = 0;
        for (Py_ssize_t i = 0; i < self->n_initials; i++)
            if (self->initials[i] == first) {
                found = 1;
                break;
            }
        if (!found)
            return 0;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(prefixes);
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t match = PyUnicode_Tailmatch(name, PyTuple_GET_ITEM(prefixes, i), 0,
                                               PY_SSIZE_T_MAX, -1);
        if (match != 0)
            return (int)match; /* 1, or -1 on error */
    }
    return 0;
}

/* span._context[SPAN_ID]: the span context is a tuple (trace id, span id, ...). */
static PyObject *
span_id_of(PyObject *context)
{
    if (PyTuple_Check(context) && PyTuple_GET_SIZE(context) > 1)
        return Py_NewRef(PyTuple_GET_ITEM(context, 1));
    return PySequence_GetItem(context, 1);
}

/* Run processor.<method>(span[, parent_context=...]) for each of the chain's processors. */
static int
run_chain(SpanPath *self, PyObject *method, PyObject *span, PyObject *parent_context)
{
    PyObject *processors = PyObject_GetAttr(self->chain, s_span_processors);
    if (processors == NULL)
        return -1;
    PyObject *sequence = PySequence_Fast(processors, "_span_processors is not a sequence");
    Py_DECREF(processors);
    if (sequence == NULL)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(sequence);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *args[3] = {PySequence_Fast_GET_ITEM(sequence, i), span, parent_context};
        PyObject *result = parent_context == NULL
            ? PyObject_VectorcallMethod(method, args, 2, NULL)
            : PyObject_VectorcallMethod(method, args, 2, s_kwnames_parent);
        if (result == NULL) {
            Py_DECREF(sequence);
            return -1;
        }
        Py_DECREF(result);
    }
    Py_DECREF(sequence);
    return 0;
}

/* The kind classify_start gives (a Python call, for the uncommon spans). */
static long
classify(SpanPath *self, PyObject *name, PyObject *attributes)
{
    PyObject *kind = PyObject_CallFunctionObjArgs(self->classify_start, name, attributes, NULL);
    if (kind == NULL)
        return -1;
    long result = PyLong_AsLong(kind);
    Py_DECREF(kind);
    return result;
}

/* classify_start(span._name, attributes) */
static long
classify_span(SpanPath *self, PyObject *span, PyObject *attributes)
{
    PyObject *name = PyObject_GetAttr(span, s_name);
    if (name == NULL)
        return -1;
    long kind = classify(self, name, attributes);
    Py_DECREF(name);
    return kind;
}

/* span._name.startswith(prefixes): 1, 0, or -1 on error. */
static int
name_has_prefix(SpanPath *self, PyObject *span, PyObject *prefixes, int check_initial)
{
    PyObject *name = PyObject_GetAttr(span, s_name);
    if (name == NULL)
        return -1;
    int result = has_prefix(self, name, prefixes, check_initial);
    Py_DECREF(name);
    return result;
}

/* ---- on_start ----------------------------------------------------------------------------- */

/* The run's stamp on the span and the span's kind (-1 on error). */
static long
stamp_and_classify(SpanPath *self, PyObject *span, PyObject *stamp, int *unasked)
{
    int failed = 0;
    PyObject *plain = NULL;
    PyObject *bounded = attr_or_null(span, s_attributes, &failed);
    if (bounded != NULL) {
        PyObject *inner = attr_or_null(bounded, s_dict, &failed);
        PyObject *room = failed || inner == NULL ? NULL : attr_or_null(bounded, s_maxlen, &failed);
        PyObject *frozen = failed || room == NULL ? NULL
                                                  : attr_or_null(bounded, s_immutable, &failed);
        if (frozen != NULL && PyDict_CheckExact(inner) && PyDict_Check(stamp)) {
            int is_frozen = PyObject_IsTrue(frozen);
            Py_ssize_t limit = PY_SSIZE_T_MAX;
            if (room != Py_None) {
                limit = PyLong_AsSsize_t(room);
                if (limit == -1 && PyErr_Occurred()) {
                    PyErr_Clear();
                    limit = -1; /* not a size: the public path decides */
                }
            }
            if (is_frozen < 0)
                failed = 1;
            else if (!is_frozen && PyDict_GET_SIZE(inner) + PyDict_GET_SIZE(stamp) <= limit)
                plain = Py_NewRef(inner);
        }
        Py_XDECREF(inner);
        Py_XDECREF(room);
        Py_XDECREF(frozen);
        Py_DECREF(bounded);
    }
    if (failed) {
        Py_XDECREF(plain);
        return -1;
    }
    if (plain == NULL) { /* the SDK's public path: _stamp(span, stamp) */
        PyObject *attributes = PyObject_CallFunctionObjArgs(self->stamp, span, stamp, NULL);
        if (attributes == NULL)
            return -1;
        long kind = classify_span(self, span, attributes);
        Py_DECREF(attributes);
        return kind;
    }
    long kind;
    PyObject *operation = PyDict_GetItemWithError(plain, PyTuple_GET_ITEM(self->kind_keys, 0));
    if (operation == NULL && PyErr_Occurred())
        goto error;
    if (PyDict_Update(plain, stamp) < 0)
        goto error;
    if (operation != NULL) {
        operation = PyDict_GetItemWithError(plain, PyTuple_GET_ITEM(self->kind_keys, 0));
        if (operation == NULL) {
            if (PyErr_Occurred())
                goto error;
            kind = classify_span(self, span, plain);
            Py_DECREF(plain);
            return kind;
        }
        Py_INCREF(operation);
        int is_llm = PySet_Contains(self->llm_operations, operation);
        int is_tool = is_llm == 0 ? PySet_Contains(self->tool_operations, operation) : 0;
        Py_DECREF(operation);
        if (is_llm < 0 || is_tool < 0)
            goto error;
        if (is_llm) {
            kind = KIND_LLM;
        }
        else if (is_tool) {
            int asked = PyDict_Contains(plain, self->call_id);
            if (asked < 0)
                goto error;
            *unasked = !asked;
            kind = KIND_TOOL;
        }
        else {
            kind = classify_span(self, span, plain);
        }
        Py_DECREF(plain);
        return kind;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(self->kind_keys);
    for (Py_ssize_t i = 1; i < n; i++) {
        int present = PyDict_Contains(plain, PyTuple_GET_ITEM(self->kind_keys, i));
        if (present < 0)
            goto error;
        if (present) {
            kind = classify_span(self, span, plain);
            Py_DECREF(plain);
            return kind;
        }
    }
    int prefixed = name_has_prefix(self, span, self->name_prefixes, 1);
    if (prefixed < 0)
        goto error;
    kind = prefixed ? classify_span(self, span, plain) : KIND_OTHER;
    Py_DECREF(plain);
    return kind;
error:
    Py_DECREF(plain);
    return -1;
}

/* Track a call (or an agent span) of the run as in flight. */
static int
track(SpanPath *self, PyObject *span, PyObject *run, long kind, int unasked)
{
    int result = -1;
    PyObject *context = NULL, *span_id = NULL, *start = NULL, *counted = NULL, *entry = NULL;
    context = PyObject_GetAttr(span, s_context);
    if (context == NULL)
        return -1;
    span_id = span_id_of(context);
    if (span_id == NULL)
        goto done;
    if (PyDict_GET_SIZE(self->open) >= self->max_open) {
        self->untracked_calls++;
        result = 0;
        goto done;
    }
    if (kind == KIND_AGENT) {
        entry = PyTuple_Pack(3, run, Py_None, Py_False);
        if (entry == NULL || PyDict_SetItem(self->open, span_id, entry) < 0)
            goto done;
        PyObject *args[3] = {run, span_id, span};
        PyObject *none = PyObject_VectorcallMethod(s_agent_started, args, 3, NULL);
        if (none == NULL)
            goto done;
        Py_DECREF(none);
        result = 0;
        goto done;
    }
    start = PyObject_GetAttr(span, s_start_time);
    if (start == NULL)
        goto done;
    int has_start = PyObject_IsTrue(start);
    if (has_start < 0)
        goto done;
    if (!has_start)
        Py_SETREF(start, PyLong_FromLong(0));
    if (start == NULL)
        goto done;
    Counts *counts = AS_COUNTS(run);
    if (kind == KIND_LLM) {
        counts->model_spans++;
        counted = Py_NewRef(Py_False);
    }
    else {
        int output = name_has_prefix(self, span, self->output_tool_spans, 0);
        if (output < 0)
            goto done;
        if (output) {
            counted = Py_NewRef(Py_False);
        }
        else {
            counts->tool_spans++;
            /* a call no model asked for counts when it ends, if no model call started since */
            counted = unasked ? PyLong_FromSsize_t(counts->model_spans) : Py_NewRef(Py_True);
            if (counted == NULL)
                goto done;
        }
    }
    entry = PyTuple_Pack(3, run, start, counted);
    if (entry == NULL || PyDict_SetItem(self->open, span_id, entry) < 0)
        goto done;
    counts->changed = 1;
    result = 0;
done:
    Py_XDECREF(context);
    Py_XDECREF(span_id);
    Py_XDECREF(start);
    Py_XDECREF(counted);
    Py_XDECREF(entry);
    return result;
}

static PyObject *
SpanPath_on_start(SpanPath *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *span = NULL, *parent_context = Py_None;
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    if (nargs < 1 || nargs + nkw > 2) {
        PyErr_SetString(PyExc_TypeError, "on_start(span, parent_context=None)");
        return NULL;
    }
    span = args[0];
    if (nargs == 2)
        parent_context = args[1];
    else if (nkw == 1) {
        if (PyUnicode_Compare(PyTuple_GET_ITEM(kwnames, 0),
                              PyTuple_GET_ITEM(s_kwnames_parent, 0)) != 0) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "on_start() got an unexpected keyword");
            return NULL;
        }
        parent_context = args[1];
    }
    if (run_chain(self, s_on_start, span, parent_context) < 0)
        return NULL;
    /* The run: from the parent context the SDK was given, else the current one. */
    PyObject *run = Py_NewRef(Py_None);
    if (parent_context != Py_None) {
        Py_SETREF(run, mapping_get(parent_context, self->run_key));
        if (run == NULL)
            return NULL;
    }
    if (run == Py_None) {
        PyObject *current = PyObject_CallNoArgs(self->current_context);
        if (current == NULL) {
            Py_DECREF(run);
            return NULL;
        }
        Py_SETREF(run, mapping_get(current, self->run_key));
        Py_DECREF(current);
        if (run == NULL)
            return NULL;
    }
    if (run == Py_None)
        return run;
    if (!PyObject_TypeCheck(run, &CountsType)) { /* not a run's tally: not ours to count */
        Py_DECREF(run);
        Py_RETURN_NONE;
    }
    PyObject *stamp = Py_XNewRef(AS_COUNTS(run)->span_attributes);
    int unasked = 0;
    long kind = stamp == NULL ? KIND_OTHER : stamp_and_classify(self, span, stamp, &unasked);
    Py_XDECREF(stamp);
    if (kind > KIND_OTHER && track(self, span, run, kind, unasked) < 0)
        kind = -1;
    Py_DECREF(run);
    if (kind < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* ---- on_end ------------------------------------------------------------------------------- */

/* A tracked call ended: the counts, and the span kept for the run's next sync. */
static int
ended(SpanPath *self, PyObject *span, PyObject *span_id, PyObject *entry)
{
    PyObject *run = PyTuple_GET_ITEM(entry, 0);
    PyObject *started = PyTuple_GET_ITEM(entry, 1);
    PyObject *counted = PyTuple_GET_ITEM(entry, 2);
    if (started == Py_None) {
        PyObject *args[2] = {run, span_id};
        PyObject *none = PyObject_VectorcallMethod(s_agent_ended, args, 2, NULL);
        if (none == NULL)
            return -1;
        Py_DECREF(none);
        return 0;
    }
    Counts *counts = AS_COUNTS(run);
    if (counted == Py_True) {
        counts->tools_ended++;
    }
    else if (counted != Py_False) {
        /* A tool call no model asked for: counted if no model call started while it ran; else
         * it is a function running the model loop itself (that loop's frame). */
        Py_ssize_t models_then = PyLong_AsSsize_t(counted);
        if (models_then == -1 && PyErr_Occurred())
            return -1;
        if (counts->model_spans == models_then)
            counts->tools_ended++;
        else
            counts->tool_spans--;
    }
    if (counts->keep_spans && counts->unsynced != NULL) {
        Py_ssize_t size = PyObject_Length(counts->unsynced);
        if (size < 0)
            return -1;
        PyObject *none = PyObject_CallMethodOneArg(counts->unsynced, s_append, span);
        if (none == NULL)
            return -1;
        Py_DECREF(none);
        if (size == self->max_unsynced)
            counts->unsynced_dropped++;
    }
    counts->ended_calls++;
    counts->changed = 1;
    return 0;
}

/* A span of a run, not a call when it started, may be one now that it ends. */
static int
maybe_classified_at_end(SpanPath *self, PyObject *span)
{
    int failed = 0;
    PyObject *bounded = attr_or_null(span, s_attributes, &failed);
    if (bounded == NULL)
        return failed ? -1 : 0;
    PyObject *attributes = attr_or_null(bounded, s_dict, &failed);
    if (failed) {
        Py_DECREF(bounded);
        return -1;
    }
    if (attributes == NULL)
        attributes = Py_NewRef(bounded);
    Py_DECREF(bounded);
    int result = -1, call = 0;
    int nonempty = PyObject_IsTrue(attributes);
    if (nonempty < 0)
        goto done;
    if (nonempty) {
        Py_ssize_t n = PyTuple_GET_SIZE(self->kind_keys);
        for (Py_ssize_t i = 0; i < n && !call; i++) {
            call = has_key(attributes, PyTuple_GET_ITEM(self->kind_keys, i));
            if (call < 0)
                goto done;
        }
        if (!call) {
            PyObject *name = PyObject_GetAttr(span, s_name);
            if (name == NULL)
                goto done;
            call = has_prefix(self, name, self->name_prefixes, 1);
            Py_DECREF(name);
            if (call < 0)
                goto done;
        }
    }
    result = 0;
    if (call) {
        PyObject *none = PyObject_CallFunctionObjArgs(self->classified_at_end, span, attributes,
                                                      NULL);
        if (none == NULL)
            result = -1;
        Py_XDECREF(none);
    }
done:
    Py_DECREF(attributes);
    return result;
}

static PyObject *
SpanPath_on_end(SpanPath *self, PyObject *span)
{
    if (run_chain(self, s_on_end, span, NULL) < 0)
        return NULL;
    if (PyDict_GET_SIZE(self->open)) {
        PyObject *context = PyObject_GetAttr(span, s_context);
        if (context == NULL)
            return NULL;
        if (context == Py_None)
            return context;
        PyObject *span_id = span_id_of(context);
        Py_DECREF(context);
        if (span_id == NULL)
            return NULL;
        PyObject *entry = PyDict_GetItemWithError(self->open, span_id);
        if (entry == NULL && PyErr_Occurred()) {
            Py_DECREF(span_id);
            return NULL;
        }
        if (entry != NULL) {
            Py_INCREF(entry);
            int result = PyDict_DelItem(self->open, span_id);
            if (result == 0)
                result = ended(self, span, span_id, entry);
            Py_DECREF(entry);
            Py_DECREF(span_id);
            if (result < 0)
                return NULL;
            Py_RETURN_NONE;
        }
        Py_DECREF(span_id);
    }
    if (PyDict_GET_SIZE(self->live_runs) && maybe_classified_at_end(self, span) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* ---- Counts: the base of tally.RunTally ---------------------------------------------------- */

static int
Counts_traverse(Counts *self, visitproc visit, void *arg)
{
    Py_VISIT(self->span_attributes);
    Py_VISIT(self->unsynced);
    return 0;
}

static int
Counts_clear(Counts *self)
{
    Py_CLEAR(self->span_attributes);
    Py_CLEAR(self->unsynced);
    return 0;
}

static void
Counts_dealloc(Counts *self)
{
    /* (a heap subclass's dealloc, RunTally's, releases its reference to the type) */
    PyObject_GC_UnTrack(self);
    Counts_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

#define COUNT(field, doc) {#field, Py_T_PYSSIZET, offsetof(Counts, field), 0, doc}
static PyMemberDef Counts_members[] = {
    COUNT(agent_spans, "agent spans started"),
    COUNT(tool_spans, "tool calls started (output tools excluded)"),
    COUNT(tools_ended, "tool calls ended (output tools excluded)"),
    COUNT(model_spans, "model calls started"),
    COUNT(ended_calls, "model and tool calls ended"),
    COUNT(unsynced_dropped, "ended call spans dropped from a full unsynced queue"),
    {"changed", Py_T_BOOL, offsetof(Counts, changed), 0,
     "something the sidecar should hear (read by the reporter thread)"},
    {"keep_spans", Py_T_BOOL, offsetof(Counts, keep_spans), 0,
     "ended call spans are kept for the next sync"},
    {"span_attributes", Py_T_OBJECT_EX, offsetof(Counts, span_attributes), 0,
     "the attributes stamped on each span of the run"},
    {"unsynced", Py_T_OBJECT_EX, offsetof(Counts, unsynced), 0,
     "ended call spans waiting for the next sync"},
    {NULL, 0, 0, 0, NULL},
};
#undef COUNT

static PyTypeObject CountsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "agent_watchdog_client._spanpath.Counts",
    .tp_basicsize = sizeof(Counts),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The counts of a run the span path writes (tally.RunTally's base).",
    .tp_new = PyType_GenericNew,
    .tp_traverse = (traverseproc)Counts_traverse,
    .tp_clear = (inquiry)Counts_clear,
    .tp_dealloc = (destructor)Counts_dealloc,
    .tp_members = Counts_members,
};

/* ---- the type ----------------------------------------------------------------------------- */

static PyObject *
module_attr(PyObject *module, const char *name)
{
    return PyObject_GetAttrString(module, name);
}

static int
SpanPath_init(SpanPath *self, PyObject *args, PyObject *kwds)
{
    PyObject *chain, *processor_module;
    static char *keywords[] = {"chain", "processor_module", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO", keywords, &chain, &processor_module))
        return -1;
    PyObject *cls = NULL, *keys = NULL;
#define TAKE(field, name)                                                                     \
    do {                                                                                      \
        Py_XSETREF(self->field, module_attr(processor_module, name));                         \
        if (self->field == NULL)                                                              \
            goto error;                                                                       \
    } while (0)
    Py_XSETREF(self->chain, Py_NewRef(chain));
    TAKE(open, "OPEN_SPANS");
    TAKE(live_runs, "LIVE_RUNS");
    TAKE(run_key, "RUN_KEY");
    TAKE(current_context, "_current_context");
    TAKE(classify_start, "classify_start");
    TAKE(stamp, "_stamp");
    TAKE(llm_operations, "LLM_OPERATIONS");
    TAKE(tool_operations, "TOOL_OPERATIONS");
    TAKE(call_id, "CALL_ID");
    TAKE(name_prefixes, "KIND_NAME_PREFIXES");
    TAKE(output_tool_spans, "OUTPUT_TOOL_SPANS");
#undef TAKE
    cls = module_attr(processor_module, "WatchdogSpanProcessor");
    if (cls == NULL)
        goto error;
    Py_XSETREF(self->classified_at_end, PyObject_GetAttrString(cls, "_classified_at_end"));
    if (self->classified_at_end == NULL)
        goto error;
    /* KIND_KEYS with gen_ai.operation.name first: the key the common calls have */
    PyObject *operation_key = module_attr(processor_module, "OPERATION_KEY");
    if (operation_key == NULL)
        goto error;
    keys = module_attr(processor_module, "KIND_KEYS");
    PyObject *list = keys == NULL ? NULL : PySequence_List(keys);
    if (list == NULL) {
        Py_DECREF(operation_key);
        goto error;
    }
    Py_ssize_t at = PySequence_Index(list, operation_key);
    if (at < 0 || PySequence_DelItem(list, at) < 0 || PyList_Insert(list, 0, operation_key) < 0) {
        Py_DECREF(operation_key);
        Py_DECREF(list);
        goto error;
    }
    Py_DECREF(operation_key);
    Py_XSETREF(self->kind_keys, PyList_AsTuple(list));
    Py_DECREF(list);
    if (self->kind_keys == NULL)
        goto error;
    if (!PyDict_CheckExact(self->open) || !PyDict_CheckExact(self->live_runs)
        || !PyAnySet_Check(self->llm_operations) || !PyAnySet_Check(self->tool_operations)
        || !PyTuple_Check(self->name_prefixes) || !PyTuple_Check(self->output_tool_spans)) {
        PyErr_SetString(PyExc_TypeError, "the processor module's tables are not as expected");
        goto error;
    }
    self->n_initials = 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(self->name_prefixes); i++) {
        PyObject *prefix = PyTuple_GET_ITEM(self->name_prefixes, i);
        if (!PyUnicode_Check(prefix) || PyUnicode_GET_LENGTH(prefix) == 0
            || self->n_initials == (Py_ssize_t)(sizeof self->initials / sizeof(Py_UCS4))) {
            PyErr_SetString(PyExc_ValueError, "KIND_NAME_PREFIXES: up to 8 non-empty strings");
            goto error;
        }
        self->initials[self->n_initials++] = PyUnicode_READ_CHAR(prefix, 0);
    }
    PyObject *bound = module_attr(processor_module, "MAX_OPEN_CALLS");
    if (bound == NULL)
        goto error;
    self->max_open = PyLong_AsSsize_t(bound);
    Py_DECREF(bound);
    bound = module_attr(processor_module, "MAX_UNSYNCED_SPANS");
    if (bound == NULL)
        goto error;
    self->max_unsynced = PyLong_AsSsize_t(bound);
    Py_DECREF(bound);
    if (PyErr_Occurred())
        goto error;
    Py_DECREF(cls);
    Py_XDECREF(keys);
    return 0;
error:
    Py_XDECREF(cls);
    Py_XDECREF(keys);
    return -1;
}

static int
SpanPath_traverse(SpanPath *self, visitproc visit, void *arg)
{
    Py_VISIT(self->chain);
    Py_VISIT(self->open);
    Py_VISIT(self->live_runs);
    Py_VISIT(self->run_key);
    Py_VISIT(self->current_context);
    Py_VISIT(self->classify_start);
    Py_VISIT(self->stamp);
    Py_VISIT(self->classified_at_end);
    Py_VISIT(self->llm_operations);
    Py_VISIT(self->tool_operations);
    Py_VISIT(self->call_id);
    Py_VISIT(self->kind_keys);
    Py_VISIT(self->name_prefixes);
    Py_VISIT(self->output_tool_spans);
    return 0;
}

static int
SpanPath_clear(SpanPath *self)
{
    Py_CLEAR(self->chain);
    Py_CLEAR(self->open);
    Py_CLEAR(self->live_runs);
    Py_CLEAR(self->run_key);
    Py_CLEAR(self->current_context);
    Py_CLEAR(self->classify_start);
    Py_CLEAR(self->stamp);
    Py_CLEAR(self->classified_at_end);
    Py_CLEAR(self->llm_operations);
    Py_CLEAR(self->tool_operations);
    Py_CLEAR(self->call_id);
    Py_CLEAR(self->kind_keys);
    Py_CLEAR(self->name_prefixes);
    Py_CLEAR(self->output_tool_spans);
    return 0;
}

static void
SpanPath_dealloc(SpanPath *self)
{
    PyObject_GC_UnTrack(self);
    SpanPath_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
SpanPath_get_untracked(SpanPath *self, void *closure)
{
    return PyLong_FromSsize_t(self->untracked_calls);
}

static PyMethodDef SpanPath_methods[] = {
    {"on_start", (PyCFunction)(void (*)(void))SpanPath_on_start, METH_FASTCALL | METH_KEYWORDS,
     "WatchdogSpanProcessor.on_start, after the chain's processors."},
    {"on_end", (PyCFunction)SpanPath_on_end, METH_O,
     "WatchdogSpanProcessor.on_end, after the chain's processors."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef SpanPath_members[] = {
    {"_chain", Py_T_OBJECT_EX, offsetof(SpanPath, chain), Py_READONLY,
     "the multi-processor this path is fused into"},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef SpanPath_getset[] = {
    {"untracked_calls", (getter)SpanPath_get_untracked, NULL,
     "calls not tracked because MAX_OPEN_CALLS were open", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject SpanPathType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "agent_watchdog_client._spanpath.SpanPath",
    .tp_basicsize = sizeof(SpanPath),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "SpanPath(chain, processor_module): the processor's span path, fused into chain.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)SpanPath_init,
    .tp_traverse = (traverseproc)SpanPath_traverse,
    .tp_clear = (inquiry)SpanPath_clear,
    .tp_dealloc = (destructor)SpanPath_dealloc,
    .tp_methods = SpanPath_methods,
    .tp_getset = SpanPath_getset,
    .tp_members = SpanPath_members,
};

static struct PyModuleDef spanpath_module = {
    PyModuleDef_HEAD_INIT, "_spanpath", "The span processor's path in C (optional).", -1, NULL,
};

PyMODINIT_FUNC
PyInit__spanpath(void)
{
#define INTERN(var, text)                                                                     \
    do {                                                                                      \
        var = PyUnicode_InternFromString(text);                                               \
        if (var == NULL)                                                                      \
            return NULL;                                                                      \
    } while (0)
    INTERN(s_name, "_name");
    INTERN(s_attributes, "_attributes");
    INTERN(s_dict, "_dict");
    INTERN(s_maxlen, "maxlen");
    INTERN(s_immutable, "_immutable");
    INTERN(s_context, "_context");
    INTERN(s_start_time, "_start_time");
    INTERN(s_agent_started, "agent_started");
    INTERN(s_agent_ended, "agent_ended");
    INTERN(s_span_processors, "_span_processors");
    INTERN(s_on_start, "on_start");
    INTERN(s_on_end, "on_end");
    INTERN(s_get, "get");
    INTERN(s_append, "append");
#undef INTERN
    PyObject *parent = PyUnicode_InternFromString("parent_context");
    if (parent == NULL)
        return NULL;
    s_kwnames_parent = PyTuple_Pack(1, parent);
    Py_DECREF(parent);
    if (s_kwnames_parent == NULL)
        return NULL;
    if (PyType_Ready(&SpanPathType) < 0 || PyType_Ready(&CountsType) < 0)
        return NULL;
    PyObject *module = PyModule_Create(&spanpath_module);
    if (module == NULL)
        return NULL;
    if (PyModule_AddObjectRef(module, "SpanPath", (PyObject *)&SpanPathType) < 0
        || PyModule_AddObjectRef(module, "Counts", (PyObject *)&CountsType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
