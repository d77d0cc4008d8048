/* vLLM adapter helpers: one walk over a request's keys in C where Python would take several
 * (hkv/integrations/vllm/compat026.py and request.py; the same results in Python:
 * `native.note_split`, `native.text_metas`, `native.prefix_split`). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <string.h>

#include "adapter.h"

/* append `item` to `list`, stealing the reference: 0, or -1 */
static int append_new(PyObject *list, PyObject *item) {
    if (!item) return -1;
    int r = PyList_Append(list, item);
    Py_DECREF(item);
    return r;
}

/* note_split(keys, start, chunks, pending, metas, held, held_metas=False): one pass over a
 * request's keys.
 * noted: of keys[start:], those in neither dict `chunks` nor dict `pending`, in order: where
 * `metas` is a list (as long as `keys` at least), as `(their keys, their metas[i])`, two lists;
 * else as their indices i; resident: where `held` is true, the keys of all of `keys` in
 * `chunks`, in order (with `metas` a list and `held_metas`: as `(their keys, their metas[i])`
 * too), else None. Neither dict changes. */
PyObject *hkv_note_split(PyObject *module, PyObject *args) {
    (void)module;
    PyObject *keys, *chunks, *pending, *metas;
    Py_ssize_t start;
    int held, held_metas = 0;
    if (!PyArg_ParseTuple(args, "OnO!O!Op|p", &keys, &start, &PyDict_Type, &chunks, &PyDict_Type,
                          &pending, &metas, &held, &held_metas))
        return NULL;
    PyObject *seq = PySequence_Fast(keys, "note_split: keys must be a list or tuple");
    if (!seq) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    int with_metas = metas != Py_None;
    if (with_metas && (!PyList_Check(metas) || PyList_GET_SIZE(metas) < n)) {
        PyErr_SetString(PyExc_ValueError, "note_split: metas must be None or a list of a meta "
                                          "per key");
        Py_DECREF(seq);
        return NULL;
    }
    PyObject *noted = PyList_New(0), *resident = held ? PyList_New(0) : Py_NewRef(Py_None);
    PyObject *noted_metas = with_metas ? PyList_New(0) : NULL;
    int resident_with_metas = with_metas && held && held_metas;
    PyObject *resident_metas = resident_with_metas ? PyList_New(0) : NULL;
    if (!noted || !resident || (with_metas && !noted_metas) ||
        (resident_with_metas && !resident_metas))
        goto fail;
    for (Py_ssize_t i = held ? 0 : (start > 0 ? start : 0); i < n; i++) {
        PyObject *key = items[i];
        int in_chunks = PyDict_Contains(chunks, key);
        if (in_chunks < 0) goto fail;
        if (in_chunks) {
            if (held && PyList_Append(resident, key) < 0) goto fail;
            if (resident_metas && PyList_Append(resident_metas, PyList_GET_ITEM(metas, i)) < 0)
                goto fail;
            continue;
        }
        if (i < start) continue;
        int in_pending = PyDict_Contains(pending, key);
        if (in_pending < 0) goto fail;
        if (in_pending) continue;
        if (with_metas ? PyList_Append(noted, key) < 0 ||
                        PyList_Append(noted_metas, PyList_GET_ITEM(metas, i)) < 0
                  : append_new(noted, PyLong_FromSsize_t(i)) < 0)
            goto fail;
    }
    Py_DECREF(seq);
    if (resident_metas) return Py_BuildValue("((NN)(NN))", noted, noted_metas, resident,
                                             resident_metas);
    if (with_metas) return Py_BuildValue("((NN)N)", noted, noted_metas, resident);
    return Py_BuildValue("(NN)", noted, resident);
fail:
    Py_DECREF(seq);
    Py_XDECREF(noted);
    Py_XDECREF(noted_metas);
    Py_XDECREF(resident);
    Py_XDECREF(resident_metas);
    return NULL;
}

/* whether every end in dict `ends` but the largest is a positive multiple of block_tokens (an
 * exact int within 64 bits): 1, 0, or -1 with an exception; where 1, `*last` is the largest end
 * and `*whole` the largest whole one below it (0 if none) */
static int whole_but_last(PyObject *ends, long long block_tokens, long long *last,
                          long long *whole) {
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    long long low = 0, high = 0; /* the least and largest not whole */
    *last = *whole = 0;
    while (PyDict_Next(ends, &pos, &key, &value)) {
        if (!PyLong_CheckExact(value)) return 0;
        long long at = PyLong_AsLongLong(value);
        if (at == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            return 0;
        }
        if (at <= 0) return 0;
        if (at > *last) *last = at;
        if (at % block_tokens) {
            if (!low || at < low) low = at;
            if (at > high) high = at;
        } else if (at > *whole) {
            *whole = at;
        }
    }
    if (*whole == *last) *whole = 0; /* ... below the largest (only where the largest is not) */
    return !low || (low == high && high == *last);
}

/* text_metas(keys, ends, block_tokens, metas, short=None): None where an end in dict `ends` but
 * the largest is not a whole block (a positive multiple of block_tokens); else each key's shared
 * whole-text-block meta, metas[end // block_tokens - 1] for its end in `ends`, as a new list,
 * None in it where a key has no end there or one past the metas given (the caller works those
 * out); the request's short last block (its end not whole) short(start, tokens) where `short` is
 * callable, start the end before it (the largest whole one, or end - block_tokens if later, 0 at
 * least), one call for every key so ending, else None. */
PyObject *hkv_text_metas(PyObject *module, PyObject *args) {
    (void)module;
    PyObject *keys, *ends, *metas, *short_of = Py_None, *short_meta = NULL;
    Py_ssize_t block_tokens;
    if (!PyArg_ParseTuple(args, "O!O!nO!|O", &PyList_Type, &keys, &PyDict_Type, &ends,
                          &block_tokens, &PyList_Type, &metas, &short_of))
        return NULL;
    if (block_tokens < 1) {
        PyErr_Format(PyExc_ValueError, "text_metas: block_tokens %zd; expected >= 1", block_tokens);
        return NULL;
    }
    long long last, whole;
    if (!whole_but_last(ends, block_tokens, &last, &whole)) Py_RETURN_NONE;
    Py_ssize_t n = PyList_GET_SIZE(keys), known = PyList_GET_SIZE(metas);
    PyObject *out = PyList_New(n);
    if (!out) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *end = PyDict_GetItemWithError(ends, PyList_GET_ITEM(keys, i)), *meta = Py_None;
        if (end) { /* an exact int within 64 bits, positive: `whole_but_last` */
            long long at = PyLong_AsLongLong(end);
            if (at % block_tokens == 0) {
                if (at / block_tokens <= known) meta = PyList_GET_ITEM(metas, at / block_tokens - 1);
            } else if (short_of != Py_None) { /* the largest end: `block_meta`'s start */
                if (!short_meta) {
                    long long start = at - block_tokens > whole ? at - block_tokens : whole;
                    if (start < 0) start = 0;
                    short_meta = PyObject_CallFunction(short_of, "LL", start, at - start);
                    if (!short_meta) {
                        Py_DECREF(out);
                        return NULL;
                    }
                }
                meta = short_meta;
            }
        } else if (PyErr_Occurred()) {
            Py_XDECREF(short_meta);
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, Py_NewRef(meta));
    }
    Py_XDECREF(short_meta);
    return out;
}

/* order[0:n] sorted by positions (stable: ties as given), `tmp` scratch of n: a bottom-up
 * merge sort (a request's keys: `prefix_split` here, the shadows' merged request in module.c) */
void hkv_sort_by_position(Py_ssize_t *order, Py_ssize_t *tmp, const int64_t *positions,
                          Py_ssize_t n) {
    for (Py_ssize_t width = 1; width < n; width *= 2) {
        for (Py_ssize_t lo = 0; lo < n; lo += 2 * width) {
            Py_ssize_t mid = lo + width < n ? lo + width : n;
            Py_ssize_t hi = lo + 2 * width < n ? lo + 2 * width : n, a = lo, b = mid, k = lo;
            while (a < mid && b < hi)
                tmp[k++] = positions[order[b]] < positions[order[a]] ? order[b++] : order[a++];
            while (a < mid) tmp[k++] = order[a++];
            while (b < hi) tmp[k++] = order[b++];
        }
        memcpy(order, tmp, (size_t)n * sizeof *order);
    }
}

/* prefix_split(key_groups, positions, stored_keys): a request's keys at its end, each group's in
 * turn, put in prefix order, by their end in dict `positions` (a stable sort; as given where one
 * has none there) and split: (those in set `stored_keys`, the others), two lists. None where an
 * end is not an exact int within 64 bits (the caller sorts). */
PyObject *hkv_prefix_split(PyObject *module, PyObject *args) {
    (void)module;
    PyObject *groups, *positions, *stored_keys, *out = NULL, *stored = NULL, *rest = NULL;
    if (!PyArg_ParseTuple(args, "OO!O", &groups, &PyDict_Type, &positions, &stored_keys))
        return NULL;
    if (!PyAnySet_Check(stored_keys)) {
        PyErr_SetString(PyExc_TypeError, "prefix_split: stored_keys must be a set");
        return NULL;
    }
    PyObject *outer = PySequence_Fast(groups, "prefix_split: key_groups must be a sequence");
    if (!outer) return NULL;
    Py_ssize_t ng = PySequence_Fast_GET_SIZE(outer), n = 0;
    PyObject **inner = PyMem_Calloc((size_t)ng + 1, sizeof *inner), **keys = NULL;
    Py_ssize_t *order = NULL;
    int64_t *pos = NULL;
    if (!inner) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t g = 0; g < ng; g++) {
        inner[g] = PySequence_Fast(PySequence_Fast_GET_ITEM(outer, g),
                                   "prefix_split: each key group must be a sequence");
        if (!inner[g]) goto done;
        n += PySequence_Fast_GET_SIZE(inner[g]);
    }
    keys = PyMem_Malloc(((size_t)n + 1) * sizeof *keys);
    order = PyMem_Malloc((2 * (size_t)n + 1) * sizeof *order);
    pos = PyMem_Malloc(((size_t)n + 1) * sizeof *pos);
    if (!keys || !order || !pos) {
        PyErr_NoMemory();
        goto done;
    }
    int known = 1, sorted = 1;
    for (Py_ssize_t g = 0, i = 0; g < ng; g++) {
        PyObject **items = PySequence_Fast_ITEMS(inner[g]);
        for (Py_ssize_t j = 0; j < PySequence_Fast_GET_SIZE(inner[g]); j++, i++) {
            keys[i] = items[j];
            order[i] = i;
            if (!known) continue;
            PyObject *end = PyDict_GetItemWithError(positions, items[j]);
            if (!end) {
                if (PyErr_Occurred()) goto done;
                known = 0; /* a key without a position: all as given (`in_prefix_order`) */
                continue;
            }
            int overflow = 0;
            pos[i] = PyLong_CheckExact(end) ? PyLong_AsLongLongAndOverflow(end, &overflow) : 0;
            if (!PyLong_CheckExact(end) || overflow || (pos[i] == -1 && PyErr_Occurred())) {
                PyErr_Clear();
                out = Py_NewRef(Py_None);
                goto done;
            }
            if (i && pos[i] < pos[i - 1]) sorted = 0;
        }
    }
    if (known && !sorted) hkv_sort_by_position(order, order + n, pos, n);
    if (!(stored = PyList_New(0)) || !(rest = PyList_New(0))) goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *key = keys[order[i]];
        int in = PySet_Contains(stored_keys, key);
        if (in < 0 || PyList_Append(in ? stored : rest, key) < 0) goto done;
    }
    out = PyTuple_Pack(2, stored, rest);
done:
    Py_XDECREF(stored);
    Py_XDECREF(rest);
    for (Py_ssize_t g = 0; inner && g < ng; g++) Py_XDECREF(inner[g]);
    PyMem_Free(inner);
    PyMem_Free(keys);
    PyMem_Free(order);
    PyMem_Free(pos);
    Py_DECREF(outer);
    return out;
}
