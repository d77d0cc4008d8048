/* hkv.policies._shadows: `Shadows`, several experts' shadow tiers replayed in C.
 *
 *     shadows = Shadows(("lru", "lip"), 1024)
 *     hits = shadows.replay(keys, positions, tokens, worths)  # one request: hits per expert
 *
 * `keys` are 64-bit key ids (ints), `positions` and `tokens` the blocks' metas, `worths` a list
 * of floats (cost_aware's value of each block) or None, and an optional fifth list, each
 * block's modality (0 text, 1 vision, 2 audio; None or left out: all text), which
 * `predictive` reads. See hkv/policies/native.py. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <math.h>
#include <string.h>

#include "shadow.h"
#include "leader.h"
#include "worker.h"
#include "adapter.h"

#define HELD_OBJS 8
#define WORTHS_KEPT 65536

/* cost_aware's worth of a meta's shape (its tokens, position, modality and tier: the worth is a
 * function of them), by the shape packed into 64 bits (`shape_bits`), with the fields kept */
typedef struct {
    int64_t tokens, position;
    int32_t modality, tier; /* slots of `held` */
    double worth;
} worth_entry;

typedef struct {
    PyObject_HEAD
    hkv_tier *tiers;
    Py_ssize_t n;
    hkv_block *blocks;
    Py_ssize_t blocks_cap;
    hkv_request request; /* the request being replayed, worked out once for every tier */
    /* `replay_request`'s reads of the metas: the modality and tier objects met (references
     * held, so an address names one object), each modality's index, and worths by address */
    PyObject *held[HELD_OBJS];
    int32_t modality_of[HELD_OBJS]; /* -1: not looked up yet */
    int n_held;
    hkv_map worth_at; /* a meta's packed shape -> index into worths */
    worth_entry *worths;
    int64_t n_worths;
    /* a deferred replay (`replay_request(..., deferred=True)`): run by `worker`, its hits per
     * tier in `job_hits` (-1: out of memory), read at the next deferred call */
    hkv_worker *worker;
    int64_t *job_hits;
    Py_ssize_t job_refs; /* its blocks; 0: no result waiting */
    /* a request whose hits are read already, stored by `worker` (`store_job`) where it runs
     * beside the caller: each tier's hits in `known`; `store_failed`: its store ran out of
     * memory, raised at the next replay */
    int64_t *known;
    int store_failed;
    /* the registry of ids (`replay_request`'s `register`; `ShadowSet` reads it at a switch): each
     * id's key and last meta, held in `reg_objs[2 slot]` and `[2 slot + 1]`, the id in
     * `reg_ids[slot]`, the slot in `reg_at`; a block whose meta object is the one registered is
     * not registered again */
    hkv_map reg_at;
    PyObject **reg_objs;
    uint64_t *reg_ids;
    int64_t reg_len, reg_cap;
    /* `replay_batch`'s requests, filled in `blocks`: where each ends, and how many */
    Py_ssize_t *batch_ends, batch_len;
} Shadows;
static void registry_clear(Shadows *self);

/* until the deferred replay in flight, if any, is done: every method reads the tiers after it */
static void shadows_wait(Shadows *self) {
    if (self->worker) hkv_worker_wait(self->worker);
}

static PyTypeObject ShadowsType;

static hkv_expert *make_expert(const char *label, int64_t capacity) {
    if (!strcmp(label, "lru")) return hkv_lru_new(capacity);
    if (!strcmp(label, "lip")) return hkv_lip_new(capacity);
    if (!strcmp(label, "lru+st2")) return hkv_st2_new(capacity);
    if (!strcmp(label, "arc")) return hkv_arc_new(capacity);
    if (!strcmp(label, "s3fifo")) return hkv_s3fifo_new(capacity);
    if (!strcmp(label, "depth_lfu")) return hkv_prefix_new(capacity, 1, 0, 0, 32.0);
    if (!strcmp(label, "depth_lfu_static")) return hkv_prefix_new(capacity, 0, 0, 0, 32.0);
    if (!strcmp(label, "cost_aware")) return hkv_prefix_new(capacity, 1, 1, 1, 32.0);
    if (!strcmp(label, "predictive")) return hkv_predictive_new(capacity);
    return NULL;
}

static void Shadows_dealloc(Shadows *self) {
    hkv_worker_free(self->worker); /* the job in flight, if any, ends first */
    PyMem_Free(self->job_hits);
    PyMem_Free(self->known);
    PyMem_Free(self->batch_ends);
    for (Py_ssize_t i = 0; i < self->n; i++) hkv_tier_free(&self->tiers[i]);
    PyMem_Free(self->tiers);
    PyMem_Free(self->blocks);
    hkv_request_free(&self->request);
    for (int j = 0; j < self->n_held; j++) Py_DECREF(self->held[j]);
    if (self->worths) hkv_map_free(&self->worth_at);
    registry_clear(self);
    PyMem_Free(self->worths);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Shadows_init(Shadows *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"labels", "capacity", NULL};
    PyObject *labels;
    long long capacity;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OL", kwlist, &labels, &capacity)) return -1;
    if (capacity < 1) {
        PyErr_Format(PyExc_ValueError, "Shadows: capacity %lld; expected >= 1", capacity);
        return -1;
    }
    PyObject *seq = PySequence_Fast(labels, "Shadows: labels must be a sequence of str");
    if (!seq) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    self->tiers = PyMem_Calloc((size_t)(n ? n : 1), sizeof(hkv_tier));
    if (!self->tiers) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *label = PyUnicode_AsUTF8(PySequence_Fast_GET_ITEM(seq, i));
        if (!label) {
            Py_DECREF(seq);
            return -1;
        }
        hkv_expert *expert = make_expert(label, capacity);
        if (!expert) {
            PyErr_Format(PyExc_ValueError, "Shadows: no native expert %s", label);
            Py_DECREF(seq);
            return -1;
        }
        if (hkv_tier_init(&self->tiers[i], expert) < 0) {
            expert->ops->destroy(expert);
            Py_DECREF(seq);
            PyErr_NoMemory();
            return -1;
        }
        self->n = i + 1;
    }
    Py_DECREF(seq);
    return 0;
}

/* a block's modality index, which `predictive` files buckets by: 0, or -1 with an exception */
static int check_modality(int32_t modality) {
    if (modality >= 0 && modality <= 2) return 0;
    PyErr_Format(PyExc_ValueError, "Shadows: modality %d; expected 0, 1 or 2", (int)modality);
    return -1;
}

/* room for a request of n blocks in self->blocks: 0, or -1 with an exception */
static int grow_blocks(Shadows *self, Py_ssize_t n) {
    if (n <= self->blocks_cap) return 0;
    hkv_block *blocks = PyMem_Realloc(self->blocks, (size_t)n * sizeof *blocks);
    if (!blocks) {
        PyErr_NoMemory();
        return -1;
    }
    self->blocks = blocks;
    self->blocks_cap = n;
    return 0;
}

static int fill(Shadows *self, PyObject *keys, PyObject *positions, PyObject *tokens,
                PyObject *worths, PyObject *modalities, Py_ssize_t n) {
    if (grow_blocks(self, n) < 0) return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        hkv_block *b = &self->blocks[i];
        b->key = PyLong_AsUnsignedLongLongMask(PyList_GET_ITEM(keys, i));
        b->position = PyLong_AsLongLong(PyList_GET_ITEM(positions, i));
        b->tokens = PyLong_AsLongLong(PyList_GET_ITEM(tokens, i));
        b->worth = worths == Py_None ? 0.0 : PyFloat_AsDouble(PyList_GET_ITEM(worths, i));
        b->modality =
            modalities == Py_None ? 0 : (int32_t)PyLong_AsLong(PyList_GET_ITEM(modalities, i));
        if (PyErr_Occurred() || check_modality(b->modality) < 0) return -1;
    }
    return 0;
}

/* the store of the request whose hits `replay_filled` read, each tier's in self->known (on the
 * worker thread where it runs beside the caller: no Python object touched) */
static void store_job(void *arg) {
    Shadows *self = arg;
    for (Py_ssize_t i = 0; i < self->n; i++)
        if (hkv_tier_store(&self->tiers[i], &self->request, self->known[i]) < 0)
            self->store_failed = 1;
}

/* a store `store_job` left unfinished for want of memory: raised once (-1), else 0 */
static int stored(Shadows *self) {
    shadows_wait(self);
    if (!self->store_failed) return 0;
    self->store_failed = 0;
    PyErr_NoMemory();
    return -1;
}

/* Each expert's hits for the blocks in self->blocks[0:n] (the request), stored in every tier:
 * where the worker runs beside the caller, the hits read here and the store handed to it
 * (every method that reads the tiers waits for it, `shadows_wait`), else each tier's hits and
 * store here, one tier after another. */
static PyObject *replay_filled(Shadows *self, Py_ssize_t n) {
    if (hkv_request_set(&self->request, self->blocks, n) < 0) return PyErr_NoMemory();
    if (!self->worker && !(self->worker = hkv_worker_new())) return PyErr_NoMemory();
    PyObject *hits = PyList_New(self->n);
    if (hits && !hkv_worker_parallel(self->worker)) { /* each tier's hits and store together */
        for (Py_ssize_t i = 0; i < self->n; i++) {
            int64_t h = hkv_tier_replay(&self->tiers[i], &self->request);
            PyObject *o = h < 0 ? PyErr_NoMemory() : PyLong_FromLongLong(h);
            if (!o) {
                Py_DECREF(hits);
                return NULL;
            }
            PyList_SET_ITEM(hits, i, o);
        }
        return hits;
    }
    if (hits && !self->known &&
        !(self->known = PyMem_Calloc((size_t)self->n + 1, sizeof(int64_t)))) {
        Py_DECREF(hits);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; hits && i < self->n; i++) {
        self->known[i] = hkv_tier_hits(&self->tiers[i], &self->request);
        PyObject *h = PyLong_FromLongLong(self->known[i]);
        if (!h) Py_CLEAR(hits);
        else PyList_SET_ITEM(hits, i, h);
    }
    if (!hits) return NULL; /* nothing stored: the tiers as they were */
    hkv_worker_submit(self->worker, store_job, self);
    return hits;
}

/* The fields the shadows read of a meta, and where `hkv.blocks.BlockMeta` (`meta_type`, set
 * once at import by native.py) keeps each in its instances: a meta of exactly that type is read
 * from its slots, any other object through getattr (the same values: a slot's getattr reads
 * that slot). */
enum { F_POSITION, F_TOKENS, F_MODALITY, F_TIER, N_FIELDS };
static PyObject *NAMES[N_FIELDS];
static PyTypeObject *META_TYPE;
static Py_ssize_t META_OFFSETS[N_FIELDS];

/* a meta's field (a new reference), or NULL with an exception */
static inline PyObject *meta_attr(PyObject *meta, int field) {
    if (Py_TYPE(meta) == META_TYPE) {
        PyObject *v = *(PyObject **)((char *)meta + META_OFFSETS[field]);
        if (v) return Py_NewRef(v);
    }
    return PyObject_GetAttr(meta, NAMES[field]); /* unset slot: getattr raises */
}

/* meta_type(cls): read the fields of exactly `cls`'s instances from their slots, where each is
 * an object slot of `cls` (`__slots__`); True where it took it, else False (getattr, as before) */
static PyObject *meta_type(PyObject *module, PyObject *cls) {
    (void)module;
    if (!PyType_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, "meta_type: expected a class");
        return NULL;
    }
    Py_ssize_t offsets[N_FIELDS];
    for (int f = 0; f < N_FIELDS; f++) {
        PyObject *d = PyDict_GetItemWithError(((PyTypeObject *)cls)->tp_dict, NAMES[f]);
        if (!d) {
            if (PyErr_Occurred()) return NULL;
            Py_RETURN_FALSE;
        }
        if (!Py_IS_TYPE(d, &PyMemberDescr_Type)) Py_RETURN_FALSE;
        PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
        if (m->type != T_OBJECT_EX || (m->flags & READ_RESTRICTED)) Py_RETURN_FALSE;
        offsets[f] = m->offset;
    }
    Py_XSETREF(META_TYPE, (PyTypeObject *)Py_NewRef(cls));
    memcpy(META_OFFSETS, offsets, sizeof offsets);
    Py_RETURN_TRUE;
}

/* an int field of a meta */
static int int_attr(PyObject *meta, int field, int64_t *out) {
    PyObject *v = meta_attr(meta, field);
    if (!v) return -1;
    *out = PyLong_AsLongLong(v);
    Py_DECREF(v);
    return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

typedef struct {
    Shadows *self;
    PyObject *value, *memo, *modality_index; /* None where not read */
    PyObject *last_meta;                    /* borrowed: the last meta worked out, and its worth */
    double last_worth;
} block_reader;

/* the slot of `obj` among the objects held (taken in while there is room): -1 where full */
static int held_slot(Shadows *self, PyObject *obj) {
    for (int j = 0; j < self->n_held; j++)
        if (self->held[j] == obj) return j;
    if (self->n_held == HELD_OBJS) return -1;
    Py_INCREF(obj);
    self->held[self->n_held] = obj;
    self->modality_of[self->n_held] = -1;
    return self->n_held++;
}

/* cost_aware's value of a meta through the shape memo (`ShadowSet._worth_of`): 0, or -1 */
static int worth_by_shape(block_reader *r, PyObject *meta, double *worth) {
    PyObject *parts[4] = {meta_attr(meta, F_TOKENS), meta_attr(meta, F_POSITION),
                          meta_attr(meta, F_MODALITY), meta_attr(meta, F_TIER)};
    PyObject *shape = NULL, *w = NULL;
    int r_ = -1;
    if (!parts[0] || !parts[1] || !parts[2] || !parts[3]) goto done;
    if (!(shape = PyTuple_Pack(4, parts[0], parts[1], parts[2], parts[3]))) goto done;
    w = PyDict_GetItemWithError(r->memo, shape);
    if (w) {
        Py_INCREF(w);
    } else {
        if (PyErr_Occurred() || !(w = PyObject_CallOneArg(r->value, meta))) goto done;
        if (PyDict_SetItem(r->memo, shape, w) < 0) goto done;
    }
    *worth = PyFloat_AsDouble(w);
    r_ = *worth == -1.0 && PyErr_Occurred() ? -1 : 0;
done:
    for (int j = 0; j < 4; j++) Py_XDECREF(parts[j]);
    Py_XDECREF(shape);
    Py_XDECREF(w);
    return r_;
}

/* a shape's 64 bits where its fields fit (position below 2^40, tokens below 2^16, the modality's
 * and tier's slots among the objects held below 8), else 0: not cached in C */
static uint64_t shape_bits(const hkv_block *b, int modality, int tier) {
    if (b->position < 0 || b->position >= ((int64_t)1 << 40) || b->tokens < 0 ||
        b->tokens >= (1 << 16) || modality < 0 || modality >= 8 || tier < 0 || tier >= 8)
        return 0;
    return ((uint64_t)b->position << 22 | (uint64_t)b->tokens << 6 | (uint64_t)modality << 3 |
            (uint64_t)tier) + 1;
}

/* cost_aware's value of block `b`'s meta (`modality`: its modality's slot, -1 unknown): by its
 * shape, cached in C where it packs (metas of one shape, one object or many, share it), else
 * through the shape memo */
static int worth_of(block_reader *r, PyObject *meta, const hkv_block *b, int modality,
                    double *worth) {
    if (meta == r->last_meta) {
        *worth = r->last_worth;
        return 0;
    }
    Shadows *self = r->self;
    PyObject *tier_obj = meta_attr(meta, F_TIER);
    if (!tier_obj) return -1;
    int tier = held_slot(self, tier_obj);
    Py_DECREF(tier_obj);
    uint64_t at = shape_bits(b, modality, tier);
    int64_t *slot = at ? hkv_map_get(&self->worth_at, at) : NULL;
    worth_entry *e = slot ? &self->worths[*slot] : NULL;
    if (e && e->tokens == b->tokens && e->position == b->position && e->modality == modality &&
        e->tier == tier) {
        *worth = e->worth;
    } else {
        if (worth_by_shape(r, meta, worth) < 0) return -1;
        if (at) {
            if (!e && self->n_worths == WORTHS_KEPT) { /* bounded: forget them all */
                hkv_map_clear(&self->worth_at);
                self->n_worths = 0;
            }
            if (!e && hkv_map_put(&self->worth_at, at, self->n_worths) < 0) {
                PyErr_NoMemory();
                return -1;
            }
            e = e ? e : &self->worths[self->n_worths++];
            *e = (worth_entry){b->tokens, b->position, modality, tier, *worth};
        }
    }
    r->last_meta = meta;
    r->last_worth = *worth;
    return 0;
}

static int read_fields(block_reader *r, PyObject *meta, hkv_block *b);

/* one block of the request: its id and the meta's fields the shadows read (its position, read
 * already, in b->position) */
static int read_block(block_reader *r, PyObject *key, PyObject *meta, hkv_block *b) {
    return hkv_key_bits(key, &b->key) < 0 ? -1 : read_fields(r, meta, b);
}

/* the meta's fields the shadows read, its id in b->key already */
static int read_fields(block_reader *r, PyObject *meta, hkv_block *b) {
    if (int_attr(meta, F_TOKENS, &b->tokens) < 0) return -1;
    b->worth = 0.0;
    b->modality = 0;
    if (r->value == Py_None && r->modality_index == Py_None) return 0;
    Shadows *self = r->self;
    PyObject *m = meta_attr(meta, F_MODALITY);
    if (!m) return -1;
    int slot = held_slot(self, m);
    if (r->modality_index != Py_None) {
        if (slot >= 0 && self->modality_of[slot] >= 0) {
            b->modality = self->modality_of[slot];
        } else {
            PyObject *index = PyDict_GetItemWithError(r->modality_index, m);
            if (!index) {
                Py_DECREF(m);
                if (!PyErr_Occurred()) PyErr_SetString(PyExc_KeyError, "Shadows: unknown modality");
                return -1;
            }
            b->modality = (int32_t)PyLong_AsLong(index);
            if (PyErr_Occurred() || check_modality(b->modality) < 0) {
                Py_DECREF(m);
                return -1;
            }
            if (slot >= 0) self->modality_of[slot] = b->modality;
        }
    }
    Py_DECREF(m);
    return r->value != Py_None ? worth_of(r, meta, b, slot, &b->worth) : 0;
}

/* a request's columns, `(keys, metas)`: two lists or tuples of one length, as borrowed item
 * arrays (`*hold` keeps the two sequences alive until released with `columns_release`): the
 * length, or -1 with an exception */
static Py_ssize_t columns_items(PyObject *cols, const char *where, PyObject *hold[2],
                                PyObject ***keys, PyObject ***metas) {
    hold[0] = hold[1] = NULL;
    if (!PyTuple_Check(cols) || PyTuple_GET_SIZE(cols) != 2) {
        PyErr_Format(PyExc_TypeError, "%s: expected (keys, metas), two lists", where);
        return -1;
    }
    for (int c = 0; c < 2; c++) {
        hold[c] = PySequence_Fast(PyTuple_GET_ITEM(cols, c), where);
        if (!hold[c]) goto fail;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(hold[0]);
    if (PySequence_Fast_GET_SIZE(hold[1]) != n) {
        PyErr_Format(PyExc_ValueError, "%s: keys and metas of different lengths", where);
        goto fail;
    }
    *keys = PySequence_Fast_ITEMS(hold[0]);
    *metas = PySequence_Fast_ITEMS(hold[1]);
    return n;
fail:
    Py_CLEAR(hold[0]);
    Py_CLEAR(hold[1]);
    return -1;
}

static void columns_release(PyObject *hold[2]) {
    Py_CLEAR(hold[0]);
    Py_CLEAR(hold[1]);
}

/* a request's columns into the merge (a dict): each key whose bits are below `threshold` (all:
 * `filter` 0) with its meta; with `overwrite` 0, a key already there keeps its meta */
static int merge_into(PyObject *merged, PyObject *cols, int filter, uint64_t threshold,
                      int overwrite) {
    PyObject *hold[2], **keys, **metas;
    Py_ssize_t n = columns_items(cols, "Shadows.replay_request", hold, &keys, &metas);
    if (n < 0) return -1;
    int r = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *key = keys[i];
        uint64_t bits;
        if (filter && (hkv_key_bits(key, &bits) < 0 || bits >= threshold)) {
            if (PyErr_Occurred()) goto done;
            continue;
        }
        if (!overwrite) {
            int here = PyDict_Contains(merged, key);
            if (here < 0) goto done;
            if (here) continue;
        }
        if (PyDict_SetItem(merged, key, metas[i]) < 0) goto done;
    }
    r = 0;
done:
    columns_release(hold);
    return r;
}

/* the registry emptied and freed (its references dropped) */
static void registry_clear(Shadows *self) {
    if (!self->reg_objs) return;
    for (int64_t j = 0; j < 2 * self->reg_len; j++) Py_DECREF(self->reg_objs[j]);
    PyMem_Free(self->reg_objs);
    PyMem_Free(self->reg_ids);
    hkv_map_free(&self->reg_at);
    self->reg_objs = NULL;
    self->reg_ids = NULL;
    self->reg_len = self->reg_cap = 0;
}

/* room for `n` slots in the registry: 0, or -1 with an exception */
static int registry_reserve(Shadows *self, int64_t n) {
    if (n <= self->reg_cap) return 0;
    int64_t cap = self->reg_cap ? self->reg_cap : 1024;
    while (cap < n) cap *= 2;
    if (!self->reg_objs && hkv_map_init(&self->reg_at, (size_t)cap) < 0) goto oom;
    PyObject **objs = PyMem_Realloc(self->reg_objs, (size_t)(2 * cap) * sizeof *objs);
    if (!objs) goto oom;
    self->reg_objs = objs;
    uint64_t *ids = PyMem_Realloc(self->reg_ids, (size_t)cap * sizeof *ids);
    if (!ids) goto oom;
    self->reg_ids = ids;
    self->reg_cap = cap;
    return 0;
oom:
    PyErr_NoMemory();
    return -1;
}

/* block `id` (`key`, `meta`) into the registry, unless registered with this meta object
 * already: 0, or -1 with an exception */
static int register_block(Shadows *self, uint64_t id, PyObject *key, PyObject *meta) {
    int64_t *at = self->reg_objs ? hkv_map_get(&self->reg_at, id) : NULL;
    if (at) {
        PyObject **o = &self->reg_objs[2 * *at], *old_key = o[0], *old_meta = o[1];
        if (old_meta == meta) return 0;
        o[0] = Py_NewRef(key);
        o[1] = Py_NewRef(meta);
        Py_DECREF(old_key);
        Py_DECREF(old_meta);
        return 0;
    }
    if (registry_reserve(self, self->reg_len + 1) < 0) return -1;
    if (hkv_map_put(&self->reg_at, id, self->reg_len) < 0) return PyErr_NoMemory(), -1;
    self->reg_ids[self->reg_len] = id;
    self->reg_objs[2 * self->reg_len] = Py_NewRef(key);
    self->reg_objs[2 * self->reg_len + 1] = Py_NewRef(meta);
    self->reg_len++;
    return 0;
}

/* the deferred replay's tiers, on the worker thread (no Python object touched) */
static void replay_job(void *arg) {
    Shadows *self = arg;
    for (Py_ssize_t i = 0; i < self->n; i++)
        self->job_hits[i] = hkv_tier_replay(&self->tiers[i], &self->request);
}

/* the deferred replay's result, taken (it is read once): (hits per expert, blocks), or None
 * where none waits; NULL with an exception where its replay ran out of memory */
static PyObject *take_deferred(Shadows *self, int take) {
    shadows_wait(self);
    if (!self->job_refs) Py_RETURN_NONE;
    PyObject *hits = PyList_New(self->n);
    for (Py_ssize_t i = 0; hits && i < self->n; i++) {
        if (self->job_hits[i] < 0) {
            Py_CLEAR(hits);
            PyErr_NoMemory();
            break;
        }
        PyObject *h = PyLong_FromLongLong(self->job_hits[i]);
        if (!h) Py_CLEAR(hits);
        else PyList_SET_ITEM(hits, i, h);
    }
    Py_ssize_t refs = self->job_refs;
    if (take || !hits) self->job_refs = 0;
    return hits ? Py_BuildValue("(Nn)", hits, refs) : NULL;
}

/* the request in self->blocks[0:n] replayed by the worker (`deferred`): 0, or -1 */
static int defer_filled(Shadows *self, Py_ssize_t n) {
    if (!self->worker && !(self->worker = hkv_worker_new())) goto oom;
    if (!self->job_hits && !(self->job_hits = PyMem_Calloc((size_t)self->n + 1, sizeof(int64_t))))
        goto oom;
    if (hkv_request_set(&self->request, self->blocks, n) < 0) goto oom;
    self->job_refs = n;
    hkv_worker_submit(self->worker, replay_job, self);
    return 0;
oom:
    PyErr_NoMemory();
    return -1;
}

static PyObject *Shadows_deferred(Shadows *self, PyObject *unused) {
    (void)unused;
    return take_deferred(self, 0);
}

static PyObject *Shadows_threaded(Shadows *self, PyObject *unused) {
    (void)unused;
    if (!self->worker && !(self->worker = hkv_worker_new())) return PyErr_NoMemory();
    return PyBool_FromLong(hkv_worker_threaded(self->worker));
}

static PyObject *Shadows_parallel(Shadows *self, PyObject *unused) {
    (void)unused;
    if (!self->worker && !(self->worker = hkv_worker_new())) return PyErr_NoMemory();
    return PyBool_FromLong(hkv_worker_parallel(self->worker));
}

/* the worth cache, made at the first call that reads worths: 0, or -1 with an exception */
static int worths_ready(Shadows *self) {
    if (self->worths) return 0;
    self->worths = PyMem_Malloc(WORTHS_KEPT * sizeof *self->worths);
    if (!self->worths) return PyErr_NoMemory(), -1;
    if (hkv_map_init(&self->worth_at, 1024) < 0) {
        PyMem_Free(self->worths);
        self->worths = NULL;
        return PyErr_NoMemory(), -1;
    }
    return 0;
}

int hkv_shadows_read(PyObject *shadows, PyObject *keys, PyObject *metas, PyObject *value,
                     PyObject *memo, hkv_block *out) {
    if (!PyObject_TypeCheck(shadows, &ShadowsType)) {
        PyErr_SetString(PyExc_TypeError, "expected a Shadows");
        return -1;
    }
    Shadows *self = (Shadows *)shadows;
    shadows_wait(self);
    if (value != Py_None && worths_ready(self) < 0) return -1;
    block_reader reader = {.self = self, .value = value, .memo = memo,
                           .modality_index = Py_None, .last_meta = NULL};
    for (Py_ssize_t j = 0; j < PyList_GET_SIZE(keys); j++) {
        PyObject *meta = PyList_GET_ITEM(metas, j);
        if (int_attr(meta, F_POSITION, &out[j].position) < 0 ||
            read_block(&reader, PyList_GET_ITEM(keys, j), meta, &out[j]) < 0)
            return -1;
    }
    return 0;
}

/* `merge_into` by 64-bit id instead of through a dict: the misses, then the hits, each
 * `(keys, metas)`, each key kept where its bits are below `threshold` (all: `filter` 0), a miss
 * overwriting the meta of a key already there, a hit skipped where its key is; the keys in the
 * order they first came, into keys[] and metas[] (borrowed: `hold` keeps the four sequences, for
 * `columns_release` twice). The count; -1 with an exception; or -2 where two different keys
 * share an id (then the caller merges through a dict: the same keys, metas and order). */
static Py_ssize_t merge_ids(PyObject *misses, PyObject *found, int filter, uint64_t threshold,
                            PyObject *hold[4], PyObject ***keys_out, PyObject ***metas_out,
                            uint64_t **ids_out) {
    PyObject **k[2], **m[2];
    Py_ssize_t len[2], n = 0;
    *keys_out = NULL;
    if ((len[0] = columns_items(misses, "Shadows.replay_request", hold, &k[0], &m[0])) < 0 ||
        (len[1] = columns_items(found, "Shadows.replay_request", hold + 2, &k[1], &m[1])) < 0)
        return -1;
    PyObject **keys = PyMem_Malloc(2 * (size_t)(len[0] + len[1] + 1) * sizeof *keys);
    uint64_t *ids = PyMem_Malloc((size_t)(len[0] + len[1] + 1) * sizeof *ids);
    hkv_map at;
    /* sampled, few keys stay: a small map grows as they come (a clear of one sized for every
     * key would cost more than the merge) */
    if (!keys || !ids || hkv_map_init(&at, filter ? 64 : (size_t)(len[0] + len[1])) < 0) {
        PyMem_Free(keys);
        PyMem_Free(ids);
        PyErr_NoMemory();
        return -1;
    }
    PyObject **metas = keys + len[0] + len[1] + 1;
    for (int c = 0; c < 2 && n >= 0; c++) {
        for (Py_ssize_t i = 0; i < len[c]; i++) {
            uint64_t bits;
            if (hkv_key_bits(k[c][i], &bits) < 0) {
                n = -1;
                break;
            }
            if (filter && bits >= threshold) continue;
            int64_t *j = hkv_map_get(&at, bits);
            if (j) { /* the same key again, or another key with its id */
                int same = keys[*j] == k[c][i] ? 1 : PyObject_RichCompareBool(keys[*j], k[c][i], Py_EQ);
                if (same <= 0) {
                    n = same < 0 ? -1 : -2;
                    break;
                }
                if (c == 0) metas[*j] = m[c][i]; /* a miss's meta wins; a hit's does not */
                continue;
            }
            if (hkv_map_put(&at, bits, n) < 0) {
                PyErr_NoMemory();
                n = -1;
                break;
            }
            ids[n] = bits;
            keys[n] = k[c][i];
            metas[n++] = m[c][i];
        }
    }
    hkv_map_free(&at);
    if (n < 0) {
        PyMem_Free(keys);
        PyMem_Free(ids);
        return n;
    }
    *keys_out = keys;
    *metas_out = metas;
    *ids_out = ids;
    return n;
}

/* the merge through a dict (`merge_into`), as merge_ids leaves it: the count, or -1 */
static Py_ssize_t merge_dict(PyObject *misses, PyObject *found, int filter, uint64_t threshold,
                             PyObject **merged, PyObject ***keys_out, PyObject ***metas_out,
                             uint64_t **ids_out) {
    *keys_out = NULL;
    if (!(*merged = PyDict_New()) || merge_into(*merged, misses, filter, threshold, 1) < 0 ||
        merge_into(*merged, found, filter, threshold, 0) < 0)
        return -1;
    Py_ssize_t n = PyDict_GET_SIZE(*merged), pos = 0, j = 0;
    PyObject **keys = PyMem_Malloc(2 * (size_t)(n + 1) * sizeof *keys), *key, *meta;
    uint64_t *ids = PyMem_Malloc((size_t)(n + 1) * sizeof *ids);
    if (!keys || !ids) {
        PyMem_Free(keys);
        PyMem_Free(ids);
        return PyErr_NoMemory(), -1;
    }
    while (PyDict_Next(*merged, &pos, &key, &meta)) { /* borrowed: `merged` holds them */
        if (hkv_key_bits(key, &ids[j]) < 0) {
            PyMem_Free(keys);
            PyMem_Free(ids);
            return -1;
        }
        keys[j] = key;
        keys[n + 1 + j++] = meta;
    }
    *keys_out = keys;
    *metas_out = keys + n + 1;
    *ids_out = ids;
    return n;
}

/* replay_request(misses, hits, threshold, register, value, worths, modality_index,
 * deferred=False): `auto`'s request end in one call (`ShadowSet.replay_columns`), its misses and
 * hits each `(keys, metas)`; `register`: each block's id, key and meta into the registry */
/* One request's misses and hits (`replay_request`'s), merged, sampled below `threshold` (all:
 * `filter` 0) and put in order of position into self->blocks[at:at + n] (grown), each block
 * registered where `registers`: n (0: none kept), or -1 with an exception. */
static Py_ssize_t fill_merged(Shadows *self, PyObject *misses, PyObject *found, int filter,
                              uint64_t threshold, int registers, block_reader *reader,
                              Py_ssize_t at) {
    PyObject *merged = NULL, *hold[4] = {NULL};
    Py_ssize_t *order = NULL;
    int64_t *positions = NULL;
    PyObject **keys = NULL, **metas = NULL;
    uint64_t *ids = NULL; /* each merged key's id, worked out once */
    Py_ssize_t n = merge_ids(misses, found, filter, threshold, hold, &keys, &metas, &ids);
    if (n == -2) /* two keys share an id: through a dict, which tells them apart */
        n = merge_dict(misses, found, filter, threshold, &merged, &keys, &metas, &ids);
    if (n <= 0) goto done;
    order = PyMem_Malloc(2 * (size_t)n * sizeof *order);
    positions = PyMem_Malloc((size_t)n * sizeof *positions);
    if (!order || !positions || grow_blocks(self, at + n) < 0) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        n = -1;
        goto done;
    }
    Py_ssize_t j;
    int sorted = 1;
    for (j = 0; j < n; j++) {
        order[j] = j;
        if (int_attr(metas[j], F_POSITION, &positions[j]) < 0) break;
        if (j && positions[j] < positions[j - 1]) sorted = 0;
    }
    if (j < n) {
        n = -1;
        goto done;
    }
    if (!sorted) hkv_sort_by_position(order, order + n, positions, n);
    for (j = 0; j < n; j++) {
        PyObject *key = keys[order[j]], *meta = metas[order[j]];
        hkv_block *b = &self->blocks[at + j];
        b->position = positions[order[j]];
        b->key = ids[order[j]];
        if (read_fields(reader, meta, b) < 0 ||
            (registers && register_block(self, b->key, key, meta) < 0)) {
            n = -1;
            break;
        }
    }
done:
    Py_XDECREF(merged);
    columns_release(hold);
    columns_release(hold + 2);
    PyMem_Free(order);
    PyMem_Free(positions);
    PyMem_Free(keys);
    PyMem_Free(ids);
    return n;
}

static PyObject *Shadows_replay_request(Shadows *self, PyObject *args) {
    PyObject *misses, *found, *threshold_obj, *before = NULL, *result = NULL;
    block_reader reader = {.self = self, .last_meta = NULL};
    int deferred = 0;
    int registers = 0;
    if (!PyArg_ParseTuple(args, "OOOpOOO|p", &misses, &found, &threshold_obj, &registers, &reader.value, &reader.memo,
                          &reader.modality_index, &deferred))
        return NULL;
    if (deferred && !(before = take_deferred(self, 1))) return NULL;
    if (stored(self) < 0 || worths_ready(self) < 0) {
        Py_XDECREF(before);
        return NULL;
    }
    int filter = threshold_obj != Py_None;
    uint64_t threshold = filter ? PyLong_AsUnsignedLongLong(threshold_obj) : 0;
    Py_ssize_t n = PyErr_Occurred()
                       ? -1
                       : fill_merged(self, misses, found, filter, threshold, registers, &reader, 0);
    if (n == 0) {
        result = Py_NewRef(before ? before : Py_None);
    } else if (n > 0 && deferred) {
        if (defer_filled(self, n) == 0) result = Py_NewRef(before);
    } else if (n > 0) {
        PyObject *hits = replay_filled(self, n);
        if (hits) result = Py_BuildValue("(Nn)", hits, n);
    }
    Py_XDECREF(before);
    return result;
}

/* the requests `replay_batch` filled, one after another, in every tier (on the worker thread
 * where it runs: no Python object touched); a store out of memory stops it, raised next */
static void batch_job(void *arg) {
    Shadows *self = arg;
    Py_ssize_t start = 0;
    for (Py_ssize_t r = 0; r < self->batch_len && !self->store_failed; r++) {
        Py_ssize_t end = self->batch_ends[r];
        if (hkv_request_set(&self->request, self->blocks + start, end - start) < 0) {
            self->store_failed = 1;
            break;
        }
        for (Py_ssize_t i = 0; i < self->n; i++)
            if (hkv_tier_replay(&self->tiers[i], &self->request) < 0) self->store_failed = 1;
        start = end;
    }
    self->batch_len = 0;
}

/* replay_batch(requests, register, value, worths, modality_index): each request (misses,
 * hits), as `replay_request` takes one, read here, then stored in every tier one after
 * another by the worker thread while the caller goes on (here, at once, where none runs);
 * every later call waits for it. None. */
static PyObject *Shadows_replay_batch(Shadows *self, PyObject *args) {
    PyObject *requests, *seq = NULL;
    block_reader reader = {.self = self, .last_meta = NULL};
    int registers = 0;
    if (!PyArg_ParseTuple(args, "OpOOO", &requests, &registers, &reader.value, &reader.memo,
                          &reader.modality_index))
        return NULL;
    if (stored(self) < 0 || worths_ready(self) < 0) return NULL;
    if (!self->worker && !(self->worker = hkv_worker_new())) return PyErr_NoMemory();
    if (!(seq = PySequence_Fast(requests, "Shadows.replay_batch: requests must be a list")))
        return NULL;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq), at = 0, kept = 0;
    Py_ssize_t *ends = PyMem_Realloc(self->batch_ends, (size_t)(count + 1) * sizeof *ends);
    if (!ends) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    self->batch_ends = ends;
    for (Py_ssize_t r = 0; r < count; r++) {
        PyObject *misses, *found, *request = PySequence_Fast_GET_ITEM(seq, r);
        if (!PyArg_ParseTuple(request, "OO;Shadows.replay_batch: a request is (misses, hits)",
                              &misses, &found)) {
            Py_DECREF(seq);
            return NULL;
        }
        Py_ssize_t n = fill_merged(self, misses, found, 0, 0, registers, &reader, at);
        if (n < 0) {
            Py_DECREF(seq);
            return NULL;
        }
        if (n) ends[kept++] = at += n;
    }
    Py_DECREF(seq);
    self->batch_len = kept;
    if (kept) hkv_worker_submit(self->worker, batch_job, self);
    Py_RETURN_NONE;
}

static PyObject *Shadows_replay(Shadows *self, PyObject *args) {
    if (stored(self) < 0) return NULL;
    PyObject *keys, *positions, *tokens, *worths, *modalities = Py_None;
    if (!PyArg_ParseTuple(args, "O!O!O!O|O", &PyList_Type, &keys, &PyList_Type, &positions,
                          &PyList_Type, &tokens, &worths, &modalities))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(keys);
    if (PyList_GET_SIZE(positions) != n || PyList_GET_SIZE(tokens) != n ||
        (worths != Py_None && (!PyList_Check(worths) || PyList_GET_SIZE(worths) != n)) ||
        (modalities != Py_None &&
         (!PyList_Check(modalities) || PyList_GET_SIZE(modalities) != n))) {
        PyErr_SetString(PyExc_ValueError,
                        "Shadows.replay: keys, positions, tokens, worths and modalities must be "
                        "lists of one length (worths and modalities may be None)");
        return NULL;
    }
    if (fill(self, keys, positions, tokens, worths, modalities, n) < 0) return NULL;
    return replay_filled(self, n);
}

static PyObject *Shadows_sizes(Shadows *self, PyObject *unused) {
    shadows_wait(self);
    (void)unused;
    PyObject *sizes = PyList_New(self->n);
    if (!sizes) return NULL;
    for (Py_ssize_t i = 0; i < self->n; i++) {
        hkv_tier *t = &self->tiers[i];
        int64_t size = t->expert->ops->size(t->expert) + hkv_oset_len(&t->aside);
        PyList_SET_ITEM(sizes, i, PyLong_FromLongLong(size));
    }
    return sizes;
}

static PyObject *Shadows_holds(Shadows *self, PyObject *args) {
    shadows_wait(self);
    Py_ssize_t i;
    unsigned long long key;
    if (!PyArg_ParseTuple(args, "nK", &i, &key)) return NULL;
    if (i < 0 || i >= self->n) {
        PyErr_SetString(PyExc_IndexError, "Shadows.holds: no such expert");
        return NULL;
    }
    return PyBool_FromLong(hkv_tier_holds(&self->tiers[i], key));
}

/* holding(i, keys): the keys of `keys` that tier i holds now, in order (one call for many:
 * `held.Owed.settle` asks for every owed key a request stores) */
static PyObject *Shadows_holding(Shadows *self, PyObject *args) {
    shadows_wait(self);
    Py_ssize_t i;
    PyObject *keys;
    if (!PyArg_ParseTuple(args, "nO", &i, &keys)) return NULL;
    if (i < 0 || i >= self->n) {
        PyErr_SetString(PyExc_IndexError, "Shadows.holding: no such expert");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(keys, "Shadows.holding: keys must be a sequence");
    PyObject *out = seq ? PyList_New(0) : NULL;
    hkv_tier *t = &self->tiers[i];
    for (Py_ssize_t j = 0; out && j < PySequence_Fast_GET_SIZE(seq); j++) {
        PyObject *key = PySequence_Fast_GET_ITEM(seq, j);
        uint64_t bits;
        if (hkv_key_bits(key, &bits) < 0) Py_CLEAR(out);
        else if (hkv_tier_holds(t, bits) && PyList_Append(out, key) < 0)
            Py_CLEAR(out);
    }
    Py_XDECREF(seq);
    return out;
}

/* `native.key_bits` of one key: the first 8 bytes of a bytes key (little-endian), an int
 * times the golden ratio, any other key's hash times it; -1 with an exception set on error
 * (`*bits` untouched). */
int hkv_key_bits(PyObject *key, uint64_t *bits) {
    if (PyBytes_Check(key)) {
        const unsigned char *data = (const unsigned char *)PyBytes_AS_STRING(key);
        Py_ssize_t n = PyBytes_GET_SIZE(key);
        uint64_t v = 0;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        if (n >= 8) /* the loop's value in one load */
            memcpy(&v, data, sizeof v);
        else
#endif
            for (Py_ssize_t i = (n < 8 ? n : 8) - 1; i >= 0; i--) v = (v << 8) | data[i];
        if (n >= 12 && n % 8 == 4) { /* a digest and a KV-cache group (vLLM's offload key) */
            const unsigned char *g = data + n - 4;
            uint64_t group = ((uint64_t)g[0] << 24) | ((uint64_t)g[1] << 16) | (g[2] << 8) | g[3];
            v ^= group * 0x9E3779B97F4A7C15ULL;
        }
        *bits = v;
        return 0;
    }
    uint64_t v;
    if (PyLong_Check(key)) {
        v = (uint64_t)PyLong_AsUnsignedLongLongMask(key);
    } else {
        Py_hash_t h = PyObject_Hash(key);
        if (h == -1 && PyErr_Occurred()) return -1;
        v = (uint64_t)h;
    }
    if (PyErr_Occurred()) return -1;
    *bits = v * 0x9E3779B97F4A7C15ULL;
    return 0;
}

/* two new lists, keys and metas, as a `(keys, metas)` tuple (stealing both): NULL on error */
PyObject *hkv_columns_pack(PyObject *keys, PyObject *metas) {
    if (!keys || !metas) {
        Py_XDECREF(keys);
        Py_XDECREF(metas);
        return NULL;
    }
    return Py_BuildValue("(NN)", keys, metas);
}

/* append `key` and `meta` to the two lists: 0, or -1 */
int hkv_columns_append(PyObject *keys, PyObject *metas, PyObject *key, PyObject *meta) {
    return PyList_Append(keys, key) < 0 || PyList_Append(metas, meta) < 0 ? -1 : 0;
}

/* sampled(columns, threshold): of a request's `(keys, metas)`, those whose key's bits are below
 * `threshold` (`auto`'s sample), in order, as `(keys, metas)` lists */
static PyObject *sampled(PyObject *module, PyObject *args) {
    (void)module;
    PyObject *cols, *hold[2], **keys, **metas;
    unsigned long long threshold;
    if (!PyArg_ParseTuple(args, "OK", &cols, &threshold)) return NULL;
    Py_ssize_t n = columns_items(cols, "sampled", hold, &keys, &metas);
    if (n < 0) return NULL;
    PyObject *out_keys = PyList_New(0), *out_metas = PyList_New(0);
    for (Py_ssize_t i = 0; out_keys && out_metas && i < n; i++) {
        uint64_t bits;
        if (hkv_key_bits(keys[i], &bits) < 0 ||
            (bits < threshold && hkv_columns_append(out_keys, out_metas, keys[i], metas[i]) < 0))
            Py_CLEAR(out_keys);
    }
    columns_release(hold);
    return hkv_columns_pack(out_keys, out_metas);
}

/* known(keys, first, second): of a list of keys, those found in dict `first`, else in dict
 * `second`, in order, with their metas from there, as `(keys, metas)` lists; keys in neither are
 * left out */
static PyObject *known(PyObject *module, PyObject *args) {
    (void)module;
    PyObject *keys, *first, *second;
    if (!PyArg_ParseTuple(args, "O!O!O!", &PyList_Type, &keys, &PyDict_Type, &first,
                          &PyDict_Type, &second))
        return NULL;
    PyObject *out_keys = PyList_New(0), *out_metas = PyList_New(0);
    for (Py_ssize_t i = 0; out_keys && out_metas && i < PyList_GET_SIZE(keys); i++) {
        PyObject *key = PyList_GET_ITEM(keys, i);
        PyObject *meta = PyDict_GetItemWithError(first, key);
        if (!meta && !PyErr_Occurred()) meta = PyDict_GetItemWithError(second, key);
        if (meta ? hkv_columns_append(out_keys, out_metas, key, meta) < 0 : PyErr_Occurred() != NULL)
            Py_CLEAR(out_keys);
    }
    return hkv_columns_pack(out_keys, out_metas);
}

/* key_ids(keys): `native.key_bits` of each key of a list */
static PyObject *key_ids(PyObject *module, PyObject *keys) {
    (void)module;
    if (!PyList_Check(keys)) {
        PyErr_SetString(PyExc_TypeError, "key_ids: expected a list of keys");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(keys);
    PyObject *out = PyList_New(n);
    if (!out) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t bits;
        PyObject *id = NULL;
        if (hkv_key_bits(PyList_GET_ITEM(keys, i), &bits) < 0 ||
            !(id = PyLong_FromUnsignedLongLong(bits))) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, id);
    }
    return out;
}

hkv_expert *hkv_shadows_expert(PyObject *shadows, Py_ssize_t i) {
    if (!PyObject_TypeCheck(shadows, &ShadowsType)) {
        PyErr_SetString(PyExc_TypeError, "expected a Shadows");
        return NULL;
    }
    Shadows *self = (Shadows *)shadows;
    shadows_wait(self);
    if (i < 0 || i >= self->n) {
        PyErr_SetString(PyExc_IndexError, "no such expert");
        return NULL;
    }
    return self->tiers[i].expert;
}

static PyMethodDef module_methods[] = {
    {"key_ids", key_ids, METH_O, "key_ids(keys): the 64-bit id of each key (native.key_bits)"},
    {"meta_type", meta_type, METH_O,
     "meta_type(cls): read the metas of exactly this class from their slots (native.py)"},
    {"known", known, METH_VARARGS,
     "known(keys, first, second): (keys, metas) of the keys found in dict first, else second"},
    {"note_split", hkv_note_split, METH_VARARGS,
     "note_split(keys, start, chunks, pending, metas, held): a request's absent keys (from "
     "start) and, if held, its resident ones (native.note_split)"},
    {"text_metas", hkv_text_metas, METH_VARARGS,
     "text_metas(keys, ends, block_tokens, metas, short=None): each key's metas[end // "
     "block_tokens - 1], None in the list where one is not a whole block within them (the short "
     "last block: short(start, tokens) if given); None where an end but the last is not whole "
     "(native.text_metas)"},
    {"prefix_split", hkv_prefix_split, METH_VARARGS,
     "prefix_split(key_groups, positions, stored_keys): a request's keys in prefix order by "
     "their end in positions, split into (those in set stored_keys, the others); None where an "
     "end is not an int within 64 bits (native.prefix_split)"},
    {"sampled", sampled, METH_VARARGS,
     "sampled(columns, threshold): of (keys, metas), those whose key's bits are below threshold"},
    {NULL, NULL, 0, NULL},
};

/* put `name` -> value into dict `d` (stealing the value's reference): 0, or -1 */
static int set_item(PyObject *d, const char *name, PyObject *value) {
    if (!value) return -1;
    int r = PyDict_SetItemString(d, name, value);
    Py_DECREF(value);
    return r;
}

/* a map's keys into d[keys_name] and its values into d[vals_name] (None: not kept), the values
 * as ints, or as floats from their bits (`as_double`) */
static int map_lists(PyObject *d, const hkv_map *m, const char *keys_name, const char *vals_name,
                     int as_double) {
    PyObject *keys = PyList_New((Py_ssize_t)m->len), *vals = NULL;
    if (!keys) return -1;
    if (vals_name && !(vals = PyList_New((Py_ssize_t)m->len))) {
        Py_DECREF(keys);
        return -1;
    }
    Py_ssize_t n = 0;
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->used[i]) continue;
        PyObject *key = PyLong_FromUnsignedLongLong(hkv_map_key(m, i)), *val = NULL;
        if (key && vals) {
            double x;
            memcpy(&x, &m->slots[i].val, sizeof x);
            val = as_double ? PyFloat_FromDouble(x) : PyLong_FromLongLong(m->slots[i].val);
        }
        if (!key || (vals && !val)) {
            Py_XDECREF(key);
            Py_XDECREF(val);
            Py_DECREF(keys);
            Py_XDECREF(vals);
            return -1;
        }
        PyList_SET_ITEM(keys, n, key);
        if (vals) PyList_SET_ITEM(vals, n, val);
        n++;
    }
    if (set_item(d, keys_name, keys) < 0) {
        Py_XDECREF(vals);
        return -1;
    }
    return vals ? set_item(d, vals_name, vals) : 0;
}

/* the resident entries as three lists: key ids, seqs, priorities */
static int entry_lists(PyObject *d, hkv_expert *e, int64_t size) {
    uint64_t *keys = PyMem_Malloc((size_t)(size ? size : 1) * sizeof *keys);
    int64_t *seqs = PyMem_Malloc((size_t)(size ? size : 1) * sizeof *seqs);
    double *priorities = PyMem_Malloc((size_t)(size ? size : 1) * sizeof *priorities);
    PyObject *lists[3] = {PyList_New(size), PyList_New(size), PyList_New(size)};
    int r = -1;
    if (!keys || !seqs || !priorities || !lists[0] || !lists[1] || !lists[2]) goto done;
    hkv_prefix_entries(e, keys, seqs, priorities);
    for (int64_t i = 0; i < size; i++) {
        PyObject *items[3] = {PyLong_FromUnsignedLongLong(keys[i]), PyLong_FromLongLong(seqs[i]),
                              PyFloat_FromDouble(priorities[i])};
        for (int j = 0; j < 3; j++) {
            if (!items[j]) {
                for (int k = 0; k < 3; k++) Py_XDECREF(items[k]);
                goto done;
            }
        }
        for (int j = 0; j < 3; j++) PyList_SET_ITEM(lists[j], i, items[j]);
    }
    r = set_item(d, "entry_keys", lists[0]);
    lists[0] = NULL;
    if (r == 0) r = set_item(d, "entry_seqs", lists[1]);
    lists[1] = NULL;
    if (r == 0) r = set_item(d, "entry_priorities", lists[2]);
    lists[2] = NULL;
done:
    for (int j = 0; j < 3; j++) Py_XDECREF(lists[j]);
    PyMem_Free(keys);
    PyMem_Free(seqs);
    PyMem_Free(priorities);
    if (r < 0 && !PyErr_Occurred()) PyErr_NoMemory();
    return r;
}

/* the expert index of a per-expert method's one argument, after the deferred replay in flight:
 * 0, or -1 with an exception naming `method` */
static int expert_arg(Shadows *self, PyObject *args, const char *method, Py_ssize_t *i) {
    shadows_wait(self);
    if (!PyArg_ParseTuple(args, "n", i)) return -1;
    if (*i >= 0 && *i < self->n) return 0;
    PyErr_Format(PyExc_IndexError, "Shadows.%s: no such expert", method);
    return -1;
}

/* cloned(i): a new Shadows of one tier, a copy of expert i, prefix-value or a queue one (its
 * state alone: the tier's blocks aside are not copied), which a full tier's switch runs as its
 * live leader (`ShadowSet.copied`) while expert i goes on as the shadow */
static PyObject *Shadows_cloned(Shadows *self, PyObject *args) {
    Py_ssize_t i;
    if (expert_arg(self, args, "cloned", &i) < 0) return NULL;
    hkv_expert *e = self->tiers[i].expert;
    hkv_prefix_state st;
    int queue = hkv_queue_leader(e);
    if (!queue && !hkv_prefix_state_of(e, &st)) {
        PyErr_SetString(PyExc_ValueError,
                        "Shadows.cloned: expert i is neither a prefix-value expert nor lru, lip, lru+st2 or s3fifo");
        return NULL;
    }
    Shadows *twin = (Shadows *)ShadowsType.tp_alloc(&ShadowsType, 0); /* zeroed */
    if (!twin) return NULL;
    twin->tiers = PyMem_Calloc(1, sizeof(hkv_tier));
    hkv_expert *copy = !twin->tiers ? NULL : queue ? hkv_queue_clone(e) : hkv_prefix_clone(e);
    if (!copy || hkv_tier_init(&twin->tiers[0], copy) < 0) {
        if (copy) copy->ops->destroy(copy);
        Py_DECREF(twin);
        return PyErr_NoMemory();
    }
    twin->n = 1;
    return (PyObject *)twin;
}

static PyObject *Shadows_prefix_state(Shadows *self, PyObject *args) {
    Py_ssize_t i;
    hkv_prefix_state st;
    if (expert_arg(self, args, "prefix_state", &i) < 0) return NULL;
    hkv_expert *e = self->tiers[i].expert;
    if (!hkv_prefix_state_of(e, &st)) Py_RETURN_NONE;
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    if (set_item(d, "seq", PyLong_FromLongLong(st.seq)) < 0 ||
        set_item(d, "refs_until_halving", PyLong_FromLongLong(st.refs_until_halving)) < 0 ||
        set_item(d, "last_position", PyLong_FromLongLong(st.last_position)) < 0 ||
        set_item(d, "inflation", PyFloat_FromDouble(st.inflation)) < 0 ||
        set_item(d, "epoch_inflation", PyFloat_FromDouble(st.epoch_inflation)) < 0 ||
        set_item(d, "chain_cap", PyFloat_FromDouble(st.chain_cap)) < 0 ||
        entry_lists(d, e, st.size) < 0 ||
        map_lists(d, st.counts, "count_keys", "count_values", 0) < 0 ||
        map_lists(d, st.epoch, "epoch_keys", NULL, 0) < 0 ||
        map_lists(d, st.pending, "pending_keys", "pending_priorities", 1) < 0) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
}

/* an ordered set's keys (front first) and values, as two lists in a tuple */
static PyObject *oset_lists(const hkv_oset *s) {
    PyObject *keys = PyList_New(s->len), *vals = PyList_New(s->len);
    Py_ssize_t n = 0;
    if (!keys || !vals) goto fail;
    for (int32_t i = s->head; i >= 0; i = s->nodes[i].next, n++) {
        PyObject *key = PyLong_FromUnsignedLongLong(s->nodes[i].key);
        PyObject *val = key ? PyLong_FromLongLong(s->nodes[i].val) : NULL;
        if (!val) {
            Py_XDECREF(key);
            goto fail;
        }
        PyList_SET_ITEM(keys, n, key);
        PyList_SET_ITEM(vals, n, val);
    }
    return Py_BuildValue("(NN)", keys, vals);
fail:
    Py_XDECREF(keys);
    Py_XDECREF(vals);
    return NULL;
}

static PyObject *Shadows_queues_state(Shadows *self, PyObject *args) {
    Py_ssize_t i;
    const hkv_oset *sets[HKV_QUEUES];
    const char *names[HKV_QUEUES];
    double target = NAN;
    if (expert_arg(self, args, "queues_state", &i) < 0) return NULL;
    int n = hkv_queues_of(self->tiers[i].expert, sets, names, &target);
    if (!n) Py_RETURN_NONE;
    PyObject *d = PyDict_New();
    for (int j = 0; d && j < n; j++) {
        if (set_item(d, names[j], oset_lists(sets[j])) < 0) Py_CLEAR(d);
    }
    if (d && !isnan(target) && set_item(d, "target", PyFloat_FromDouble(target)) < 0) Py_CLEAR(d);
    return d;
}

static PyObject *Shadows_aside(Shadows *self, PyObject *args) {
    Py_ssize_t i;
    if (expert_arg(self, args, "aside", &i) < 0) return NULL;
    PyObject *lists = oset_lists(&self->tiers[i].aside);
    if (!lists) return NULL;
    PyObject *ids = PyTuple_GET_ITEM(lists, 0);
    Py_INCREF(ids);
    Py_DECREF(lists);
    return ids;
}

static PyObject *Shadows_predictive_state(Shadows *self, PyObject *args) {
    Py_ssize_t i;
    if (expert_arg(self, args, "predictive_state", &i) < 0) return NULL;
    return hkv_predictive_state(self->tiers[i].expert);
}

/* registry(): the registry as two dicts, id -> key and id -> meta */
static PyObject *Shadows_registry(Shadows *self, PyObject *unused) {
    (void)unused;
    shadows_wait(self);
    PyObject *keys = PyDict_New(), *metas = PyDict_New();
    for (int64_t j = 0; keys && metas && j < self->reg_len; j++) {
        PyObject *id = PyLong_FromUnsignedLongLong(self->reg_ids[j]);
        if (!id || PyDict_SetItem(keys, id, self->reg_objs[2 * j]) < 0 ||
            PyDict_SetItem(metas, id, self->reg_objs[2 * j + 1]) < 0) {
            Py_XDECREF(id);
            Py_CLEAR(keys);
            break;
        }
        Py_DECREF(id);
    }
    if (!keys || !metas) {
        Py_XDECREF(keys);
        Py_XDECREF(metas);
        return NULL;
    }
    return Py_BuildValue("(NN)", keys, metas);
}

/* the registered key of `id` appended to `out` unless it is in dict `held`: 0, or -1 */
static int append_unheld(Shadows *self, uint64_t id, PyObject *held, PyObject *out) {
    int64_t *at = self->reg_objs ? hkv_map_get(&self->reg_at, id) : NULL;
    if (!at) return 0; /* (an id registered by every request stored: always there) */
    PyObject *key = self->reg_objs[2 * *at];
    int in = PyDict_Contains(held, key);
    return in < 0 ? -1 : in ? 0 : PyList_Append(out, key);
}

/* held_keys(i, held): the keys shadow tier i holds (its expert's resident keys and those it
 * stored aside) that dict `held` has not, by the registry */
static PyObject *Shadows_held_keys(Shadows *self, PyObject *args) {
    Py_ssize_t i;
    PyObject *held;
    shadows_wait(self);
    if (!PyArg_ParseTuple(args, "nO!", &i, &PyDict_Type, &held)) return NULL;
    if (i < 0 || i >= self->n) return PyErr_Format(PyExc_IndexError, "Shadows.held_keys: no such expert");
    static const char *resident[] = {"order", "cold", "warm", "small", "main", "t1", "t2"};
    hkv_tier *t = &self->tiers[i];
    const hkv_oset *sets[HKV_QUEUES + 3];
    const char *names[HKV_QUEUES];
    double target;
    int n = hkv_queues_of(t->expert, sets, names, &target), m = 0;
    for (int q = 0; q < n; q++)
        for (size_t r = 0; r < sizeof resident / sizeof *resident; r++)
            if (!strcmp(names[q], resident[r])) sets[m++] = sets[q];
    m += hkv_predictive_sets(t->expert, sets + m);
    sets[m++] = &t->aside;
    PyObject *out = PyList_New(0);
    for (int q = 0; out && q < m; q++)
        for (int32_t j = sets[q]->head; j >= 0; j = sets[q]->nodes[j].next)
            if (append_unheld(self, sets[q]->nodes[j].key, held, out) < 0) {
                Py_CLEAR(out);
                break;
            }
    hkv_prefix_state state;
    if (out && hkv_prefix_state_of(t->expert, &state) && state.size) {
        uint64_t *keys = PyMem_Malloc((size_t)state.size * sizeof *keys);
        if (!keys) {
            Py_CLEAR(out);
            PyErr_NoMemory();
        } else {
            hkv_prefix_entries(t->expert, keys, NULL, NULL);
            for (int64_t j = 0; j < state.size; j++)
                if (append_unheld(self, keys[j], held, out) < 0) {
                    Py_CLEAR(out);
                    break;
                }
        }
        PyMem_Free(keys);
    }
    return out;
}

/* (no wait: the registry is the caller's, written by replay_request before its replay starts,
 * and never read by the worker) */
static PyObject *Shadows_registry_size(Shadows *self, PyObject *unused) {
    (void)unused;
    return PyLong_FromLongLong(self->reg_len);
}

/* registry_keep(ids): the registry forgets every id not in iterable `ids` */
static PyObject *Shadows_registry_keep(Shadows *self, PyObject *ids) {
    shadows_wait(self);
    hkv_map keep;
    if (hkv_map_init(&keep, 1024) < 0) return PyErr_NoMemory();
    PyObject *it = PyObject_GetIter(ids), *item;
    if (!it) goto fail;
    while ((item = PyIter_Next(it))) {
        uint64_t id = PyLong_AsUnsignedLongLong(item);
        Py_DECREF(item);
        if (PyErr_Occurred()) break;
        if (hkv_map_put(&keep, id, 1) < 0) {
            PyErr_NoMemory();
            break;
        }
    }
    Py_DECREF(it);
    if (PyErr_Occurred()) goto fail;
    int64_t kept = 0;
    if (self->reg_objs) hkv_map_clear(&self->reg_at);
    for (int64_t j = 0; j < self->reg_len; j++) {
        PyObject *key = self->reg_objs[2 * j], *meta = self->reg_objs[2 * j + 1];
        if (!hkv_map_get(&keep, self->reg_ids[j])) {
            Py_DECREF(key);
            Py_DECREF(meta);
            continue;
        }
        self->reg_ids[kept] = self->reg_ids[j];
        self->reg_objs[2 * kept] = key;
        self->reg_objs[2 * kept + 1] = meta;
        /* (the map held every id before: no growth past its size) */
        hkv_map_put(&self->reg_at, self->reg_ids[kept], kept);
        kept++;
    }
    self->reg_len = kept;
    hkv_map_free(&keep);
    Py_RETURN_NONE;
fail:
    hkv_map_free(&keep);
    return NULL;
}

/* register(ids, keys, metas): each id with its key and meta into the registry (three lists) */
static PyObject *Shadows_register(Shadows *self, PyObject *args) {
    PyObject *ids, *keys, *metas;
    if (!PyArg_ParseTuple(args, "O!O!O!", &PyList_Type, &ids, &PyList_Type, &keys, &PyList_Type,
                          &metas))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(ids);
    if (PyList_GET_SIZE(keys) != n || PyList_GET_SIZE(metas) != n) {
        PyErr_SetString(PyExc_ValueError, "Shadows.register: ids, keys and metas of one length");
        return NULL;
    }
    shadows_wait(self);
    for (Py_ssize_t j = 0; j < n; j++) {
        uint64_t id = PyLong_AsUnsignedLongLong(PyList_GET_ITEM(ids, j));
        if (PyErr_Occurred() ||
            register_block(self, id, PyList_GET_ITEM(keys, j), PyList_GET_ITEM(metas, j)) < 0)
            return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef Shadows_methods[] = {
    {"replay_request", (PyCFunction)Shadows_replay_request, METH_VARARGS,
     "replay_request(misses, hits, threshold, register, value, worths, modality_index): a "
     "request's misses and hits, each (keys, metas), merged (misses first, the last meta of "
     "a key; then the hits not among them), sampled below threshold (None: all), in order of "
     "position, stored in every shadow tier: (hits per expert, blocks), or None for none; "
     "register: each block's id, key and meta kept in the registry (`registry`); "
     "deferred: stored by a background thread, and the result returned is the previous "
     "deferred call's (read once)"},
    {"replay_batch", (PyCFunction)Shadows_replay_batch, METH_VARARGS,
     "replay_batch(requests, register, value, worths, modality_index): each request (misses, "
     "hits) as replay_request takes one, unsampled, read now and stored in every tier by the "
     "background thread while the caller goes on (at once where none runs); every later call "
     "waits for it; None"},
    {"registry", (PyCFunction)Shadows_registry, METH_NOARGS,
     "the registry of ids as two dicts: id -> key, id -> meta"},
    {"registry_size", (PyCFunction)Shadows_registry_size, METH_NOARGS, "ids in the registry"},
    {"registry_keep", (PyCFunction)Shadows_registry_keep, METH_O,
     "registry_keep(ids): forget every registered id not among ids"},
    {"register", (PyCFunction)Shadows_register, METH_VARARGS,
     "register(ids, keys, metas): each id, with its key and meta, into the registry"},
    {"deferred", (PyCFunction)Shadows_deferred, METH_NOARGS,
     "the result the next deferred replay_request will return, not taken"},
    {"threaded", (PyCFunction)Shadows_threaded, METH_NOARGS,
     "whether deferred replays run on a background thread (else in the caller, at once)"},
    {"parallel", (PyCFunction)Shadows_parallel, METH_NOARGS,
     "whether a replay's store runs on the background thread beside the caller, its hits read "
     "first (else in the caller: one CPU here, or no thread)"},
    {"predictive_state", (PyCFunction)Shadows_predictive_state, METH_VARARGS,
     "predictive_state(i): the learned expert i's whole state (None for another expert)"},
    {"held_keys", (PyCFunction)Shadows_held_keys, METH_VARARGS,
     "held_keys(i, held): the keys shadow tier i holds that dict held has not (its expert's "
     "resident keys and those aside, by the registry)"},
    {"aside", (PyCFunction)Shadows_aside, METH_VARARGS,
     "aside(i): the ids shadow tier i stored outside its expert (declined), oldest first"},
    {"replay", (PyCFunction)Shadows_replay, METH_VARARGS,
     "replay(keys, positions, tokens, worths): store one request in every shadow tier; "
     "each expert's prefix hits before the store"},
    {"sizes", (PyCFunction)Shadows_sizes, METH_NOARGS, "blocks held by each shadow tier"},
    {"holds", (PyCFunction)Shadows_holds, METH_VARARGS, "holds(i, key): shadow i holds key"},
    {"holding", (PyCFunction)Shadows_holding, METH_VARARGS,
     "holding(i, keys): the keys (native.key_bits of each) that shadow i holds, in order"},
    {"cloned", (PyCFunction)Shadows_cloned, METH_VARARGS,
     "cloned(i): a Shadows of one tier, a copy of expert i (prefix-value, lru, lip, lru+st2)"},
    {"queues_state", (PyCFunction)Shadows_queues_state, METH_VARARGS,
     "queues_state(i): expert i's queues, name -> (key ids front first, values), and arc's "
     "target, if it is a queue expert (lru, lip, lru+st2, arc, s3fifo), else None"},
    {"prefix_state", (PyCFunction)Shadows_prefix_state, METH_VARARGS,
     "prefix_state(i): expert i's state as a dict of lists (key ids), if it is a prefix-value "
     "expert (depth_lfu, depth_lfu_static, cost_aware), else None"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ShadowsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "hkv.policies._shadows.Shadows",
    .tp_basicsize = sizeof(Shadows),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Shadows(labels, capacity): the named experts' shadow tiers, replayed in C",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Shadows_init,
    .tp_dealloc = (destructor)Shadows_dealloc,
    .tp_methods = Shadows_methods,
};

static struct PyModuleDef shadows_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_shadows",
    .m_doc = "auto's shadow tiers in C (see hkv/policies/native.py)",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__shadows(void) {
    if (PyType_Ready(&ShadowsType) < 0) return NULL;
    const char *names[N_FIELDS] = {"position", "tokens", "modality", "tier"};
    for (int f = 0; f < N_FIELDS; f++)
        if (!(NAMES[f] = PyUnicode_InternFromString(names[f]))) return NULL;
    PyObject *m = PyModule_Create(&shadows_module);
    if (!m) return NULL;
    PyObject *labels = Py_BuildValue("(sssssssss)", "lru", "lru+st2", "arc", "s3fifo",
                                     "cost_aware", "depth_lfu", "depth_lfu_static", "lip",
                                     "predictive");
    if (!labels || PyModule_AddObject(m, "LABELS", labels) < 0) {
        Py_XDECREF(labels);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&ShadowsType);
    if (PyModule_AddObject(m, "Shadows", (PyObject *)&ShadowsType) < 0) {
        Py_DECREF(&ShadowsType);
        Py_DECREF(m);
        return NULL;
    }
    if (hkv_leader_add(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
