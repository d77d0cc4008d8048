/* vLLM adapter helpers (adapter.c), methods of the `_shadows` module. */
#ifndef HKV_ADAPTER_H
#define HKV_ADAPTER_H

#include <Python.h>
#include <stdint.h>

PyObject *hkv_note_split(PyObject *module, PyObject *args);
PyObject *hkv_text_metas(PyObject *module, PyObject *args);
PyObject *hkv_prefix_split(PyObject *module, PyObject *args);
/* order[0:n] stably sorted by positions[order[i]], tmp scratch of n (adapter.c) */
void hkv_sort_by_position(Py_ssize_t *order, Py_ssize_t *tmp, const int64_t *positions,
                          Py_ssize_t n);

#endif
