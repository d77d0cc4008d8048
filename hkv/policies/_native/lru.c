/* The recency experts: "lru" (hkv/policies/lru.py), "lip" (bip with bip_every 0,
 * hkv/policies/dip.py) and "lru+st2" (StoreThreshold(lru, 2), hkv/policies/admission.py). */
#include <stdlib.h>

#include "shadow.h"

/* the first n keys of `s` from its front (or from its back) that are not protected: *got of
 * them are written to out */
static int64_t unprotected(const hkv_oset *s, int backwards, int64_t n, const hkv_map *protected,
                           int32_t *out) {
    int64_t got = 0;
    int32_t i = backwards ? s->tail : s->head;
    while (i >= 0 && got < n) {
        if (!hkv_map_get(protected, s->nodes[i].key)) out[got++] = i;
        i = backwards ? s->nodes[i].prev : s->nodes[i].next;
    }
    return got;
}

/* ---- lru: one queue, least recently used first ---- */
typedef struct {
    hkv_expert base;
    hkv_oset order;
} lru_t;

static int lru_contains(hkv_expert *e, uint64_t key) { return hkv_oset_has(&((lru_t *)e)->order, key); }
static int64_t lru_size(hkv_expert *e) { return hkv_oset_len(&((lru_t *)e)->order); }
static int lru_insert(hkv_expert *e, const hkv_block *b) {
    return hkv_oset_push_back(&((lru_t *)e)->order, b->key, 0);
}

static int lru_evict(hkv_expert *e, int64_t n, const hkv_map *protected) {
    hkv_oset *order = &((lru_t *)e)->order;
    int32_t *picks = malloc((size_t)(n > 0 ? n : 1) * sizeof *picks);
    if (!picks) return -1;
    int64_t got = unprotected(order, 0, n, protected, picks);
    if (got == n)
        for (int64_t i = 0; i < n; i++) hkv_oset_del_node(order, picks[i]);
    free(picks);
    return got == n;
}

/* `EvictionPolicy.after_request` over one queue: the stored keys re-ranked tail first, then
 * the reused ones touched tail first (each resident one to the recent end) */
static int lru_after(hkv_expert *e, const hkv_block *stored, int64_t ns, const hkv_block *reused,
                     int64_t nr) {
    hkv_oset *order = &((lru_t *)e)->order;
    for (int64_t i = ns; i-- > 0;) hkv_oset_move_to_end(order, stored[i].key);
    for (int64_t i = nr; i-- > 0;) hkv_oset_move_to_end(order, reused[i].key);
    return 0;
}

static void lru_destroy(hkv_expert *e) {
    hkv_oset_free(&((lru_t *)e)->order);
    free(e);
}

static const hkv_ops LRU_OPS = {lru_contains, lru_size, hkv_admit_all, lru_insert,
                                lru_evict, lru_after, lru_destroy};

hkv_expert *hkv_lru_new(int64_t capacity) {
    lru_t *p = hkv_expert_alloc(sizeof *p, &LRU_OPS, capacity);
    if (!p) return NULL;
    if (hkv_oset_init(&p->order, (size_t)capacity + 1) < 0) {
        free(p);
        return NULL;
    }
    return &p->base;
}

/* ---- lip: new blocks into the cold queue (leaves newest first), references to warm ---- */
typedef struct {
    hkv_expert base;
    hkv_oset cold, warm; /* cold: oldest first, evicted from the back; warm: LRU first */
} lip_t;

static int lip_contains(hkv_expert *e, uint64_t key) {
    lip_t *p = (lip_t *)e;
    return hkv_oset_has(&p->cold, key) || hkv_oset_has(&p->warm, key);
}
static int64_t lip_size(hkv_expert *e) {
    lip_t *p = (lip_t *)e;
    return hkv_oset_len(&p->cold) + hkv_oset_len(&p->warm);
}
static int lip_insert(hkv_expert *e, const hkv_block *b) {
    return hkv_oset_push_back(&((lip_t *)e)->cold, b->key, 0);
}

static int lip_evict(hkv_expert *e, int64_t n, const hkv_map *protected) {
    lip_t *p = (lip_t *)e;
    int32_t *picks = malloc((size_t)(n > 0 ? n : 1) * sizeof *picks);
    if (!picks) return -1;
    int64_t cold = unprotected(&p->cold, 1, n, protected, picks);
    int64_t warm = cold < n ? unprotected(&p->warm, 0, n - cold, protected, picks + cold) : 0;
    int ok = cold + warm == n;
    if (ok) {
        for (int64_t i = 0; i < cold; i++) hkv_oset_del_node(&p->cold, picks[i]);
        for (int64_t i = cold; i < n; i++) hkv_oset_del_node(&p->warm, picks[i]);
    }
    free(picks);
    return ok;
}

/* `DIPPolicy.touch`: a cold key joins the warm queue's recent end; a warm one moves there */
static int lip_touch(lip_t *p, uint64_t key) {
    if (hkv_oset_del(&p->cold, key, NULL)) return hkv_oset_push_back(&p->warm, key, 0);
    hkv_oset_move_to_end(&p->warm, key);
    return 0;
}

/* tail_first: `refresh_all(stored[::-1])` (warm keys to the recent end tail first; cold keys
 * to the newest end in prefix order), then `touch_all(reused[::-1])` */
static int lip_after(hkv_expert *e, const hkv_block *stored, int64_t ns, const hkv_block *reused,
                     int64_t nr) {
    lip_t *p = (lip_t *)e;
    for (int64_t i = ns; i-- > 0;) hkv_oset_move_to_end(&p->warm, stored[i].key);
    for (int64_t i = 0; i < ns; i++) hkv_oset_move_to_end(&p->cold, stored[i].key);
    for (int64_t i = nr; i-- > 0;)
        if (lip_touch(p, reused[i].key) < 0) return -1;
    return 0;
}

static void lip_destroy(hkv_expert *e) {
    lip_t *p = (lip_t *)e;
    hkv_oset *const sets[2] = {&p->cold, &p->warm};
    hkv_osets_free(sets, 2);
    free(p);
}

static const hkv_ops LIP_OPS = {lip_contains, lip_size, hkv_admit_all, lip_insert,
                                lip_evict, lip_after, lip_destroy};

hkv_expert *hkv_lip_new(int64_t capacity) {
    lip_t *p = hkv_expert_alloc(sizeof *p, &LIP_OPS, capacity);
    if (!p) return NULL;
    hkv_oset *const sets[2] = {&p->cold, &p->warm};
    if (hkv_osets_init(sets, 2, (size_t)capacity + 1) < 0) {
        free(p);
        return NULL;
    }
    return &p->base;
}

/* ---- lru+st2: lru behind vLLM's store_threshold 2 (a bounded LRU tracker of offers) ---- */
#define ST2_THRESHOLD 2
#define ST2_TRACKER 64000

typedef struct {
    lru_t lru; /* first: the lru's ops take it as their own */
    hkv_oset counts;
} st2_t;

static int st2_count(st2_t *p, uint64_t key, int64_t *count) {
    int64_t *val = hkv_oset_val(&p->counts, key);
    if (val) {
        *count = ++*val;
        hkv_oset_move_to_end(&p->counts, key);
        return 0;
    }
    *count = 1;
    if (hkv_oset_push_back(&p->counts, key, 1) < 0) return -1;
    if (hkv_oset_len(&p->counts) > ST2_TRACKER) hkv_oset_pop_front(&p->counts, NULL, NULL);
    return 0;
}

static int st2_admit(hkv_expert *e, const hkv_block *b) {
    int64_t count;
    if (st2_count((st2_t *)e, b->key, &count) < 0) return -1;
    return count >= ST2_THRESHOLD;
}

static int st2_after(hkv_expert *e, const hkv_block *stored, int64_t ns, const hkv_block *reused,
                     int64_t nr) {
    st2_t *p = (st2_t *)e;
    int64_t count;
    for (int64_t i = 0; i < nr; i++)
        if (hkv_oset_has(&p->counts, reused[i].key) && st2_count(p, reused[i].key, &count) < 0)
            return -1;
    return lru_after(e, stored, ns, reused, nr);
}

static void st2_destroy(hkv_expert *e) {
    st2_t *p = (st2_t *)e;
    hkv_oset_free(&p->counts);
    lru_destroy(e); /* frees p */
}

static const hkv_ops ST2_OPS = {lru_contains, lru_size, st2_admit, lru_insert,
                                lru_evict, st2_after, st2_destroy};

hkv_expert *hkv_st2_new(int64_t capacity) {
    st2_t *p = hkv_expert_alloc(sizeof *p, &ST2_OPS, capacity);
    if (!p) return NULL;
    if (hkv_oset_init(&p->lru.order, (size_t)capacity + 1) < 0) {
        free(p);
        return NULL;
    }
    if (hkv_oset_init(&p->counts, 1024) < 0) {
        hkv_oset_free(&p->lru.order);
        free(p);
        return NULL;
    }
    return &p->lru.base;
}

int hkv_queues_of(hkv_expert *e, const hkv_oset **sets, const char **names, double *target) {
    int n = hkv_arc_queues(e, sets, names, target);
    if (!n) n = hkv_s3fifo_queues(e, sets, names);
    if (n) return n;
    if (e->ops == &LRU_OPS || e->ops == &ST2_OPS) {
        sets[0] = &((lru_t *)e)->order;
        names[0] = "order";
        if (e->ops == &LRU_OPS) return 1;
        sets[1] = &((st2_t *)e)->counts;
        names[1] = "counts";
        return 2;
    }
    if (e->ops != &LIP_OPS) return 0;
    sets[0] = &((lip_t *)e)->cold;
    sets[1] = &((lip_t *)e)->warm;
    names[0] = "cold";
    names[1] = "warm";
    return 2;
}

/* ---- lru, lip and lru+st2 run as `auto`'s live leader (leader.c): `QueuePolicy`'s calls ---- */
int hkv_queue_leader(const hkv_expert *e) {
    return e->ops == &LRU_OPS || e->ops == &LIP_OPS || e->ops == &ST2_OPS || hkv_s3_is(e);
}

/* the queues of an expert of `hkv_queue_leader`, in eviction order: lru's one (lru+st2's
 * inner lru's) from its front; lip's cold one from its back (newest first), then its warm one
 * from the front */
int hkv_queue_sets(hkv_expert *e, hkv_oset **sets, int *backwards) {
    if (hkv_s3_is(e)) { /* S, M (not an eviction order: s3fifo's own calls evict it) */
        backwards[0] = backwards[1] = 0;
        return hkv_s3_sets(e, sets);
    }
    if (e->ops != &LIP_OPS) {
        sets[0] = &((lru_t *)e)->order;
        backwards[0] = 0;
        return 1;
    }
    sets[0] = &((lip_t *)e)->cold;
    sets[1] = &((lip_t *)e)->warm;
    backwards[0] = 1;
    backwards[1] = 0;
    return 2;
}

int64_t hkv_queue_entries(hkv_expert *e, uint64_t *keys) {
    hkv_oset *sets[2];
    int backwards[2], n = hkv_queue_sets(e, sets, backwards);
    int64_t got = 0;
    for (int q = 0; q < n; q++)
        for (int32_t i = sets[q]->head; i >= 0; i = sets[q]->nodes[i].next)
            keys[got++] = sets[q]->nodes[i].key;
    return got;
}

int hkv_queue_remove(hkv_expert *e, uint64_t key) {
    hkv_oset *sets[2];
    int backwards[2], n = hkv_queue_sets(e, sets, backwards);
    for (int q = 0; q < n; q++)
        if (hkv_oset_del(sets[q], key, NULL)) return 1;
    return 0;
}

/* lru: `touch_all` and `refresh_all` alike (each resident key to the recent end, in order);
 * lip: `DIPPolicy.touch_all`, or its `refresh_all` (warm keys to the recent end in order, cold
 * ones to the newest end in the reverse order) */
int hkv_queue_touch(hkv_expert *e, const uint64_t *keys, int64_t n, int refresh) {
    if (hkv_s3_is(e)) return hkv_s3_touch(e, keys, n, refresh);
    if (e->ops != &LIP_OPS) {
        for (int64_t i = 0; i < n; i++) hkv_oset_move_to_end(&((lru_t *)e)->order, keys[i]);
        return 0;
    }
    lip_t *p = (lip_t *)e;
    if (!refresh) {
        for (int64_t i = 0; i < n; i++)
            if (lip_touch(p, keys[i]) < 0) return -1;
        return 0;
    }
    for (int64_t i = 0; i < n; i++) hkv_oset_move_to_end(&p->warm, keys[i]);
    for (int64_t i = n; i-- > 0;) hkv_oset_move_to_end(&p->cold, keys[i]);
    return 0;
}

int hkv_queue_evict_where(hkv_expert *e, int64_t n, int (*guard)(void *, uint64_t), void *ctx,
                          uint64_t *victims) {
    if (hkv_s3_is(e)) return hkv_s3_evict_where(e, n, guard, ctx, victims);
    hkv_oset *sets[2];
    int backwards[2], nq = hkv_queue_sets(e, sets, backwards);
    int32_t *picks = malloc((size_t)(n > 0 ? n : 1) * sizeof *picks);
    int64_t got = 0, ends[2] = {0, 0};
    if (!picks) return -1;
    for (int q = 0; q < nq && got < n; q++) {
        const hkv_oset *s = sets[q];
        for (int32_t i = backwards[q] ? s->tail : s->head; i >= 0 && got < n;
             i = backwards[q] ? s->nodes[i].prev : s->nodes[i].next) {
            int g = guard(ctx, s->nodes[i].key);
            if (g < 0) {
                free(picks);
                return -1;
            }
            if (!g) picks[got++] = i;
        }
        ends[q] = got;
    }
    int done = got == n;
    for (int q = 0, j = 0; done && q < nq; q++)
        for (; j < ends[q]; j++) {
            victims[j] = sets[q]->nodes[picks[j]].key;
            hkv_oset_del_node(sets[q], picks[j]);
        }
    free(picks);
    return done;
}

int hkv_queue_after(hkv_expert *e, const hkv_block *stored, int64_t ns, const hkv_block *reused,
                    int64_t nr) {
    if (hkv_s3_is(e)) return hkv_s3_after(e, stored, ns, reused, nr);
    return e->ops == &LIP_OPS ? lip_after(e, stored, ns, reused, nr)
                              : lru_after(e, stored, ns, reused, nr);
}

int hkv_queue_tracks_offers(const hkv_expert *e) { return e->ops == &ST2_OPS; }

int hkv_queue_offers(hkv_expert *e, const uint64_t *keys, int64_t n) {
    if (e->ops != &ST2_OPS) return 0;
    st2_t *p = (st2_t *)e;
    int64_t count;
    for (int64_t i = 0; i < n; i++)
        if (hkv_oset_has(&p->counts, keys[i]) && st2_count(p, keys[i], &count) < 0) return -1;
    return 0;
}

hkv_expert *hkv_queue_clone(hkv_expert *e) {
    if (hkv_s3_is(e)) return hkv_s3_clone(e);
    hkv_expert *twin = e->ops == &LRU_OPS   ? hkv_lru_new(e->capacity)
                       : e->ops == &LIP_OPS ? hkv_lip_new(e->capacity)
                                            : hkv_st2_new(e->capacity);
    hkv_oset *sets[3], *copies[3];
    int backwards[2], n = hkv_queue_sets(e, sets, backwards);
    if (!twin) return NULL;
    hkv_queue_sets(twin, copies, backwards);
    if (e->ops == &ST2_OPS) { /* and the tracker of offers, least recent first */
        sets[n] = &((st2_t *)e)->counts;
        copies[n++] = &((st2_t *)twin)->counts;
    }
    for (int q = 0; q < n; q++)
        for (int32_t i = sets[q]->head; i >= 0; i = sets[q]->nodes[i].next)
            if (hkv_oset_push_back(copies[q], sets[q]->nodes[i].key, sets[q]->nodes[i].val) < 0) {
                twin->ops->destroy(twin);
                return NULL;
            }
    return twin;
}
