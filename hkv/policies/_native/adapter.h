/* vLLM adapter helpers (adapter.c), methods of the `_shadows` module. */
#ifndef HKV_ADAPTER_H
#define HKV_ADAPTER_H

#include <Python.h>

PyObject *hkv_note_split(PyObject *module, PyObject *args);
PyObject *hkv_text_metas(PyObject *module, PyObject *args);
PyObject *hkv_prefix_split(PyObject *module, PyObject *args);

#endif
