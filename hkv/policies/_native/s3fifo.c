/* The "s3fifo" expert: `S3FIFOPolicy` (hkv/policies/s3fifo.py) with its default fields
 * (small_fraction 0.1, promote_hits 1). Its deques S and M are ordered sets (oldest first), each
 * key's hit counter their payload; `_state` is then S and M together (`in_main`: the key is in
 * M), as in a tier the deques never hold a key `_state` has dropped or moved. */
#include <stddef.h>
#include <stdlib.h>

#include "shadow.h"

#define S3_PROMOTE_HITS 1 /* promote_hits */
#define S3_MAX_HITS 3     /* the 2-bit counter */

typedef struct {
    uint64_t key;
    int64_t hits;
} s3_passed; /* a key `evict` passed over, out of its deque until the eviction ends */

typedef struct {
    hkv_expert base;
    hkv_oset small, main; /* S and M, oldest first; payload: the key's hits */
    hkv_oset ghost;       /* G, oldest first */
    int64_t small_target, ghost_blocks;
} s3_t;

static int s3_contains(hkv_expert *e, uint64_t key) {
    s3_t *p = (s3_t *)e;
    return hkv_oset_has(&p->small, key) || hkv_oset_has(&p->main, key);
}

static int64_t s3_size(hkv_expert *e) {
    s3_t *p = (s3_t *)e;
    return hkv_oset_len(&p->small) + hkv_oset_len(&p->main);
}


/* `S3FIFOPolicy.insert`: a key G remembers into M (and out of G), any other into S */
static int s3_insert(hkv_expert *e, const hkv_block *b) {
    s3_t *p = (s3_t *)e;
    if (hkv_oset_del(&p->ghost, b->key, NULL)) return hkv_oset_push_back(&p->main, b->key, 0);
    return hkv_oset_push_back(&p->small, b->key, 0);
}

/* `S3FIFOPolicy.touch`: the counter up to 3; an absent key is ignored */
static void s3_touch(s3_t *p, uint64_t key) {
    int64_t *hits = hkv_oset_val(&p->small, key);
    if (!hits) hits = hkv_oset_val(&p->main, key);
    if (hits && *hits < S3_MAX_HITS) ++*hits;
}

/* a protection test: 1 protected, 0 not, -1 error (`hkv_queue_evict_where`'s) */
typedef int (*s3_guard)(void *, uint64_t);

static int in_map(void *map, uint64_t key) { return hkv_map_get(map, key) != NULL; }

/* `S3FIFOPolicy._has_evictable`: whether n resident keys are not protected (the answer does
 * not depend on the order `_state` is walked in): 1, 0, or -1 (the guard's error) */
static int has_evictable(const s3_t *p, int64_t n, s3_guard guard, void *ctx) {
    const hkv_oset *queues[2] = {&p->small, &p->main};
    int64_t found = 0;
    for (int q = 0; q < 2; q++)
        for (int32_t i = queues[q]->head; i >= 0; i = queues[q]->nodes[i].next) {
            int g = guard(ctx, queues[q]->nodes[i].key);
            if (g < 0) return -1;
            if (!g && ++found == n) return 1;
        }
    return 0;
}

/* `S3FIFOPolicy._evict_small`: pop S until a key leaves (1, *victim set) or moves to M;
 * protected keys are passed over (appended to `passed`); 0 when S has no candidate; -1 OOM or
 * the guard's error (the key it was asked of back at S's front) */
static int evict_small(s3_t *p, s3_guard guard, void *ctx, s3_passed *passed, int64_t *n_passed,
                       uint64_t *victim) {
    uint64_t key;
    int64_t hits;
    while (hkv_oset_pop_front(&p->small, &key, &hits)) {
        int g = guard(ctx, key);
        if (g < 0) {
            hkv_oset_push_front(&p->small, key, hits);
            return -1;
        }
        if (g) {
            passed[(*n_passed)++] = (s3_passed){key, hits};
            continue;
        }
        if (hits >= S3_PROMOTE_HITS) {
            if (hkv_oset_push_back(&p->main, key, 0) < 0) return -1;
            continue;
        }
        if (hkv_oset_push_back(&p->ghost, key, 0) < 0) return -1;
        while (hkv_oset_len(&p->ghost) > p->ghost_blocks) hkv_oset_pop_front(&p->ghost, NULL, NULL);
        *victim = key;
        return 1;
    }
    return 0;
}

/* `S3FIFOPolicy._evict_main`: pop M until a key with a zero counter leaves (1, *victim set),
 * one with hits going back to M's tail one hit poorer, for at most 4 len(M) + 4 pops (M's
 * length without the keys passed over so far); 0 when M has no candidate; -1 OOM or the
 * guard's error (the key it was asked of back at M's front) */
static int evict_main(s3_t *p, s3_guard guard, void *ctx, s3_passed *passed, int64_t *n_passed,
                      uint64_t *victim) {
    int64_t rounds = 4 * hkv_oset_len(&p->main) + 4;
    uint64_t key;
    int64_t hits;
    while (rounds && hkv_oset_pop_front(&p->main, &key, &hits)) {
        rounds--;
        int g = guard(ctx, key);
        if (g < 0) {
            hkv_oset_push_front(&p->main, key, hits);
            return -1;
        }
        if (g) {
            passed[(*n_passed)++] = (s3_passed){key, hits};
            continue;
        }
        if (hits > 0) {
            if (hkv_oset_push_back(&p->main, key, hits - 1) < 0) return -1;
            continue;
        }
        *victim = key;
        return 1;
    }
    return 0;
}

/* `S3FIFOPolicy.evict` with protection test `guard`: from S while S (with the keys it passed
 * over) holds its share or M is empty, else from M, falling back to S; the keys passed over go
 * back to the front of their deque in their order. The victims, in order, into `victims` (room
 * for n; NULL: not kept). 1 done, 0 not possible (nothing changed), -1 OOM or the guard's error
 * (then the victims taken so far are back at S's front: every key stays resident) */
int hkv_s3_evict_where(hkv_expert *e, int64_t n, s3_guard guard, void *ctx, uint64_t *victims) {
    s3_t *p = (s3_t *)e;
    if (n <= 0) return 1;
    int ok = has_evictable(p, n, guard, ctx);
    if (ok <= 0) return ok;
    /* each resident key is passed over at most once in either deque */
    int64_t size = s3_size(e);
    s3_passed *passed_small = malloc((size_t)(2 * size + 2) * sizeof *passed_small);
    uint64_t *taken = victims ? victims : malloc((size_t)n * sizeof *taken);
    if (!passed_small || !taken) {
        free(passed_small);
        if (!victims) free(taken);
        return -1;
    }
    s3_passed *passed_main = passed_small + size + 1;
    int64_t n_small = 0, n_main = 0, got = 0;
    int r = 1;
    for (; got < n && r > 0; got += r > 0) {
        r = 0;
        if (hkv_oset_len(&p->small) + n_small >= p->small_target || !hkv_oset_len(&p->main))
            r = evict_small(p, guard, ctx, passed_small, &n_small, &taken[got]);
        if (r == 0) r = evict_main(p, guard, ctx, passed_main, &n_main, &taken[got]);
        if (r == 0) r = evict_small(p, guard, ctx, passed_small, &n_small, &taken[got]);
        /* S moved its last candidates to M: they go from there */
        if (r == 0) r = evict_main(p, guard, ctx, passed_main, &n_main, &taken[got]);
        if (r == 0) r = -1; /* Python raises: fewer blocks than `_has_evictable` counted */
    }
    int back = 0; /* the passed keys back in place, then (on an error) the victims */
    for (int64_t i = n_small; i-- > 0;)
        back |= hkv_oset_push_front(&p->small, passed_small[i].key, passed_small[i].hits) < 0;
    for (int64_t i = n_main; i-- > 0;)
        back |= hkv_oset_push_front(&p->main, passed_main[i].key, passed_main[i].hits) < 0;
    for (int64_t i = r < 0 ? got : 0; i-- > 0;) {
        hkv_oset_del(&p->ghost, taken[i], NULL); /* (a small victim's key went to G) */
        back |= hkv_oset_push_front(&p->small, taken[i], 0) < 0;
    }
    free(passed_small);
    if (!victims) free(taken);
    return r < 0 || back ? -1 : 1;
}

static int s3_evict(hkv_expert *e, int64_t n, const hkv_map *protected) {
    return hkv_s3_evict_where(e, n, in_map, (void *)protected, NULL);
}

/* the key at the start of item i of an array of `stride`-byte items (keys, or blocks) */
static inline uint64_t key_at(const void *keys, size_t i, size_t stride) {
    return *(const uint64_t *)((const char *)keys + i * stride);
}

/* `S3FIFOPolicy.refresh_all` of the keys of n items of `stride` bytes (`key_at`), walked from
 * the last to the first where `backwards`: in each FIFO, the keys it holds, where they are its
 * newest, re-queued in the order walked (a key met twice: where first met); else its order
 * stands. 0, or -1 OOM */
static int refresh(s3_t *p, const void *keys, int64_t n, size_t stride, int backwards) {
    hkv_oset *queues[2] = {&p->small, &p->main};
    hkv_map mine;
    if (hkv_map_init(&mine, (size_t)n) < 0) return -1;
    for (int q = 0; q < 2; q++) {
        hkv_oset *queue = queues[q];
        int64_t k = 0;
        hkv_map_clear(&mine);
        for (int64_t i = 0; i < n; i++) {
            uint64_t key = key_at(keys, (size_t)i, stride);
            if (hkv_oset_has(queue, key) && hkv_map_put(&mine, key, 1) < 0) {
                hkv_map_free(&mine);
                return -1;
            }
        }
        int64_t m = (int64_t)mine.len; /* (distinct keys) */
        int32_t i = queue->tail;
        for (; k < m && i >= 0 && hkv_map_get(&mine, queue->nodes[i].key); k++)
            i = queue->nodes[i].prev;
        if (m == 0 || k < m) continue; /* set(newest) != set(mine) */
        for (int64_t j = 0; j < n; j++) {
            uint64_t key = key_at(keys, (size_t)(backwards ? n - 1 - j : j), stride);
            int64_t *first = hkv_map_get(&mine, key);
            if (first && *first) { /* its first time met: moved; later ones are not */
                *first = 0;
                hkv_oset_move_to_end(queue, key);
            }
        }
    }
    hkv_map_free(&mine);
    return 0;
}

_Static_assert(offsetof(hkv_block, key) == 0, "refresh reads a block's key at its start");

/* `EvictionPolicy.after_request`: `refresh_all(stored[::-1])`, then `touch_all(reused[::-1])`
 * (counters only, so their order is moot; keys held aside are not resident and ignored) */
static int s3_after(hkv_expert *e, const hkv_block *stored, int64_t ns, const hkv_block *reused,
                    int64_t nr) {
    s3_t *p = (s3_t *)e;
    if (ns && refresh(p, stored, ns, sizeof *stored, 1) < 0) return -1;
    for (int64_t i = nr; i-- > 0;) s3_touch(p, reused[i].key);
    return 0;
}

static void s3_destroy(hkv_expert *e) {
    s3_t *p = (s3_t *)e;
    hkv_oset *const sets[3] = {&p->small, &p->main, &p->ghost};
    hkv_osets_free(sets, 3);
    free(p);
}

static const hkv_ops S3_OPS = {s3_contains, s3_size, hkv_admit_all, s3_insert,
                               s3_evict, s3_after, s3_destroy};

/* Python's round(x) of a float x >= 0: to the nearest integer, a tie to the even one */
static int64_t round_half_even(double x) {
    int64_t whole = (int64_t)x;
    double frac = x - (double)whole; /* exact */
    if (frac > 0.5 || (frac == 0.5 && (whole & 1))) whole++;
    return whole;
}

/* `make_expert("s3fifo", capacity)`: `S3FIFOPolicy(capacity)`, reset */
hkv_expert *hkv_s3fifo_new(int64_t capacity) {
    s3_t *p = hkv_expert_alloc(sizeof *p, &S3_OPS, capacity);
    if (!p) return NULL;
    int64_t small = round_half_even(0.1 * (double)capacity);
    p->small_target = small > 1 ? small : 1;
    p->ghost_blocks = capacity - p->small_target > 1 ? capacity - p->small_target : 1;
    hkv_oset *const sets[3] = {&p->small, &p->main, &p->ghost};
    if (hkv_osets_init(sets, 3, (size_t)capacity + 1) < 0) {
        free(p);
        return NULL;
    }
    return &p->base;
}

int hkv_s3fifo_queues(hkv_expert *e, const hkv_oset **sets, const char **names) {
    if (e->ops != &S3_OPS) return 0;
    s3_t *p = (s3_t *)e;
    const hkv_oset *mine[3] = {&p->small, &p->main, &p->ghost};
    static const char *const labels[3] = {"small", "main", "ghost"};
    for (int i = 0; i < 3; i++) {
        sets[i] = mine[i];
        names[i] = labels[i];
    }
    return 3;
}

/* ---- "s3fifo" run as `auto`'s live leader (leader.c, through lru.c's `hkv_queue_*`) ---- */

int hkv_s3_is(const hkv_expert *e) { return e->ops == &S3_OPS; }

/* S then M, each oldest first */
int hkv_s3_sets(hkv_expert *e, hkv_oset **sets) {
    s3_t *p = (s3_t *)e;
    sets[0] = &p->small;
    sets[1] = &p->main;
    return 2;
}

/* `S3FIFOPolicy.touch_all` (counters up, absent keys ignored) or its `refresh_all` of `keys` in
 * the given order (each deque's keys, where they are its newest, re-queued in that order, a
 * key given twice where first given): 0, or -1 OOM */
int hkv_s3_touch(hkv_expert *e, const uint64_t *keys, int64_t n, int refreshing) {
    s3_t *p = (s3_t *)e;
    if (refreshing) return refresh(p, keys, n, sizeof *keys, 0);
    for (int64_t i = 0; i < n; i++) s3_touch(p, keys[i]);
    return 0;
}

int hkv_s3_after(hkv_expert *e, const hkv_block *stored, int64_t ns, const hkv_block *reused,
                 int64_t nr) {
    return s3_after(e, stored, ns, reused, nr);
}

/* a deep copy deciding alike (S, M and G with their counters); NULL out of memory */
hkv_expert *hkv_s3_clone(hkv_expert *e) {
    s3_t *p = (s3_t *)e, *twin = (s3_t *)hkv_s3fifo_new(e->capacity);
    if (!twin) return NULL;
    const hkv_oset *from[3] = {&p->small, &p->main, &p->ghost};
    hkv_oset *to[3] = {&twin->small, &twin->main, &twin->ghost};
    for (int q = 0; q < 3; q++)
        for (int32_t i = from[q]->head; i >= 0; i = from[q]->nodes[i].next)
            if (hkv_oset_push_back(to[q], from[q]->nodes[i].key, from[q]->nodes[i].val) < 0) {
                s3_destroy(&twin->base);
                return NULL;
            }
    return &twin->base;
}
