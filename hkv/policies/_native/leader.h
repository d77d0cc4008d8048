/* The Python side of hkv.policies._shadows shared between module.c and leader.c. */
#ifndef HKV_LEADER_H
#define HKV_LEADER_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "shadow.h"

/* `native.key_bits` of one key: 0, or -1 with an exception set (`*bits` untouched) */
int hkv_key_bits(PyObject *key, uint64_t *bits);
/* expert `i` of a `Shadows` object (borrowed: it lives as long as the object); NULL with an
 * exception set where `shadows` is not one or has no expert `i` */
hkv_expert *hkv_shadows_expert(PyObject *shadows, Py_ssize_t i);
/* the blocks of `keys` with their `metas` (lists of one length) as `shadows` (a `Shadows`)
 * reads a request's: each key's id, its meta's position and tokens and, `value` not None,
 * cost_aware's worth of it through the shape memo `memo` (`ShadowSet._worths`), into `out`:
 * 0, or -1 with an exception set */
int hkv_shadows_read(PyObject *shadows, PyObject *keys, PyObject *metas, PyObject *value,
                     PyObject *memo, hkv_block *out);
/* `(keys, metas)`, two lists, stolen (NULL where either is: both released, NULL) */
PyObject *hkv_columns_pack(PyObject *keys, PyObject *metas);
/* `key` and `meta` appended to the two lists: 0, or -1 with an exception */
int hkv_columns_append(PyObject *keys, PyObject *metas, PyObject *key, PyObject *meta);
/* add the `Leader` type to the module: 0, or -1 with an exception set */
int hkv_leader_add(PyObject *module);
/* the learned expert's whole state as a dict (predictive.c: `PredictivePolicy.restore_native`
 * reads it); None where `e` is not one; NULL with an exception set on error */
PyObject *hkv_predictive_state(hkv_expert *e);

#endif
