/* hkv's native shadow tiers: the experts of `auto` replayed in C, keys only.
 *
 * Each expert here makes the decisions its Python policy makes (hkv/policies/<name>.py) in a
 * `VllmTier` (hkv/policies/tier.py), on 64-bit key ids instead of Python keys; the tests replay
 * the same requests through both and compare every request's hits (tests/test_native_shadows.py).
 * No block is ever pinned in a shadow: the Python side falls back where one is.
 */
#ifndef HKV_SHADOW_H
#define HKV_SHADOW_H

#include <stddef.h>
#include <stdint.h>

/* One block of a request, as a shadow sees it. */
typedef struct {
    uint64_t key;     /* 64 well-spread bits of the block's key (`native.key_bits`) */
    int64_t position; /* BlockMeta.position */
    int64_t tokens;   /* BlockMeta.tokens */
    double worth;     /* the expert's `value(meta)` where Python computes it (cost_aware), else 0 */
    int32_t modality; /* 0 text, 1 vision, 2 audio (`predictive`'s feature) */
} hkv_block;

/* ---- u64 -> int64 hash map (open addressing, linear probing, backward-shift delete) ----
 * A slot holds its key mixed (`hkv_mix`, a bijection: every bit of the key moves every bit of
 * the slot) beside its value, one cache line a probe; its home is the mixed key's low bits, so a
 * deletion's shift and a growth read it instead of hashing again; the use of each slot is a
 * byte array (a clear is one memset of a byte a slot). Read a slot's key with `hkv_map_key`. */
typedef struct {
    uint64_t key; /* hkv_mix(key) */
    int64_t val;
} hkv_slot;

typedef struct {
    hkv_slot *slots;
    uint8_t *used;
    size_t cap; /* a power of two */
    size_t len;
} hkv_map;

int hkv_map_init(hkv_map *m, size_t hint); /* 0, or -1 out of memory */
void hkv_map_free(hkv_map *m);
void hkv_map_clear(hkv_map *m);
int hkv_map_copy(hkv_map *dst, const hkv_map *src); /* dst uninitialised: 0, or -1 OOM */
int hkv_map_put(hkv_map *m, uint64_t key, int64_t val); /* 1 inserted, 0 overwritten, -1 OOM */
int hkv_map_del(hkv_map *m, uint64_t key, int64_t *old); /* 1 removed (old set), 0 absent */

/* MurmurHash3's 64-bit finalizer: ids are spread in the engine (a digest's first bytes), but not
 * always (8-byte big-endian block numbers, as a replay makes them, leave the low bits of an id
 * zero), and a map whose keys share a slot probes linearly through all of them. */
static inline uint64_t hkv_mix(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return h;
}

/* `hkv_mix`'s inverse (x ^= x >> 33 is its own; the odd multipliers' inverses mod 2^64) */
static inline uint64_t hkv_unmix(uint64_t h) {
    h ^= h >> 33;
    h *= 0x9cb4b2f8129337dbull;
    h ^= h >> 33;
    h *= 0x4f74430c22a54005ull;
    h ^= h >> 33;
    return h;
}

/* the key of used slot i */
static inline uint64_t hkv_map_key(const hkv_map *m, size_t i) {
    return hkv_unmix(m->slots[i].key);
}

/* the value's slot, NULL if absent (inline: the shadows' hottest call) */
static inline int64_t *hkv_map_get(const hkv_map *m, uint64_t key) {
    uint64_t h = hkv_mix(key);
    size_t mask = m->cap - 1, i = (size_t)h & mask;
    while (m->used[i]) {
        if (m->slots[i].key == h) return &m->slots[i].val;
        i = (i + 1) & mask;
    }
    return NULL;
}

/* ---- ordered set: keys in insertion order with a payload, O(1) push/move/delete (a Python
 * dict or OrderedDict of keys: iteration from the front is the oldest first) ---- */
typedef struct {
    uint64_t key;
    int64_t val;
    int32_t prev, next; /* node indices, -1 at the ends */
} hkv_onode;

typedef struct {
    hkv_map index; /* key -> node index */
    hkv_onode *nodes;
    int32_t cap, used, free_head; /* nodes allocated, nodes ever used, free list */
    int32_t head, tail;           /* oldest, newest; -1 when empty */
    int64_t len;
} hkv_oset;

int hkv_oset_init(hkv_oset *s, size_t hint);
void hkv_oset_free(hkv_oset *s);
static inline int64_t hkv_oset_len(const hkv_oset *s) { return s->len; }
static inline int hkv_oset_has(const hkv_oset *s, uint64_t key) { /* (empty: no key hashed) */
    return s->len && hkv_map_get(&s->index, key) != NULL;
}
int32_t hkv_oset_find(const hkv_oset *s, uint64_t key); /* node index or -1 */
int hkv_oset_push_back(hkv_oset *s, uint64_t key, int64_t val);  /* key must be absent; -1 OOM */
int hkv_oset_push_front(hkv_oset *s, uint64_t key, int64_t val); /* key must be absent; -1 OOM */
int hkv_oset_move_to_end(hkv_oset *s, uint64_t key);             /* 1 moved, 0 absent */
int hkv_oset_del(hkv_oset *s, uint64_t key, int64_t *val);       /* 1 removed, 0 absent */
void hkv_oset_del_node(hkv_oset *s, int32_t node);
int hkv_oset_pop_front(hkv_oset *s, uint64_t *key, int64_t *val); /* 1, or 0 when empty */
int64_t *hkv_oset_val(const hkv_oset *s, uint64_t key);          /* NULL if absent */
/* iteration: for (i = s->head; i >= 0; i = s->nodes[i].next) ... (reversed: tail / prev) */
/* `n` ordered sets at once, each for `hint` keys: 0, or -1 with none left allocated */
int hkv_osets_init(hkv_oset *const *sets, int n, size_t hint);
void hkv_osets_free(hkv_oset *const *sets, int n);

/* ---- binary min-heap of (priority, seq, key), ordered by priority then seq ---- */
typedef struct {
    double priority;
    int64_t seq;
    uint64_t key;
} hkv_item;

typedef struct {
    hkv_item *items;
    size_t len, cap;
} hkv_heap;

int hkv_heap_init(hkv_heap *h, size_t hint);
void hkv_heap_free(hkv_heap *h);
int hkv_heap_push(hkv_heap *h, hkv_item item); /* -1 OOM */
int hkv_heap_reserve(hkv_heap *h);              /* room for one more item: 0, or -1 OOM */
hkv_item hkv_heap_pop(hkv_heap *h);            /* must not be empty */
void hkv_heapify(hkv_heap *h);
int hkv_heap_copy(hkv_heap *dst, const hkv_heap *src); /* dst uninitialised: 0, or -1 OOM */

/* ---- an expert: one policy's state, called the way `VllmTier` calls a policy ---- */
typedef struct hkv_expert hkv_expert;

typedef struct {
    int (*contains)(hkv_expert *, uint64_t key);
    int64_t (*size)(hkv_expert *); /* resident keys */
    /* a miss offered for storage, in prefix order: 1 admit, 0 decline, -1 error */
    int (*admit)(hkv_expert *, const hkv_block *);
    /* make the block resident (absent, with room): 0, or -1 error */
    int (*insert)(hkv_expert *, const hkv_block *);
    /* evict exactly n resident keys none of which is in `protected` (keys of the request
     * being stored); 1 done, 0 not possible and nothing changed, -1 error */
    int (*evict)(hkv_expert *, int64_t n, const hkv_map *protected);
    /* `EvictionPolicy.after_request(stored, reused)`, each in prefix order: -1 error */
    int (*after_request)(hkv_expert *, const hkv_block *stored, int64_t n_stored,
                         const hkv_block *reused, int64_t n_reused);
    void (*destroy)(hkv_expert *);
} hkv_ops;

struct hkv_expert {
    const hkv_ops *ops;
    int64_t capacity;
};

/* an expert's struct of `size` bytes (its first member a hkv_expert) with ops and capacity
 * set, the rest uninitialised; NULL when out of memory */
void *hkv_expert_alloc(size_t size, const hkv_ops *ops, int64_t capacity);
/* `admit` of an expert that admits everything (the base policy's) */
int hkv_admit_all(hkv_expert *e, const hkv_block *b);

/* constructors (NULL when out of memory); the Python labels of `shadow.EXPERTS` */
hkv_expert *hkv_lru_new(int64_t capacity);           /* "lru" */
hkv_expert *hkv_lip_new(int64_t capacity);           /* "lip": bip, bip_every 0 */
hkv_expert *hkv_st2_new(int64_t capacity);           /* "lru+st2": StoreThreshold(lru, 2) */
hkv_expert *hkv_arc_new(int64_t capacity);           /* "arc" */
hkv_expert *hkv_s3fifo_new(int64_t capacity);        /* "s3fifo", default fields */
/* "depth_lfu" (aging 1, bypass 0), "depth_lfu_static" (aging 0, bypass 0), "cost_aware"
 * (aging 1, bypass 1, worth from hkv_block.worth: use_worth 1) */
hkv_expert *hkv_prefix_new(int64_t capacity, int aging, int bypass, int use_worth,
                           double history_factor);
hkv_expert *hkv_predictive_new(int64_t capacity); /* "predictive", default fields */
/* a `predictive` expert's resident keys, its averse and friendly queues, into `sets`: 2, or 0
 * where `e` is another expert */
int hkv_predictive_sets(hkv_expert *e, const hkv_oset **sets);

/* A prefix-value expert's state, read where `auto` hands a leader rebuilt in C to Python
 * (`PrefixValuePolicy` fields: `_seq`, `inflation`, ...); the maps stay the expert's. */
typedef struct {
    int64_t seq, refs_until_halving, last_position, size;
    double inflation, epoch_inflation, chain_cap;
    const hkv_map *counts, *epoch, *pending; /* pending: key -> the priority's bits */
} hkv_prefix_state;

/* a prefix-value expert's deep copy, deciding alike from here on: NULL out of memory */
hkv_expert *hkv_prefix_clone(const hkv_expert *e);
/* 1 with *state filled where `e` is a prefix-value expert (hkv_prefix_new), else 0 */
int hkv_prefix_state_of(hkv_expert *e, hkv_prefix_state *state);
/* its resident entries into arrays of state.size: keys, seqs, priorities (NULL: not wanted) */
void hkv_prefix_entries(hkv_expert *e, uint64_t *keys, int64_t *seqs, double *priorities);

/* A queue expert's ordered sets, front (oldest) first, with their payloads: lru "order";
 * lip "cold", "warm"; lru+st2 "order" and its offer tracker "counts" (key -> offers); arc "t1",
 * "t2", "b1", "b2" and its T1 target in *target; s3fifo "small", "main" (key -> hits),
 * "ghost". Up to HKV_QUEUES into `sets` and `names`; how many, 0 where `e` is none of them. */
#define HKV_QUEUES 4
int hkv_queues_of(hkv_expert *e, const hkv_oset **sets, const char **names, double *target);
int hkv_arc_queues(hkv_expert *e, const hkv_oset **sets, const char **names, double *target);
int hkv_s3fifo_queues(hkv_expert *e, const hkv_oset **sets, const char **names);

/* A prefix-value expert run as `auto`'s live leader (leader.c), beyond the shadow's calls:
 * `evict` with a protection test `guard(ctx, key)` (1 protected, 0 not, -1 error: nothing
 * changes) and its victims, in eviction order, into *victims (valid until the next call): 1
 * done, 0 not possible, -1 error; `remove`: 1 removed, 0 absent; `touch_all` (refresh 0) or
 * `refresh_all` (refresh 1) of `PrefixValuePolicy`: 0, or -1 OOM. */
int hkv_prefix_evict_where(hkv_expert *e, int64_t n, int (*guard)(void *, uint64_t), void *ctx,
                           const hkv_item **victims);
int hkv_prefix_remove(hkv_expert *e, uint64_t key);
int hkv_prefix_touch(hkv_expert *e, const uint64_t *keys, int64_t n, int refresh);

/* lru, lip and lru+st2 run as `auto`'s live leader (leader.c), as `QueuePolicy` runs them:
 * whether `e` is one; its resident keys into `keys` (room for its size), how many; `remove`: 1
 * removed, 0 absent; `touch_all` (refresh 0) or `refresh_all` (1) of resident keys: 0, or -1
 * OOM; `evict` with a protection test, as `hkv_prefix_evict_where`, its victims in eviction
 * order into `victims` (room for n); `after_request` of resident keys without lru+st2's offers;
 * those offers (`StoreThreshold`'s count of each tracked key, resident or not; a no-op for the
 * others): 0, or -1 OOM; a deep copy deciding alike (NULL out of memory). */
int hkv_queue_leader(const hkv_expert *e);
int64_t hkv_queue_entries(hkv_expert *e, uint64_t *keys);
/* its queues in eviction order, each walked from its back (backwards[q] 1) or front: how many */
int hkv_queue_sets(hkv_expert *e, hkv_oset **sets, int *backwards);
int hkv_queue_remove(hkv_expert *e, uint64_t key);
int hkv_queue_touch(hkv_expert *e, const uint64_t *keys, int64_t n, int refresh);
int hkv_queue_evict_where(hkv_expert *e, int64_t n, int (*guard)(void *, uint64_t), void *ctx,
                          uint64_t *victims);
int hkv_queue_after(hkv_expert *e, const hkv_block *stored, int64_t ns, const hkv_block *reused,
                    int64_t nr);
int hkv_queue_offers(hkv_expert *e, const uint64_t *keys, int64_t n);
int hkv_queue_tracks_offers(const hkv_expert *e); /* lru+st2: offers to count */
hkv_expert *hkv_queue_clone(hkv_expert *e);
/* s3fifo as one of them (s3fifo.c): its eviction is not a walk, so these answer for it */
int hkv_s3_is(const hkv_expert *e);
int hkv_s3_sets(hkv_expert *e, hkv_oset **sets); /* S, M: oldest first */
int hkv_s3_touch(hkv_expert *e, const uint64_t *keys, int64_t n, int refresh);
int hkv_s3_evict_where(hkv_expert *e, int64_t n, int (*guard)(void *, uint64_t), void *ctx,
                       uint64_t *victims);
int hkv_s3_after(hkv_expert *e, const hkv_block *stored, int64_t ns, const hkv_block *reused,
                 int64_t nr);
hkv_expert *hkv_s3_clone(hkv_expert *e);

/* ---- the tier: `VllmTier(expert, refuses=False)` ---- */
typedef struct {
    hkv_expert *expert;
    hkv_oset aside; /* declined but stored: evicted first, oldest first */
} hkv_tier;

int hkv_tier_init(hkv_tier *t, hkv_expert *expert);
/* whether the tier holds `key`: its expert's, or aside */
static inline int hkv_tier_holds(hkv_tier *t, uint64_t key) {
    return t->expert->ops->contains(t->expert, key) || hkv_oset_has(&t->aside, key);
}
void hkv_tier_free(hkv_tier *t);

/* One request as every tier stores it, worked out once: its keys (the protection of an
 * eviction), whether each block is the first of its key in it, and the tiers' scratch. */
typedef struct {
    const hkv_block *blocks;
    int64_t n, cap;
    hkv_map keys;
    uint8_t *first;
    hkv_block *scratch; /* 3 x cap: a tier's reused, taken and declined blocks */
} hkv_request;

void hkv_request_init(hkv_request *r); /* empty; nothing allocated */
void hkv_request_free(hkv_request *r);
/* the request of `n` blocks (kept by reference until the next call): 0, or -1 OOM */
int hkv_request_set(hkv_request *r, const hkv_block *blocks, int64_t n);
/* `replay_request`: the request's prefix hits, then its store; -1 on error */
int64_t hkv_tier_replay(hkv_tier *t, const hkv_request *r);
/* its two halves: the prefix hits (nothing changes), then the store of the request whose first
 * `known` blocks were hits: 0, or -1 on error */
int64_t hkv_tier_hits(hkv_tier *t, const hkv_request *r);
int hkv_tier_store(hkv_tier *t, const hkv_request *r, int64_t known);

#endif
