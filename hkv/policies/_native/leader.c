/* hkv.policies._shadows.Leader: a prefix-value or queue (lru, lip, lru+st2) expert of a `Shadows` run as
 * `auto`'s live leader, on the tier's own keys (hkv/policies/leader.py wraps it as an
 * `EvictionPolicy`).
 *
 *     leader = Leader(shadows, i, keys, held)  # expert i; keys: id -> key; held: None or keys
 *
 * It keeps each resident key by its id and answers for a key only where its id holds that very
 * key: a key whose 64-bit id is another resident key's (a collision)
 * is not resident here, and `insert` refuses it (the caller keeps it outside the leader). Every
 * call makes the decision its Python policy's method makes (`PrefixValuePolicy`, `LRUPolicy`,
 * `BIPPolicy` with `bip_every` 0, `StoreThreshold` of lru). */
#include "leader.h"

/* a resident key's slot: the key and its meta (references; NULL where none), and the slots
 * before and after it in the order the keys came in (-1 at the ends) */
typedef struct {
    PyObject *key, *meta;
    int64_t prev, next;
} held_slot;

typedef struct {
    PyObject_HEAD
    PyObject *shadows; /* the `Shadows` holding the expert: kept alive */
    PyObject *left_out; /* built from a dict of keys held: those it left out (a dict as it) */
    hkv_expert *expert;
    int queue;         /* a queue expert (`hkv_queue_leader`), else a prefix-value one */
    int offers;        /* lru+st2: touches and reuses count as offers, resident or not */
    hkv_map reg;       /* the resident keys: id -> index of `objs` */
    held_slot *objs;   /* `capacity` slots: each resident key, its meta where an insert gave one */
    int64_t n_metas;   /* resident keys with a meta */
    int64_t head, tail; /* the oldest and newest slot (-1: none) */
    int64_t *free_objs, n_free;
    uint64_t *ids; /* scratch: a call's ids */
    hkv_block *blocks;
    Py_ssize_t cap;
    hkv_map batch; /* scratch: one insert's ids */
} Leader;

static int reserve(Leader *self, Py_ssize_t n) {
    if (n <= self->cap) return 0;
    uint64_t *ids = PyMem_Realloc(self->ids, (size_t)n * sizeof *ids);
    if (ids) self->ids = ids;
    hkv_block *blocks = ids ? PyMem_Realloc(self->blocks, (size_t)n * sizeof *blocks) : NULL;
    if (!blocks) {
        PyErr_NoMemory();
        return -1;
    }
    self->blocks = blocks;
    self->cap = n;
    return 0;
}

/* whether id `bits` is resident as `key` (1), another key's (0), absent (0); -1 on error */
static int resident(Leader *self, PyObject *key, uint64_t bits) {
    int64_t *slot = hkv_map_get(&self->reg, bits);
    if (!slot) return 0;
    PyObject *held = self->objs[*slot].key;
    return held == key ? 1 : PyObject_RichCompareBool(held, key, Py_EQ);
}

static void link_last(Leader *self, int64_t slot) {
    self->objs[slot].prev = self->tail;
    self->objs[slot].next = -1;
    if (self->tail >= 0) self->objs[self->tail].next = slot;
    else self->head = slot;
    self->tail = slot;
}

static void unlink_slot(Leader *self, int64_t slot) {
    int64_t before = self->objs[slot].prev, after = self->objs[slot].next;
    if (before >= 0) self->objs[before].next = after;
    else self->head = after;
    if (after >= 0) self->objs[after].prev = before;
    else self->tail = before;
}

/* slot's meta set to `meta` (a new reference taken; None or NULL: none) */
static void set_meta(Leader *self, int64_t slot, PyObject *meta) {
    PyObject *old = self->objs[slot].meta;
    if (meta == Py_None) meta = NULL;
    Py_XINCREF(meta);
    self->objs[slot].meta = meta;
    self->n_metas += (meta != NULL) - (old != NULL);
    Py_XDECREF(old);
}

/* `key` resident as id `bits` (absent, with room), the newest, with `meta` (None or NULL:
 * none): 0, or -1 OOM */
static int reg_add(Leader *self, uint64_t bits, PyObject *key, PyObject *meta) {
    int64_t slot = self->free_objs[--self->n_free];
    if (hkv_map_put(&self->reg, bits, slot) < 0) {
        self->n_free++;
        PyErr_NoMemory();
        return -1;
    }
    Py_INCREF(key);
    self->objs[slot].key = key;
    set_meta(self, slot, meta);
    link_last(self, slot);
    return 0;
}

/* forget id `bits` (its meta too); its key (a reference the caller owns), or NULL where it
 * was absent */
static PyObject *reg_pop(Leader *self, uint64_t bits) {
    int64_t slot;
    if (!hkv_map_del(&self->reg, bits, &slot)) return NULL;
    PyObject *key = self->objs[slot].key;
    self->objs[slot].key = NULL;
    set_meta(self, slot, NULL);
    unlink_slot(self, slot);
    self->free_objs[self->n_free++] = slot;
    return key;
}

static void Leader_dealloc(Leader *self) {
    for (int64_t i = 0; self->objs && self->expert && i < self->expert->capacity; i++) {
        Py_XDECREF(self->objs[i].key);
        Py_XDECREF(self->objs[i].meta);
    }
    Py_XDECREF(self->shadows); /* (the expert is the Shadows': freed with it) */
    Py_XDECREF(self->left_out);
    PyMem_Free(self->objs);
    PyMem_Free(self->free_objs);
    hkv_map_free(&self->reg);
    PyMem_Free(self->ids);
    PyMem_Free(self->blocks);
    hkv_map_free(&self->batch);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The keys of dict `held`, in its order: each key, its value (its meta) and its id, and by
 * id the index of its key (of two keys with one id, the later's), all borrowed (`held` must
 * outlive their use) */
typedef struct {
    Py_ssize_t n;
    PyObject **keys, **metas;
    uint64_t *ids;
    uint8_t *kept; /* the caller's marks */
    hkv_map by_id;
} held_keys;

static void held_free(held_keys *h) {
    PyMem_Free(h->keys);
    PyMem_Free(h->metas);
    PyMem_Free(h->ids);
    PyMem_Free(h->kept);
    if (h->by_id.slots) hkv_map_free(&h->by_id);
}

/* `held_keys` of dict `held`: 0, or -1 with an exception */
static int held_read(PyObject *held, held_keys *h) {
    Py_ssize_t pos = 0, size = PyDict_GET_SIZE(held) + 1;
    PyObject *key, *value;
    h->keys = PyMem_Malloc((size_t)size * sizeof *h->keys);
    h->metas = PyMem_Malloc((size_t)size * sizeof *h->metas);
    h->ids = PyMem_Malloc((size_t)size * sizeof *h->ids);
    h->kept = PyMem_Calloc((size_t)size, 1);
    if (!h->keys || !h->metas || !h->ids || !h->kept || hkv_map_init(&h->by_id, (size_t)size) < 0)
        goto oom;
    while (PyDict_Next(held, &pos, &key, &value)) {
        if (hkv_key_bits(key, &h->ids[h->n]) < 0) return -1;
        h->keys[h->n] = key;
        h->metas[h->n] = value;
        if (hkv_map_put(&h->by_id, h->ids[h->n], h->n) < 0) goto oom;
        h->n++;
    }
    return 0;
oom:
    PyErr_NoMemory();
    return -1;
}

/* Leader(shadows, i, keys, held): the resident entries whose id `keys` maps to a key (in
 * `held`, unless it is None) stay; the others are removed, as `handed_over(held=...)` does.
 * `keys` None: each id's key is the key of dict `held` with that id (none left: removed), and
 * the keys come in in the dict's order. Where `held` is a dict, its values are the keys'
 * metas, kept with them (None: none). */
static int Leader_init(Leader *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"shadows", "i", "keys", "held", NULL};
    PyObject *shadows, *keys, *held;
    Py_ssize_t i;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OnOO", kwlist, &shadows, &i, &keys, &held))
        return -1;
    if (keys == Py_None ? !PyDict_Check(held) : !PyDict_Check(keys)) {
        PyErr_SetString(PyExc_TypeError, "Leader: keys must be a dict, or None with held a dict");
        return -1;
    }
    hkv_expert *e = hkv_shadows_expert(shadows, i);
    hkv_prefix_state st = {0};
    if (!e) return -1;
    int queue = hkv_queue_leader(e);
    if (queue) st.size = e->ops->size(e);
    else if (!hkv_prefix_state_of(e, &st)) {
        PyErr_SetString(PyExc_ValueError,
                        "Leader: expert i is neither a prefix-value expert nor lru, lip, lru+st2 or s3fifo");
        return -1;
    }
    if (self->expert) {
        PyErr_SetString(PyExc_RuntimeError, "Leader: initialised twice");
        return -1;
    }
    int64_t cap = e->capacity, n = st.size ? st.size : 1;
    self->objs = PyMem_Calloc((size_t)cap, sizeof *self->objs);
    self->free_objs = PyMem_Malloc((size_t)cap * sizeof *self->free_objs);
    uint64_t *ids = PyMem_Malloc((size_t)n * sizeof *ids);
    int64_t *seqs = PyMem_Malloc((size_t)n * sizeof *seqs);
    double *priorities = PyMem_Malloc((size_t)n * sizeof *priorities);
    int r = -1;
    held_keys h = {0};
    self->head = self->tail = -1;
    if (keys == Py_None && held_read(held, &h) < 0) goto done;
    if (self->objs && self->free_objs && ids && seqs && priorities && hkv_map_init(&self->batch, 64) == 0 &&
        hkv_map_init(&self->reg, (size_t)cap + 1) == 0) {
        r = 0;
        for (int64_t i = 0; i < cap; i++) self->free_objs[i] = cap - 1 - i;
        self->n_free = cap;
        Py_INCREF(shadows);
        self->shadows = shadows;
        self->expert = e; /* (from here `dealloc` frees the keys kept) */
        self->queue = queue;
        self->offers = queue && hkv_queue_tracks_offers(e);
        if (queue) hkv_queue_entries(e, ids);
        else hkv_prefix_entries(e, ids, seqs, priorities);
    }
    for (int64_t j = 0; r == 0 && keys == Py_None && j < st.size; j++) {
        int64_t *at = hkv_map_get(&h.by_id, ids[j]);
        if (at) h.kept[*at] = 1;
        else if (queue) hkv_queue_remove(e, ids[j]);
        else hkv_prefix_remove(e, ids[j]);
    }
    if (r == 0 && keys == Py_None && !(self->left_out = PyDict_New())) r = -1;
    for (Py_ssize_t at = 0; r == 0 && at < h.n; at++) /* in the dict's order */
        r = h.kept[at] ? reg_add(self, h.ids[at], h.keys[at], h.metas[at])
                       : PyDict_SetItem(self->left_out, h.keys[at], h.metas[at]);
    int metas = PyDict_Check(held);
    for (int64_t j = 0; r == 0 && keys != Py_None && j < st.size; j++) {
        PyObject *id = PyLong_FromUnsignedLongLong(ids[j]), *meta = NULL;
        PyObject *key = id ? PyDict_GetItemWithError(keys, id) : NULL;
        int keep = key && (held == Py_None || (r = PySequence_Contains(held, key)) > 0);
        if (keep && metas) meta = PyDict_GetItemWithError(held, key);
        if (!id || (!key && PyErr_Occurred()) || r < 0 || PyErr_Occurred()) r = -1;
        else if (keep) r = reg_add(self, ids[j], key, meta);
        else if (queue) hkv_queue_remove(e, ids[j]);
        else hkv_prefix_remove(e, ids[j]);
        Py_XDECREF(id);
    }
done:
    held_free(&h);
    PyMem_Free(ids);
    PyMem_Free(seqs);
    PyMem_Free(priorities);
    if (r < 0 && !PyErr_Occurred()) PyErr_NoMemory();
    return r;
}

static int ready(Leader *self) {
    if (self->expert) return 0;
    PyErr_SetString(PyExc_RuntimeError, "Leader: not initialised");
    return -1;
}

static Py_ssize_t Leader_len(Leader *self) {
    return ready(self) < 0 ? -1 : (Py_ssize_t)self->reg.len;
}

static int Leader_contains(Leader *self, PyObject *key) {
    uint64_t bits;
    if (ready(self) < 0 || hkv_key_bits(key, &bits) < 0) return -1;
    return resident(self, key, bits);
}

/* the (key, position, tokens, worth[, meta]) arguments of a one-block call (`meta` left as it
 * is where not given): 0, or -1 with an exception */
static int one_block(Leader *self, PyObject *args, PyObject **key, hkv_block *b, PyObject **meta) {
    if (ready(self) < 0 ||
        !PyArg_ParseTuple(args, "OLLd|O", key, &b->position, &b->tokens, &b->worth, meta))
        return -1;
    return hkv_key_bits(*key, &b->key);
}

/* admit(key, position, tokens, worth) -> bool: `PrefixValuePolicy.admit` */
static PyObject *Leader_admit(Leader *self, PyObject *args) {
    PyObject *key, *meta = NULL;
    hkv_block b = {0};
    if (one_block(self, args, &key, &b, &meta) < 0) return NULL;
    int r = self->expert->ops->admit(self->expert, &b);
    return r < 0 ? PyErr_NoMemory() : PyBool_FromLong(r);
}

/* the ids of a list's keys into self->ids from `at` on, each only where its key is resident
 * here (else left out): how many, or -1 */
static Py_ssize_t resident_ids(Leader *self, PyObject *keys, Py_ssize_t at) {
    Py_ssize_t n = PyList_GET_SIZE(keys), m = at;
    if (reserve(self, at + n) < 0) return -1;
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *key = PyList_GET_ITEM(keys, j);
        uint64_t bits;
        int r = hkv_key_bits(key, &bits) < 0 ? -1 : resident(self, key, bits);
        if (r < 0) return -1;
        if (r) self->ids[m++] = bits;
    }
    return m - at;
}

/* every key's id (resident or not) into self->ids from `at` on: how many, or -1 */
static Py_ssize_t all_ids(Leader *self, PyObject *keys, Py_ssize_t at) {
    Py_ssize_t n = PyList_GET_SIZE(keys);
    if (reserve(self, at + n) < 0) return -1;
    for (Py_ssize_t j = 0; j < n; j++)
        if (hkv_key_bits(PyList_GET_ITEM(keys, j), &self->ids[at + j]) < 0) return -1;
    return n;
}

/* lru+st2's offers (`StoreThreshold.touch` and `after_request`): each of the keys it tracks,
 * resident or not, counted once more; 0, or -1 with an exception */
static int count_offers(Leader *self, PyObject *keys) {
    Py_ssize_t n = self->offers ? all_ids(self, keys, 0) : 0;
    if (n < 0) return -1;
    return hkv_queue_offers(self->expert, self->ids, n) < 0 ? (PyErr_NoMemory(), -1) : 0;
}

/* touch(keys, refresh): `touch_all` (refresh False) or `refresh_all` of a list of keys */
static PyObject *Leader_touch(Leader *self, PyObject *args) {
    PyObject *keys;
    int refresh;
    if (ready(self) < 0 || !PyArg_ParseTuple(args, "O!p", &PyList_Type, &keys, &refresh))
        return NULL;
    if (!refresh && count_offers(self, keys) < 0) return NULL;
    Py_ssize_t m = resident_ids(self, keys, 0);
    if (m < 0) return NULL;
    int r = self->queue ? hkv_queue_touch(self->expert, self->ids, m, refresh)
                        : hkv_prefix_touch(self->expert, self->ids, m, refresh);
    if (r < 0) return PyErr_NoMemory();
    Py_RETURN_NONE;
}

/* after_request(stored, reused): `EvictionPolicy.after_request` (a prefix-value expert's reads
 * only `reused`), each a list of keys in prefix order */
static PyObject *Leader_after_request(Leader *self, PyObject *args) {
    PyObject *stored, *reused;
    if (ready(self) < 0 || !PyArg_ParseTuple(args, "O!O!", &PyList_Type, &stored, &PyList_Type,
                                             &reused))
        return NULL;
    if (count_offers(self, reused) < 0) return NULL;
    Py_ssize_t ns = self->queue ? resident_ids(self, stored, 0) : 0;
    Py_ssize_t nr = ns < 0 ? -1 : resident_ids(self, reused, ns);
    if (nr < 0) return NULL;
    hkv_block *b = self->blocks;
    for (Py_ssize_t j = 0; j < ns + nr; j++) b[j] = (hkv_block){.key = self->ids[j]};
    int r = self->queue ? hkv_queue_after(self->expert, b, ns, b + ns, nr)
                        : self->expert->ops->after_request(self->expert, b, ns, b + ns, nr);
    if (r < 0) return PyErr_NoMemory();
    Py_RETURN_NONE;
}

/* block `j` of an insert: its id, position, tokens and worth from the lists; 0, or -1 */
static int block_at(Leader *self, Py_ssize_t j, PyObject *key, PyObject *positions,
                    PyObject *tokens, PyObject *worths) {
    hkv_block *b = &self->blocks[j];
    if (hkv_key_bits(key, &b->key) < 0) return -1;
    b->position = positions == Py_None ? 0 : PyLong_AsLongLong(PyList_GET_ITEM(positions, j));
    b->tokens = tokens == Py_None ? 0 : PyLong_AsLongLong(PyList_GET_ITEM(tokens, j));
    b->worth = worths == Py_None ? 0.0 : PyFloat_AsDouble(PyList_GET_ITEM(worths, j));
    return PyErr_Occurred() ? -1 : 0;
}

/* whether key `j` of an insert may go in: 1, 0 refused (its id is another key's, resident or
 * earlier in the list), -1 error (KeyError where it is resident or earlier in the list) */
static int insertable(Leader *self, PyObject *keys, Py_ssize_t j) {
    PyObject *key = PyList_GET_ITEM(keys, j);
    uint64_t bits = self->blocks[j].key;
    int64_t *first = hkv_map_get(&self->batch, bits);
    int here = first ? PyObject_RichCompareBool(PyList_GET_ITEM(keys, *first), key, Py_EQ)
                     : resident(self, key, bits);
    if (here > 0) PyErr_Format(PyExc_KeyError, "%R is already resident", key);
    if (here) return -1;
    if (first || hkv_map_get(&self->reg, bits)) return 0;
    return hkv_map_put(&self->batch, bits, j) < 0 ? (PyErr_NoMemory(), -1) : 1;
}

/* self->blocks filled for a list of keys: from the columns (positions, tokens, worths: lists as
 * long as keys, or None) or, `metas` not NULL, read from the metas as the shadows read them
 * (`hkv_shadows_read`: cost_aware's worth through `value` and `memo`); `where` names the call
 * in an error: 0, or -1 with an exception */
static int fill(Leader *self, PyObject *keys, PyObject *const columns[3], PyObject *metas,
                PyObject *value, PyObject *memo, const char *where) {
    Py_ssize_t n = PyList_GET_SIZE(keys);
    if (metas && !(PyList_Check(metas) && PyList_GET_SIZE(metas) == n)) {
        PyErr_Format(PyExc_ValueError, "Leader.%s: metas must be a list as long as keys", where);
        return -1;
    }
    for (int c = 0; !metas && c < 3; c++) {
        if (columns[c] == Py_None || (PyList_Check(columns[c]) && PyList_GET_SIZE(columns[c]) == n))
            continue;
        PyErr_Format(PyExc_ValueError, "Leader.%s: positions, tokens and worths must be lists "
                     "as long as keys, or None", where);
        return -1;
    }
    if (reserve(self, n) < 0) return -1;
    if (metas) return hkv_shadows_read(self->shadows, keys, metas, value, memo, self->blocks);
    for (Py_ssize_t j = 0; j < n; j++)
        if (block_at(self, j, PyList_GET_ITEM(keys, j), columns[0], columns[1], columns[2]) < 0)
            return -1;
    return 0;
}

/* `admit` of each of n filled blocks, in order: a list of bools, or NULL */
static PyObject *admit_filled(Leader *self, Py_ssize_t n) {
    PyObject *verdicts = PyList_New(n);
    for (Py_ssize_t j = 0; verdicts && j < n; j++) {
        int r = self->expert->ops->admit(self->expert, &self->blocks[j]);
        if (r < 0) {
            Py_CLEAR(verdicts);
            PyErr_NoMemory();
        } else {
            PyList_SET_ITEM(verdicts, j, PyBool_FromLong(r));
        }
    }
    return verdicts;
}

/* the keys of a call `(keys, positions, tokens, worths[, metas])` or, `by_metas`, `(keys,
 * metas, value, memo)`, their blocks filled (`fill`): the keys (borrowed from `args`), or NULL;
 * *metas: the keys' metas to keep (a list as long as keys, borrowed), else NULL */
static PyObject *filled_keys(Leader *self, PyObject *args, int by_metas, const char *where,
                             PyObject **metas) {
    PyObject *keys, *rest[3], *kept = Py_None;
    if (ready(self) < 0 || !PyArg_ParseTuple(args, by_metas ? "O!OOO" : "O!OOO|O", &PyList_Type,
                                             &keys, &rest[0], &rest[1], &rest[2], &kept))
        return NULL;
    int r = by_metas ? fill(self, keys, NULL, rest[0], rest[1], rest[2], where)
                     : fill(self, keys, rest, NULL, NULL, NULL, where);
    if (by_metas) kept = rest[0];
    if (r == 0 && kept != Py_None &&
        !(PyList_Check(kept) && PyList_GET_SIZE(kept) == PyList_GET_SIZE(keys))) {
        PyErr_Format(PyExc_ValueError, "Leader.%s: metas must be a list as long as keys", where);
        r = -1;
    }
    *metas = kept == Py_None ? NULL : kept;
    return r < 0 ? NULL : keys;
}

/* admit_each(keys, positions, tokens, worths) -> list of bools: `admit` of each key in order
 * (positions, tokens and worths as `insert` takes them) */
static PyObject *Leader_admit_each(Leader *self, PyObject *args) {
    PyObject *metas, *keys = filled_keys(self, args, 0, "admit_each", &metas);
    return keys ? admit_filled(self, PyList_GET_SIZE(keys)) : NULL;
}

/* admit_metas(keys, metas, value, memo) -> list of bools: `admit_each` with each key's meta,
 * read in C (`fill`) */
static PyObject *Leader_admit_metas(Leader *self, PyObject *args) {
    PyObject *metas, *keys = filled_keys(self, args, 1, "admit_metas", &metas);
    return keys ? admit_filled(self, PyList_GET_SIZE(keys)) : NULL;
}

/* `insert` of the keys whose blocks are filled, each with its meta in list `metas` (or none:
 * NULL) */
static PyObject *insert_filled(Leader *self, PyObject *keys, PyObject *metas) {
    Py_ssize_t n = PyList_GET_SIZE(keys);
    PyObject *refused = PyList_New(0);
    if (!refused) return NULL;
    hkv_map_clear(&self->batch);
    int64_t taken = 0;
    for (Py_ssize_t j = 0; j < n; j++) { /* every check before any insert */
        PyObject *key = PyList_GET_ITEM(keys, j);
        int ok = insertable(self, keys, j);
        if (ok < 0 || (!ok && PyList_Append(refused, key) < 0)) goto fail;
        self->ids[j] = (uint64_t)ok; /* refused: kept outside by the caller */
        taken += ok;
    }
    if ((int64_t)self->reg.len + taken > self->expert->capacity) {
        PyErr_Format(PyExc_RuntimeError, "insert of %lld keys into a full policy (%lld blocks); "
                     "call evict() first", (long long)taken, (long long)self->expert->capacity);
        goto fail;
    }
    for (Py_ssize_t j = 0; j < n; j++) {
        hkv_block *b = &self->blocks[j];
        if (!self->ids[j]) continue;
        PyObject *meta = metas ? PyList_GET_ITEM(metas, j) : NULL;
        if (reg_add(self, b->key, PyList_GET_ITEM(keys, j), meta) < 0) goto fail;
        if (self->expert->ops->insert(self->expert, b) < 0) {
            Py_XDECREF(reg_pop(self, b->key));
            PyErr_NoMemory();
            goto fail;
        }
    }
    return refused;
fail:
    Py_DECREF(refused);
    return NULL;
}

/* insert(keys, positions, tokens, worths, metas=None) -> refused: the keys made resident in
 * order, but for those whose id another resident key (or an earlier key of the list) has,
 * returned (positions, tokens and worths may be None: a queue expert reads none of them), each
 * with its meta from list `metas` where given (kept: `held`).
 * Nothing is inserted where a key is resident already (KeyError) or there is no room for
 * them all (RuntimeError), as `PriorityPolicy.insert` refuses. */
static PyObject *Leader_insert(Leader *self, PyObject *args) {
    PyObject *metas, *keys = filled_keys(self, args, 0, "insert", &metas);
    return keys ? insert_filled(self, keys, metas) : NULL;
}

/* insert_metas(keys, metas, value, memo) -> refused: `insert` with each key's meta, read in C
 * (`fill`) and kept */
static PyObject *Leader_insert_metas(Leader *self, PyObject *args) {
    PyObject *metas, *keys = filled_keys(self, args, 1, "insert_metas", &metas);
    return keys ? insert_filled(self, keys, metas) : NULL;
}

/* insert_one(key, position, tokens, worth, meta=None) -> refused: `insert` of one key (its meta
 * kept where given), True where its id is another resident key's (not inserted) */
static PyObject *Leader_insert_one(Leader *self, PyObject *args) {
    PyObject *key, *meta = NULL;
    hkv_block b = {0};
    if (one_block(self, args, &key, &b, &meta) < 0) return NULL;
    int here = resident(self, key, b.key);
    if (here > 0) PyErr_Format(PyExc_KeyError, "%R is already resident", key);
    if (here) return NULL; /* resident (KeyError), or an error */
    if (hkv_map_get(&self->reg, b.key)) Py_RETURN_TRUE;
    if ((int64_t)self->reg.len >= self->expert->capacity) {
        PyErr_Format(PyExc_RuntimeError, "insert(%R) into a full policy (%lld blocks); call "
                     "evict() first", key, (long long)self->expert->capacity);
        return NULL;
    }
    if (reg_add(self, b.key, key, meta) < 0) return NULL;
    if (self->expert->ops->insert(self->expert, &b) < 0) {
        Py_XDECREF(reg_pop(self, b.key));
        return PyErr_NoMemory();
    }
    Py_RETURN_FALSE;
}

typedef struct {
    Leader *self;
    PyObject *protected;
} guard_ctx;

/* an id's key is in the caller's `protected` collection: 1, 0, or -1 with an exception */
static int guard(void *ctx, uint64_t bits) {
    guard_ctx *g = ctx;
    int64_t *slot = hkv_map_get(&g->self->reg, bits);
    if (!slot) {
        PyErr_SetString(PyExc_RuntimeError, "Leader: a resident id without its key");
        return -1;
    }
    return PySequence_Contains(g->protected, g->self->objs[*slot].key);
}

/* evict(n, protected) -> keys | None: `PriorityPolicy.evict`, `QueuePolicy.evict` (no block is pinned where `auto`
 * runs a leader here: vLLM never pins, and hkv's block manager reports no request's end) */
static PyObject *Leader_evict(Leader *self, PyObject *args) {
    Py_ssize_t n;
    PyObject *protected;
    if (ready(self) < 0 || !PyArg_ParseTuple(args, "nO", &n, &protected)) return NULL;
    if (n <= 0) return PyList_New(0);
    guard_ctx g = {self, protected};
    const hkv_item *victims = NULL;
    if (self->queue && reserve(self, n) < 0) return NULL;
    int r = self->queue ? hkv_queue_evict_where(self->expert, n, guard, &g, self->ids)
                        : hkv_prefix_evict_where(self->expert, n, guard, &g, &victims);
    if (r < 0) return PyErr_Occurred() ? NULL : PyErr_NoMemory();
    if (r == 0) Py_RETURN_NONE;
    PyObject *out = PyList_New(n);
    if (!out) return NULL; /* (the victims are gone from the expert: their keys stay here) */
    for (Py_ssize_t j = 0; j < n; j++)
        PyList_SET_ITEM(out, j, reg_pop(self, self->queue ? self->ids[j] : victims[j].key));
    return out;
}

/* the key of resident id `bits` (borrowed), or NULL with an exception */
static PyObject *key_of(Leader *self, uint64_t bits) {
    int64_t *slot = hkv_map_get(&self->reg, bits);
    if (slot) return self->objs[*slot].key;
    PyErr_SetString(PyExc_RuntimeError, "Leader: a resident id without its key");
    return NULL;
}

/* one step of `QueuePolicy.evict_chains` at eviction candidate `key`: its chain gives up
 * `stand_in(key, taken)` until the key itself is taken, or n are; 0, or -1 with an exception */
static int chain_step(PyObject *key, PyObject *taken, PyObject *stand_in, Py_ssize_t n) {
    int in = 0;
    while (PyDict_GET_SIZE(taken) < n && !(in = PyDict_Contains(taken, key))) {
        PyObject *victim = PyObject_CallFunctionObjArgs(stand_in, key, taken, NULL);
        int r = victim ? PyDict_SetItem(taken, victim, Py_None) : -1;
        Py_XDECREF(victim);
        if (r < 0) return -1;
    }
    return PyDict_GET_SIZE(taken) < n && in < 0 ? -1 : 0;
}

/* evict_chains(n, protected, stand_in) -> keys | None: `QueuePolicy.evict_chains` (no block
 * is pinned here): down the eviction order, past the protected keys, each key's chain gives up
 * `stand_in(key, taken)` until the key itself is taken; the n taken, removed, or None. The
 * walk reads the queues in place: nothing leaves them until the n are chosen. */
static PyObject *Leader_evict_chains(Leader *self, PyObject *args) {
    Py_ssize_t n;
    PyObject *protected, *stand_in;
    if (ready(self) < 0 || !PyArg_ParseTuple(args, "nOO", &n, &protected, &stand_in)) return NULL;
    if (!self->queue) {
        PyErr_SetString(PyExc_TypeError, "Leader.evict_chains: a queue expert's only");
        return NULL;
    }
    if (n <= 0) return PyList_New(0);
    hkv_oset *sets[2];
    int backwards[2], nq = hkv_queue_sets(self->expert, sets, backwards);
    PyObject *taken = PyDict_New(), *out = NULL;
    for (int q = 0; taken && q < nq && PyDict_GET_SIZE(taken) < n; q++) {
        const hkv_oset *s = sets[q];
        for (int32_t i = backwards[q] ? s->tail : s->head; i >= 0 && PyDict_GET_SIZE(taken) < n;
             i = backwards[q] ? s->nodes[i].prev : s->nodes[i].next) {
            PyObject *key = key_of(self, s->nodes[i].key);
            int skip = key ? PySequence_Contains(protected, key) : -1;
            if (skip < 0 || (!skip && chain_step(key, taken, stand_in, n) < 0)) goto done;
        }
    }
    if (!taken || PyDict_GET_SIZE(taken) < n) goto done; /* None, or the error */
    out = PySequence_List(taken);
    for (Py_ssize_t j = 0; out && j < PyList_GET_SIZE(out); j++) { /* as `remove` each */
        PyObject *victim = PyList_GET_ITEM(out, j);
        uint64_t bits;
        int r = hkv_key_bits(victim, &bits) < 0 ? -1 : resident(self, victim, bits);
        if (r < 0) Py_CLEAR(out);
        else if (r) {
            hkv_queue_remove(self->expert, bits);
            Py_DECREF(reg_pop(self, bits));
        }
    }
done:
    Py_XDECREF(taken);
    if (out || PyErr_Occurred()) return out;
    Py_RETURN_NONE;
}

/* remove(key) -> bool: `PriorityPolicy.remove`, `QueuePolicy.remove` (False where it is not resident) */
static PyObject *Leader_remove(Leader *self, PyObject *key) {
    uint64_t bits;
    if (ready(self) < 0 || hkv_key_bits(key, &bits) < 0) return NULL;
    int r = resident(self, key, bits);
    if (r > 0) {
        if (self->queue) hkv_queue_remove(self->expert, bits);
        else hkv_prefix_remove(self->expert, bits);
        Py_DECREF(reg_pop(self, bits));
    }
    return r < 0 ? NULL : PyBool_FromLong(r);
}

/* missing(keys) -> list: those of an iterable of keys (a dict: its keys) not resident here, in
 * its order */
static PyObject *Leader_missing(Leader *self, PyObject *keys) {
    if (ready(self) < 0) return NULL;
    PyObject *it = PyObject_GetIter(keys), *key, *out = it ? PyList_New(0) : NULL;
    while (out && (key = PyIter_Next(it))) {
        uint64_t bits;
        int r = hkv_key_bits(key, &bits) < 0 ? -1 : resident(self, key, bits);
        if (r < 0 || (!r && PyList_Append(out, key) < 0)) Py_CLEAR(out);
        Py_DECREF(key);
    }
    Py_XDECREF(it);
    if (out && PyErr_Occurred()) Py_CLEAR(out);
    return out;
}

/* keys() -> list: the resident keys, oldest first (in the order they came in) */
static PyObject *Leader_keys(Leader *self, PyObject *unused) {
    (void)unused;
    if (ready(self) < 0) return NULL;
    PyObject *out = PyList_New(0);
    for (int64_t s = self->head; out && s >= 0; s = self->objs[s].next)
        if (PyList_Append(out, self->objs[s].key) < 0) Py_CLEAR(out);
    return out;
}

/* held() -> dict: each resident key's meta (None where none was kept), oldest first */
static PyObject *Leader_held(Leader *self, PyObject *unused) {
    (void)unused;
    if (ready(self) < 0) return NULL;
    PyObject *out = PyDict_New();
    for (int64_t s = self->head; out && s >= 0; s = self->objs[s].next) {
        PyObject *meta = self->objs[s].meta ? self->objs[s].meta : Py_None;
        if (PyDict_SetItem(out, self->objs[s].key, meta) < 0) Py_CLEAR(out);
    }
    return out;
}

/* left_out() -> dict | None: built from a dict of keys held (`keys` None), its items whose key
 * it did not make resident, in its order; None after the first call, or where built otherwise */
static PyObject *Leader_left_out(Leader *self, PyObject *unused) {
    (void)unused;
    if (ready(self) < 0) return NULL;
    PyObject *out = self->left_out ? self->left_out : Py_NewRef(Py_None);
    self->left_out = NULL;
    return out;
}

/* metas_kept() -> bool: whether every resident key has its meta kept */
static PyObject *Leader_metas_kept(Leader *self, PyObject *unused) {
    (void)unused;
    if (ready(self) < 0) return NULL;
    return PyBool_FromLong(self->n_metas == (int64_t)self->reg.len);
}

/* the slot where `key` is resident, -1 where it is not, -2 on error */
static int64_t slot_of(Leader *self, PyObject *key) {
    uint64_t bits;
    if (hkv_key_bits(key, &bits) < 0) return -2;
    int64_t *slot = hkv_map_get(&self->reg, bits);
    if (!slot) return -1;
    PyObject *here = self->objs[*slot].key;
    int same = here == key ? 1 : PyObject_RichCompareBool(here, key, Py_EQ);
    return same < 0 ? -2 : same ? *slot : -1;
}

/* known(keys, second) -> (keys, metas): of a list of keys, those resident here with a meta
 * kept, else in dict `second`, in order, with that meta (`native.known` with the metas held
 * here first) */
static PyObject *Leader_known(Leader *self, PyObject *args) {
    PyObject *keys, *second;
    if (ready(self) < 0 ||
        !PyArg_ParseTuple(args, "O!O!", &PyList_Type, &keys, &PyDict_Type, &second))
        return NULL;
    PyObject *out_keys = PyList_New(0), *out_metas = PyList_New(0);
    for (Py_ssize_t i = 0; out_keys && out_metas && i < PyList_GET_SIZE(keys); i++) {
        PyObject *key = PyList_GET_ITEM(keys, i), *meta = NULL;
        int64_t slot = slot_of(self, key);
        if (slot >= 0) meta = self->objs[slot].meta;
        if (!meta && slot > -2) meta = PyDict_GetItemWithError(second, key);
        if (meta ? hkv_columns_append(out_keys, out_metas, key, meta) < 0 : PyErr_Occurred() != NULL)
            Py_CLEAR(out_keys);
    }
    return hkv_columns_pack(out_keys, out_metas);
}

/* reorder(held): the resident keys of dict `held` made the newest in its order, each with its
 * meta there (None: none kept); the others stay the oldest */
static PyObject *Leader_reorder(Leader *self, PyObject *held) {
    if (ready(self) < 0) return NULL;
    if (!PyDict_Check(held)) {
        PyErr_SetString(PyExc_TypeError, "Leader.reorder: held must be a dict");
        return NULL;
    }
    Py_ssize_t pos = 0;
    PyObject *key, *meta;
    while (PyDict_Next(held, &pos, &key, &meta)) {
        int64_t slot = slot_of(self, key);
        if (slot == -2) return NULL;
        if (slot < 0) continue;
        unlink_slot(self, slot);
        link_last(self, slot);
        set_meta(self, slot, meta);
    }
    Py_RETURN_NONE;
}

static PyMethodDef Leader_methods[] = {
    {"admit", (PyCFunction)Leader_admit, METH_VARARGS,
     "admit(key, position, tokens, worth) -> bool: whether to store a miss"},
    {"admit_each", (PyCFunction)Leader_admit_each, METH_VARARGS,
     "admit_each(keys, positions, tokens, worths) -> list: admit of each key, in order"},
    {"admit_metas", (PyCFunction)Leader_admit_metas, METH_VARARGS,
     "admit_metas(keys, metas, value, memo) -> list: admit_each, the metas read in C"},
    {"insert_metas", (PyCFunction)Leader_insert_metas, METH_VARARGS,
     "insert_metas(keys, metas, value, memo) -> refused: insert, the metas read in C"},
    {"insert", (PyCFunction)Leader_insert, METH_VARARGS,
     "insert(keys, positions, tokens, worths, metas=None) -> refused: make the keys resident, "
     "in order, but those whose id another key holds (returned)"},
    {"insert_one", (PyCFunction)Leader_insert_one, METH_VARARGS,
     "insert_one(key, position, tokens, worth, meta=None) -> refused: insert one key (True: "
     "refused)"},
    {"keys", (PyCFunction)Leader_keys, METH_NOARGS,
     "keys() -> list: the resident keys, oldest first"},
    {"held", (PyCFunction)Leader_held, METH_NOARGS,
     "held() -> dict: each resident key's meta kept (None: none), oldest first"},
    {"left_out", (PyCFunction)Leader_left_out, METH_NOARGS,
     "left_out() -> dict or None: the items of the dict held it was built from whose key it did "
     "not make resident, in its order (once)"},
    {"metas_kept", (PyCFunction)Leader_metas_kept, METH_NOARGS,
     "metas_kept() -> bool: whether every resident key's meta is kept"},
    {"known", (PyCFunction)Leader_known, METH_VARARGS,
     "known(keys, second) -> (keys, metas): of the keys, those with a meta kept here, else in "
     "dict second, in order"},
    {"reorder", (PyCFunction)Leader_reorder, METH_O,
     "reorder(held): the resident keys of dict held made the newest, in its order, with its metas"},
    {"missing", (PyCFunction)Leader_missing, METH_O,
     "missing(keys) -> list: those of the keys not resident, in order"},
    {"evict", (PyCFunction)Leader_evict, METH_VARARGS,
     "evict(n, protected) -> keys or None: the n lowest evictable keys, forgotten"},
    {"touch", (PyCFunction)Leader_touch, METH_VARARGS,
     "touch(keys, refresh): touch_all (refresh False) or refresh_all of the resident keys"},
    {"after_request", (PyCFunction)Leader_after_request, METH_VARARGS,
     "after_request(stored, reused): the request's end, as `EvictionPolicy.after_request`"},
    {"remove", (PyCFunction)Leader_remove, METH_O, "remove(key) -> bool: forget a key"},
    {"evict_chains", (PyCFunction)Leader_evict_chains, METH_VARARGS,
     "evict_chains(n, protected, stand_in) -> keys or None: QueuePolicy.evict_chains"},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods Leader_as_sequence = {
    .sq_length = (lenfunc)Leader_len,
    .sq_contains = (objobjproc)Leader_contains,
};

static PyTypeObject LeaderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "hkv.policies._shadows.Leader",
    .tp_basicsize = sizeof(Leader),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Leader(shadows, i, keys, held): expert i of a Shadows (prefix-value, lru, lip or "
              "lru+st2), run on keys",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Leader_init,
    .tp_dealloc = (destructor)Leader_dealloc,
    .tp_methods = Leader_methods,
    .tp_as_sequence = &Leader_as_sequence,
};

int hkv_leader_add(PyObject *module) {
    if (PyType_Ready(&LeaderType) < 0) return -1;
    Py_INCREF(&LeaderType);
    if (PyModule_AddObject(module, "Leader", (PyObject *)&LeaderType) < 0) {
        Py_DECREF(&LeaderType);
        return -1;
    }
    return 0;
}
