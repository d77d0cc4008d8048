/* The learned expert: "predictive" (hkv/policies/predictive.py, default fields), decision for
 * decision. Its history, as the Python policy keeps it:
 *   seen:     key -> its latest reference's record (clock, bucket or -1 once labelled, count);
 *   log:      every reference, oldest first, as (clock, key, serial): a log entry is its key's
 *             latest record while seen's record for the key has the same serial (Python: the
 *             same list object); any other entry was labelled when superseded;
 *   expiring: the entries the sweep labelled, oldest first; kept: those kept for a resident key.
 * The model's table is rebuilt from the labels every `update_every` of them, with the same IEEE
 * operations as numpy's and Python's (`sum` of floats: Neumaier's compensated sum from Python
 * 3.12, a plain one before: `neumaier`). A queue entry's value is its block's depth-and-modality
 * part of a bucket (`_FINE`), which `touch_all` reads from the stored meta. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "leader.h"

#define DEPTHS 8
#define COUNTS 4
#define GAPS 8
#define COARSE (COUNTS * GAPS * 2)
#define BUCKETS (DEPTHS * 3 * COARSE)
#define PRIOR_WEIGHT 4.0
#define FRIENDLY_THRESHOLD 0.25
#define ADMIT_THRESHOLD 0.02
#define MIN_SAMPLES 64
#define UPDATE_EVERY 512
#define WINDOW 16

typedef struct {
    int64_t clock, count, serial;
    int32_t bucket; /* -1: labelled (Python: None) */
} record_t;

typedef struct {
    int64_t clock, serial;
    uint64_t key;
} entry_t;

typedef struct {
    entry_t *items;
    int64_t len, cap;
} entries_t;

typedef struct {
    hkv_expert base;
    hkv_oset averse, friendly; /* values: the block's `_FINE` part */
    hkv_map seen;              /* key -> index into records */
    record_t *records;
    int64_t n_records, records_cap, *free_slots, n_free;
    entries_t log, expiring, kept;
    int64_t log_at, drop_at, expiring_at;
    int64_t horizon, sweep_every, clock, labels, halved_at, serial;
    int32_t labelled[UPDATE_EVERY], returned[UPDATE_EVERY];
    int32_t n_labelled, n_returned;
    double pos[BUCKETS], num[BUCKETS], cpos[COARSE], cnum[COARSE], p[BUCKETS];
    uint8_t trusted[BUCKETS], friendly_at[BUCKETS], declined_at[BUCKETS];
    int64_t request_last;
    int extends, declining, neumaier;
    hkv_map pending; /* admitted key -> its bucket */
} pred_t;

static inline int bit_length(uint64_t x) { return x ? 64 - __builtin_clzll(x) : 0; }

static int entries_push(entries_t *e, entry_t item) {
    if (e->len == e->cap) {
        int64_t cap = e->cap ? 2 * e->cap : 256;
        entry_t *items = realloc(e->items, (size_t)cap * sizeof *items);
        if (!items) return -1;
        e->items = items;
        e->cap = cap;
    }
    e->items[e->len++] = item;
    return 0;
}

/* drop the first n entries */
static void entries_drop(entries_t *e, int64_t n) {
    memmove(e->items, e->items + n, (size_t)(e->len - n) * sizeof *e->items);
    e->len -= n;
}

/* the first index in [lo, hi) whose clock is >= clock (bisect_left by clock) */
static int64_t bisect(const entries_t *e, int64_t clock, int64_t lo, int64_t hi) {
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (e->items[mid].clock < clock) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static record_t *record_of(const pred_t *p, uint64_t key) {
    int64_t *slot = hkv_map_get(&p->seen, key);
    return slot ? &p->records[*slot] : NULL;
}

/* a new record for `key` (absent from seen): its slot, or NULL out of memory */
static record_t *record_new(pred_t *p, uint64_t key) {
    int64_t slot;
    if (p->n_free) {
        slot = p->free_slots[--p->n_free];
    } else {
        if (p->n_records == p->records_cap) {
            int64_t cap = p->records_cap ? 2 * p->records_cap : 1024;
            record_t *records = realloc(p->records, (size_t)cap * sizeof *records);
            int64_t *free_slots = records ? realloc(p->free_slots, (size_t)cap * sizeof(int64_t))
                                          : NULL;
            if (records) p->records = records;
            if (!free_slots) return NULL;
            p->free_slots = free_slots;
            p->records_cap = cap;
        }
        slot = p->n_records++;
    }
    if (hkv_map_put(&p->seen, key, slot) < 0) {
        p->free_slots[p->n_free++] = slot;
        return NULL;
    }
    return &p->records[slot];
}

static void record_forget(pred_t *p, uint64_t key) {
    int64_t slot;
    if (hkv_map_del(&p->seen, key, &slot)) p->free_slots[p->n_free++] = slot;
}

/* `_FINE[modality][bit length of position // tokens]` */
static int64_t fine_of(const hkv_block *b) {
    int64_t tokens = b->tokens ? b->tokens : 1;
    int bits = bit_length((uint64_t)(b->position / tokens));
    return ((bits < DEPTHS - 1 ? bits : DEPTHS - 1) * 3 + b->modality) * COARSE;
}

/* `_bucket`, from a block's `_FINE` part */
static int32_t bucket_of(const pred_t *p, const record_t *r, int64_t fine) {
    int64_t bucket = fine;
    if (r) {
        int64_t count = r->count < 3 ? r->count : 3;
        int bits = bit_length((uint64_t)((p->clock - r->clock) * 8 / p->horizon));
        bucket += (count * GAPS + (bits + 1 < GAPS - 1 ? bits + 1 : GAPS - 1)) * 2;
    }
    return (int32_t)(bucket + p->extends);
}

/* Python's `sum` of a list of floats (after its int start 0) */
static double py_sum(const double *x, int n, int neumaier) {
    if (!n) return 0.0;
    double s = x[0], c = 0.0;
    for (int i = 1; i < n; i++) {
        double t = s + x[i];
        if (neumaier) c += fabs(s) >= fabs(x[i]) ? (s - t) + x[i] : (x[i] - t) + s;
        s = t;
    }
    return neumaier && c != 0.0 ? s + c : s;
}

/* `_refresh_model` */
static void refresh_model(pred_t *p) {
    for (int32_t i = 0; i < p->n_returned; i++) {
        p->pos[p->returned[i]] += 1.0;
        p->cpos[p->returned[i] % COARSE] += 1.0;
    }
    for (int32_t i = 0; i < p->n_labelled; i++) {
        p->num[p->labelled[i]] += 1.0;
        p->cnum[p->labelled[i] % COARSE] += 1.0;
    }
    p->labels += p->n_labelled;
    p->n_labelled = p->n_returned = 0;
    if (p->labels - p->halved_at >= WINDOW * p->horizon) {
        p->halved_at = p->labels;
        for (int b = 0; b < BUCKETS; b++) p->pos[b] *= 0.5, p->num[b] *= 0.5;
        for (int c = 0; c < COARSE; c++) p->cpos[c] *= 0.5, p->cnum[c] *= 0.5;
    }
    double total = py_sum(p->cnum, COARSE, p->neumaier);
    double base = total != 0.0 ? py_sum(p->cpos, COARSE, p->neumaier) / total : 1.0;
    double prior[COARSE];
    for (int c = 0; c < COARSE; c++)
        prior[c] = (p->cpos[c] + PRIOR_WEIGHT * base) / (p->cnum[c] + PRIOR_WEIGHT);
    for (int b = 0; b < BUCKETS; b++) {
        double pb = (p->pos[b] + PRIOR_WEIGHT * prior[b % COARSE]) / (p->num[b] + PRIOR_WEIGHT);
        p->p[b] = pb;
        p->trusted[b] = p->cnum[b % COARSE] + p->num[b] >= MIN_SAMPLES;
        p->friendly_at[b] = pb >= FRIENDLY_THRESHOLD;
        p->declined_at[b] = p->trusted[b] && pb < ADMIT_THRESHOLD;
    }
}

/* `_label` */
static void label(pred_t *p, int32_t bucket, int returned) {
    p->labelled[p->n_labelled++] = bucket;
    if (returned) p->returned[p->n_returned++] = bucket;
    if (p->n_labelled == UPDATE_EVERY) refresh_model(p);
}

/* a reference to `key` (its block's `_FINE` part `fine`, its bucket `bucket`, or -1 to work it
 * out): the latest record labelled and replaced, the log extended, the key filed in a queue
 * (absent from both). 0, or -1 out of memory. */
static int reference(pred_t *p, uint64_t key, int64_t fine, int32_t bucket) {
    record_t *r = record_of(p, key);
    if (bucket < 0) bucket = bucket_of(p, r, fine);
    int64_t count = 1;
    if (r) {
        count += r->count;
        if (r->bucket >= 0) label(p, r->bucket, p->clock - r->clock <= p->horizon);
    } else if (!(r = record_new(p, key))) {
        return -1;
    }
    *r = (record_t){.clock = p->clock, .count = count, .serial = p->serial++, .bucket = bucket};
    if (entries_push(&p->log, (entry_t){p->clock, r->serial, key}) < 0) return -1;
    return hkv_oset_push_back(p->friendly_at[bucket] ? &p->friendly : &p->averse, key, fine);
}

static int is_latest(const pred_t *p, const entry_t *e, record_t **r) {
    *r = record_of(p, e->key);
    return *r && (*r)->serial == e->serial;
}

/* `_forget` */
static int forget(pred_t *p, int64_t end) {
    int64_t oldest = p->clock - 8 * p->horizon, first = p->expiring_at;
    int64_t last = bisect(&p->expiring, oldest, first, p->expiring.len);
    entries_t kept = {0};
    record_t *r;
    for (int64_t i = -p->kept.len; i < last - first; i++) {
        const entry_t *e = i < 0 ? &p->kept.items[p->kept.len + i] : &p->expiring.items[first + i];
        if (!is_latest(p, e, &r)) continue;
        if (hkv_oset_has(&p->averse, e->key) || hkv_oset_has(&p->friendly, e->key)) {
            if (entries_push(&kept, *e) < 0) {
                free(kept.items);
                return -1;
            }
        } else {
            record_forget(p, e->key);
        }
    }
    int64_t stop = bisect(&p->log, oldest, p->drop_at, end);
    if (stop > 1024) {
        entries_drop(&p->log, stop);
        entries_drop(&p->expiring, last);
        end -= stop;
        stop = last = 0;
        kept.len = 0;
    }
    free(p->kept.items);
    p->kept = kept;
    p->log_at = end, p->drop_at = stop, p->expiring_at = last;
    return 0;
}

/* `_sweep` */
static int sweep(pred_t *p) {
    int64_t end = bisect(&p->log, p->clock - p->horizon, p->log_at, p->log.len);
    record_t *r;
    for (int64_t i = p->log_at; i < end; i++) {
        const entry_t *e = &p->log.items[i];
        if (!is_latest(p, e, &r) || r->bucket < 0) continue;
        label(p, r->bucket, 0); /* (nothing in this loop reads the model) */
        r->bucket = -1;
        if (entries_push(&p->expiring, *e) < 0) return -1;
    }
    return forget(p, end);
}

/* `_demote_stale` */
static int demote_stale(pred_t *p) {
    int64_t oldest = p->clock - p->horizon;
    while (p->friendly.head >= 0) {
        uint64_t key = p->friendly.nodes[p->friendly.head].key;
        const record_t *r = record_of(p, key); /* (a resident key's is never forgotten) */
        if (!r) return -1;
        if (r->clock >= oldest) break;
        int64_t fine;
        hkv_oset_pop_front(&p->friendly, NULL, &fine);
        if (hkv_oset_push_front(&p->averse, key, fine) < 0) return -1;
    }
    return 0;
}

static int pred_contains(hkv_expert *e, uint64_t key) {
    pred_t *p = (pred_t *)e;
    return hkv_oset_has(&p->averse, key) || hkv_oset_has(&p->friendly, key);
}

static int64_t pred_size(hkv_expert *e) {
    pred_t *p = (pred_t *)e;
    return hkv_oset_len(&p->averse) + hkv_oset_len(&p->friendly);
}

static int pred_admit(hkv_expert *e, const hkv_block *b) {
    pred_t *p = (pred_t *)e;
    if (b->position <= p->request_last || p->request_last < 0) { /* a request's first block */
        p->extends = b->position > 0;
        p->declining = 0;
    }
    p->request_last = b->position;
    int32_t bucket = bucket_of(p, record_of(p, b->key), fine_of(b));
    if ((int64_t)p->pending.len > e->capacity) hkv_map_clear(&p->pending);
    if (hkv_map_put(&p->pending, b->key, bucket) < 0) return -1;
    if (p->declining) return 0;
    if (pred_size(e) < e->capacity) return 1;
    if (p->declined_at[bucket]) {
        p->declining = 1;
        return 0;
    }
    return 1;
}

static int pred_insert(hkv_expert *e, const hkv_block *b) {
    pred_t *p = (pred_t *)e;
    int64_t bucket = -1;
    hkv_map_del(&p->pending, b->key, &bucket);
    if (reference(p, b->key, fine_of(b), (int32_t)bucket) < 0) return -1;
    p->clock++;
    if (p->clock % p->sweep_every) return 0;
    return sweep(p) < 0 ? -1 : demote_stale(p);
}

static int pred_evict(hkv_expert *e, int64_t n, const hkv_map *protected) {
    pred_t *p = (pred_t *)e;
    int32_t *picks = malloc((size_t)(n > 0 ? n : 1) * sizeof *picks);
    if (!picks) return -1;
    int64_t got = 0, split;
    for (int32_t i = p->averse.head; i >= 0 && got < n; i = p->averse.nodes[i].next)
        if (!hkv_map_get(protected, p->averse.nodes[i].key)) picks[got++] = i;
    split = got;
    for (int32_t i = p->friendly.head; i >= 0 && got < n; i = p->friendly.nodes[i].next)
        if (!hkv_map_get(protected, p->friendly.nodes[i].key)) picks[got++] = i;
    if (got == n) {
        for (int64_t i = 0; i < n; i++)
            hkv_oset_del_node(i < split ? &p->averse : &p->friendly, picks[i]);
    }
    free(picks);
    return got == n;
}

/* `after_request`: the stored keys re-ranked tail first in their own queue (the averse queue's
 * first, then the friendly one's), then `touch_all` of the reused ones, tail first */
static int pred_after(hkv_expert *e, const hkv_block *stored, int64_t ns, const hkv_block *reused,
                      int64_t nr) {
    pred_t *p = (pred_t *)e;
    for (int64_t i = ns; i-- > 0;) hkv_oset_move_to_end(&p->averse, stored[i].key);
    for (int64_t i = ns; i-- > 0;) hkv_oset_move_to_end(&p->friendly, stored[i].key);
    for (int64_t i = nr; i-- > 0;) {
        int64_t fine;
        uint64_t key = reused[i].key;
        if (!hkv_oset_del(&p->averse, key, &fine) && !hkv_oset_del(&p->friendly, key, &fine))
            continue;
        if (reference(p, key, fine, -1) < 0) return -1;
    }
    p->request_last = -1;
    return 0;
}

static void pred_destroy(hkv_expert *e) {
    pred_t *p = (pred_t *)e;
    hkv_oset *const sets[2] = {&p->averse, &p->friendly};
    hkv_osets_free(sets, 2);
    hkv_map_free(&p->seen);
    hkv_map_free(&p->pending);
    free(p->records);
    free(p->free_slots);
    free(p->log.items);
    free(p->expiring.items);
    free(p->kept.items);
    free(p);
}

static const hkv_ops PRED_OPS;

int hkv_predictive_sets(hkv_expert *e, const hkv_oset **sets) {
    if (e->ops != &PRED_OPS) return 0;
    pred_t *p = (pred_t *)e;
    sets[0] = &p->averse;
    sets[1] = &p->friendly;
    return 2;
}

static const hkv_ops PRED_OPS = {pred_contains, pred_size, pred_admit, pred_insert,
                                 pred_evict, pred_after, pred_destroy};

hkv_expert *hkv_predictive_new(int64_t capacity) {
    pred_t *p = hkv_expert_alloc(sizeof *p, &PRED_OPS, capacity);
    if (!p) return NULL;
    hkv_expert base = p->base;
    memset(p, 0, sizeof *p);
    p->base = base;
    hkv_oset *const sets[2] = {&p->averse, &p->friendly};
    if (hkv_osets_init(sets, 2, (size_t)capacity + 1) < 0) {
        free(p);
        return NULL;
    }
    if (hkv_map_init(&p->seen, 4 * (size_t)capacity) < 0 ||
        hkv_map_init(&p->pending, (size_t)capacity + 1) < 0) {
        hkv_map_free(&p->seen);
        hkv_osets_free(sets, 2);
        free(p);
        return NULL;
    }
    p->horizon = capacity > 1 ? capacity : 1; /* round(horizon_factor 1.0 x capacity) */
    p->sweep_every = p->horizon < 256 ? p->horizon : 256;
    p->request_last = -1;
    p->neumaier = PY_VERSION_HEX >= 0x030C0000; /* Python's `sum` of floats since 3.12 */
    for (int b = 0; b < BUCKETS; b++) p->p[b] = 1.0, p->friendly_at[b] = 1;
    return &p->base;
}

/* ---- the state, for Python (`PredictivePolicy.restore_native`) ---- */

static int put(PyObject *d, const char *name, PyObject *value) {
    if (!value) return -1;
    int r = PyDict_SetItemString(d, name, value);
    Py_DECREF(value);
    return r;
}

static PyObject *oset_pair(const hkv_oset *s) {
    PyObject *keys = PyList_New(0), *vals = PyList_New(0);
    for (int32_t i = s->head; keys && vals && i >= 0; i = s->nodes[i].next) {
        PyObject *k = PyLong_FromUnsignedLongLong(s->nodes[i].key);
        PyObject *v = PyLong_FromLongLong(s->nodes[i].val);
        int bad = !k || !v || PyList_Append(keys, k) < 0 || PyList_Append(vals, v) < 0;
        Py_XDECREF(k);
        Py_XDECREF(v);
        if (bad) Py_CLEAR(keys);
    }
    if (!keys || !vals) {
        Py_XDECREF(keys);
        Py_XDECREF(vals);
        return NULL;
    }
    return Py_BuildValue("(NN)", keys, vals);
}

/* entries as a tuple of lists (clocks, keys, serials) */
static PyObject *entries_lists(const entries_t *e, int64_t from) {
    int64_t n = e->len - from;
    PyObject *clocks = PyList_New(n), *keys = PyList_New(n), *serials = PyList_New(n);
    for (int64_t i = 0; clocks && keys && serials && i < n; i++) {
        const entry_t *x = &e->items[from + i];
        PyObject *c = PyLong_FromLongLong(x->clock), *k = PyLong_FromUnsignedLongLong(x->key);
        PyObject *s = PyLong_FromLongLong(x->serial);
        if (!c || !k || !s) {
            Py_XDECREF(c);
            Py_XDECREF(k);
            Py_XDECREF(s);
            Py_CLEAR(clocks);
            break;
        }
        PyList_SET_ITEM(clocks, i, c);
        PyList_SET_ITEM(keys, i, k);
        PyList_SET_ITEM(serials, i, s);
    }
    if (!clocks || !keys || !serials) {
        Py_XDECREF(clocks);
        Py_XDECREF(keys);
        Py_XDECREF(serials);
        return NULL;
    }
    return Py_BuildValue("(NNN)", clocks, keys, serials);
}

/* seen as a tuple of lists (keys, clocks, buckets (None once labelled), counts, serials) */
static PyObject *seen_lists(const pred_t *p) {
    PyObject *lists[5];
    for (int j = 0; j < 5; j++) lists[j] = PyList_New(0);
    for (size_t i = 0; i < p->seen.cap; i++) {
        if (!lists[0] || !lists[1] || !lists[2] || !lists[3] || !lists[4]) break;
        if (!p->seen.used[i]) continue;
        const record_t *r = &p->records[p->seen.slots[i].val];
        PyObject *items[5] = {PyLong_FromUnsignedLongLong(hkv_map_key(&p->seen, i)),
                              PyLong_FromLongLong(r->clock),
                              r->bucket < 0 ? Py_NewRef(Py_None) : PyLong_FromLong(r->bucket),
                              PyLong_FromLongLong(r->count), PyLong_FromLongLong(r->serial)};
        for (int j = 0; j < 5; j++) {
            if (!items[j] || PyList_Append(lists[j], items[j]) < 0) Py_CLEAR(lists[0]);
            Py_XDECREF(items[j]);
        }
    }
    if (!lists[0] || !lists[1] || !lists[2] || !lists[3] || !lists[4]) {
        for (int j = 0; j < 5; j++) Py_XDECREF(lists[j]);
        return NULL;
    }
    return Py_BuildValue("(NNNNN)", lists[0], lists[1], lists[2], lists[3], lists[4]);
}

static PyObject *doubles(const double *x, int n) {
    PyObject *out = PyList_New(n);
    for (int i = 0; out && i < n; i++) {
        PyObject *v = PyFloat_FromDouble(x[i]);
        if (!v) Py_CLEAR(out);
        else PyList_SET_ITEM(out, i, v);
    }
    return out;
}

static PyObject *ints(const int32_t *x, int n) {
    PyObject *out = PyList_New(n);
    for (int i = 0; out && i < n; i++) {
        PyObject *v = PyLong_FromLong(x[i]);
        if (!v) Py_CLEAR(out);
        else PyList_SET_ITEM(out, i, v);
    }
    return out;
}

PyObject *hkv_predictive_state(hkv_expert *e) {
    if (e->ops != &PRED_OPS) Py_RETURN_NONE;
    pred_t *p = (pred_t *)e;
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    int32_t trusted[BUCKETS];
    for (int b = 0; b < BUCKETS; b++) trusted[b] = p->trusted[b];
    PyObject *pending = PyDict_New();
    for (size_t i = 0; pending && i < p->pending.cap; i++) {
        if (!p->pending.used[i]) continue;
        PyObject *k = PyLong_FromUnsignedLongLong(hkv_map_key(&p->pending, i));
        PyObject *v = PyLong_FromLongLong(p->pending.slots[i].val);
        if (!k || !v || PyDict_SetItem(pending, k, v) < 0) Py_CLEAR(pending);
        Py_XDECREF(k);
        Py_XDECREF(v);
    }
    if (put(d, "averse", oset_pair(&p->averse)) < 0 ||
        put(d, "friendly", oset_pair(&p->friendly)) < 0 || put(d, "seen", seen_lists(p)) < 0 ||
        put(d, "log", entries_lists(&p->log, 0)) < 0 ||
        put(d, "expiring", entries_lists(&p->expiring, 0)) < 0 ||
        put(d, "kept", entries_lists(&p->kept, 0)) < 0 || put(d, "pending", pending) < 0 ||
        put(d, "labelled", ints(p->labelled, p->n_labelled)) < 0 ||
        put(d, "returned", ints(p->returned, p->n_returned)) < 0 ||
        put(d, "trusted", ints(trusted, BUCKETS)) < 0 ||
        put(d, "pos", doubles(p->pos, BUCKETS)) < 0 ||
        put(d, "num", doubles(p->num, BUCKETS)) < 0 ||
        put(d, "coarse_pos", doubles(p->cpos, COARSE)) < 0 ||
        put(d, "coarse_num", doubles(p->cnum, COARSE)) < 0 ||
        put(d, "p", doubles(p->p, BUCKETS)) < 0) {
        Py_DECREF(d);
        return NULL;
    }
    const char *names[] = {"clock", "labels", "halved_at", "log_at", "drop_at", "expiring_at",
                           "request_last", "extends", "declining"};
    int64_t values[] = {p->clock, p->labels, p->halved_at, p->log_at, p->drop_at,
                        p->expiring_at, p->request_last, p->extends, p->declining};
    for (int j = 0; j < 9; j++) {
        if (put(d, names[j], PyLong_FromLongLong(values[j])) < 0) {
            Py_DECREF(d);
            return NULL;
        }
    }
    return d;
}
