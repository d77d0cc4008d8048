/* The prefix-value experts: `PrefixValuePolicy` (hkv/policies/prefix.py) on `PriorityPolicy`
 * (hkv/policies/priority.py), as "depth_lfu" and "depth_lfu_static" (hkv/policies/depth_lfu.py,
 * bypass off, worth 1 / (1 + position // tokens)) and "cost_aware" (hkv/policies/cost_aware.py,
 * bypass on, its worth computed in Python and handed in as hkv_block.worth).
 *
 * One lazy min-heap of (priority, seq, key): an item is stale when its key is gone or its entry
 * has another seq. Python's parking of the current epoch's items (`_parked`) changes no
 * decision; here `lowest_evictable` parks them the same way (a request's admissions do not step
 * over them again), and they go back at each epoch's start and before each eviction. Floats are
 * computed in Python's order of operations (built with -ffp-contract=off). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "shadow.h"

#define TIE_BREAK 1e-12 /* POSITION_TIE_BREAK */

typedef struct { /* a `PriorityEntry`, with what `_observe` reads of its meta */
    uint64_t key;
    int64_t seq; /* 0: a free slot */
    int64_t position;
    double priority, worth;
} pentry;

typedef struct {
    hkv_expert base;
    int aging, bypass, use_worth;
    int64_t history_refs;    /* `_history_refs()` */
    hkv_map index;           /* `_entries`: resident key -> slot of `pool` */
    pentry *pool;
    int64_t *free_slots, n_free;
    hkv_heap heap;           /* `_heap` */
    size_t heap_limit;       /* `_heap_limit`: then `_compact` */
    hkv_heap parked, popped; /* plain arrays: `_parked`; evict's skipped live items */
    hkv_heap victims;        /* plain array: the last eviction's victims, in order */
    hkv_map counts;          /* `_counts`: key -> references, outliving residency */
    int64_t refs_until_halving, last_position, seq;
    double inflation, epoch_inflation, chain_cap;
    int one_request;
    hkv_map epoch;   /* `_epoch_keys` (kept with bypass only: nothing else reads them) */
    hkv_map pending; /* `_pending`: key -> the observed priority's bits (the count: unread) */
} prefix_t;

static inline pentry *entry_of(const prefix_t *p, uint64_t key) {
    int64_t *slot = hkv_map_get(&p->index, key);
    return slot ? &p->pool[*slot] : NULL;
}

static inline int live(const prefix_t *p, hkv_item item) {
    const pentry *e = entry_of(p, item.key);
    return e && e->seq == item.seq;
}

/* append to an hkv_heap used as a plain array (no sifting): 0, or -1 OOM */
static int append(hkv_heap *a, hkv_item item) {
    if (hkv_heap_reserve(a) < 0) return -1;
    a->items[a->len++] = item;
    return 0;
}

/* `DepthLFUPolicy.value` (position // max(tokens, 1), floored as Python's), or the given worth */
static double worth_of(const prefix_t *p, const hkv_block *b) {
    if (p->use_worth) return b->worth;
    int64_t tokens = b->tokens > 1 ? b->tokens : 1, q = b->position / tokens;
    if (b->position % tokens != 0 && b->position < 0) q--;
    return 1.0 / (double)(1 + q);
}

/* `PriorityPolicy._compact` (and `PrefixValuePolicy._compact`): the heap rebuilt from the
 * entries, one item each, nothing parked. The heap holds more than the capacity: no growth. */
static void compact(prefix_t *p) {
    p->heap.len = 0;
    p->parked.len = 0;
    for (int64_t i = 0; i < p->base.capacity; i++) {
        const pentry *e = &p->pool[i];
        if (e->seq) p->heap.items[p->heap.len++] = (hkv_item){e->priority, e->seq, e->key};
    }
    hkv_heapify(&p->heap);
}

/* `heappush` then the bound of `insert` / `touch_all` */
static int push(prefix_t *p, hkv_item item) {
    if (hkv_heap_push(&p->heap, item) < 0) return -1;
    if (p->heap.len > p->heap_limit) compact(p);
    return 0;
}

/* `PrefixValuePolicy._unpark` */
static int unpark(prefix_t *p) {
    for (size_t i = 0; i < p->parked.len; i++)
        if (hkv_heap_push(&p->heap, p->parked.items[i]) < 0) return -1;
    p->parked.len = 0;
    return 0;
}

/* `PrefixValuePolicy._start_epoch` */
static int start_epoch(prefix_t *p) {
    p->epoch_inflation = p->inflation;
    p->chain_cap = INFINITY;
    hkv_map_clear(&p->epoch);
    return unpark(p);
}

/* `PrefixValuePolicy._halve_counts`: counts of 1 dropped, the others halved */
static int halve_counts(prefix_t *p) {
    hkv_map halved;
    p->refs_until_halving = p->history_refs;
    if (hkv_map_init(&halved, p->counts.len / 2) < 0) return -1;
    for (size_t i = 0; i < p->counts.cap; i++)
        if (p->counts.used[i] && p->counts.slots[i].val > 1 &&
            hkv_map_put(&halved, hkv_map_key(&p->counts, i), p->counts.slots[i].val >> 1) < 0) {
            hkv_map_free(&halved);
            return -1;
        }
    hkv_map_free(&p->counts);
    p->counts = halved;
    return 0;
}

/* `PrefixValuePolicy._observe`: count a reference, its priority into *priority; -1 OOM */
static int observe(prefix_t *p, uint64_t key, int64_t position, double worth, double *priority) {
    int64_t last = p->last_position;
    if ((position < last || (position == last && !p->one_request)) && start_epoch(p) < 0)
        return -1;
    p->last_position = position;
    if (p->bypass && hkv_map_put(&p->epoch, key, 1) < 0) return -1;
    int64_t *slot = hkv_map_get(&p->counts, key), count = slot ? ++*slot : 1;
    if (!slot && hkv_map_put(&p->counts, key, 1) < 0) return -1;
    if (--p->refs_until_halving <= 0 && halve_counts(p) < 0) return -1;
    double raw = p->epoch_inflation + (double)count * worth;
    double cap = p->chain_cap, capped = cap < raw ? cap : raw;
    p->chain_cap = capped;
    *priority = capped - (double)position * TIE_BREAK;
    return 0;
}

/* `PrefixValuePolicy._lowest_evictable`: the lowest live item whose key is not of this epoch
 * (those are parked on the way); 1 found, 0 none, -1 OOM */
static int lowest_evictable(prefix_t *p, double *lowest) {
    while (p->heap.len) {
        hkv_item top = p->heap.items[0];
        if (!live(p, top)) {
            hkv_heap_pop(&p->heap);
        } else if (hkv_map_get(&p->epoch, top.key)) {
            if (append(&p->parked, hkv_heap_pop(&p->heap)) < 0) return -1;
        } else {
            *lowest = top.priority;
            return 1;
        }
    }
    return 0;
}

static int pv_contains(hkv_expert *e, uint64_t key) { return entry_of((prefix_t *)e, key) != NULL; }
static int64_t pv_size(hkv_expert *e) { return (int64_t)((prefix_t *)e)->index.len; }

/* `PrefixValuePolicy.admit` */
static int pv_admit(hkv_expert *e, const hkv_block *b) {
    prefix_t *p = (prefix_t *)e;
    double priority, lowest;
    if (observe(p, b->key, b->position, worth_of(p, b), &priority) < 0) return -1;
    if (p->pending.len > (size_t)e->capacity) hkv_map_clear(&p->pending);
    int admitted = !p->bypass || p->index.len < (size_t)e->capacity;
    if (!admitted) {
        int found = lowest_evictable(p, &lowest);
        if (found < 0) return -1;
        admitted = found && priority >= lowest;
    }
    if (admitted) {
        int64_t bits;
        memcpy(&bits, &priority, sizeof bits);
        if (hkv_map_put(&p->pending, b->key, bits) < 0) return -1;
    }
    return admitted;
}

/* `PrefixValuePolicy.insert`: the priority admit observed, else a reference observed now */
static int pv_insert(hkv_expert *e, const hkv_block *b) {
    prefix_t *p = (prefix_t *)e;
    int64_t bits;
    double priority, worth = worth_of(p, b);
    if (!p->n_free || entry_of(p, b->key)) return -1; /* full, or resident: Python raises */
    if (hkv_map_del(&p->pending, b->key, &bits)) memcpy(&priority, &bits, sizeof priority);
    else if (observe(p, b->key, b->position, worth, &priority) < 0) return -1;
    int64_t slot = p->free_slots[--p->n_free];
    if (hkv_map_put(&p->index, b->key, slot) < 0) {
        p->n_free++;
        return -1;
    }
    p->pool[slot] = (pentry){b->key, ++p->seq, b->position, priority, worth};
    return push(p, (hkv_item){priority, p->seq, b->key});
}

/* `PriorityPolicy.evict` (`_select`, `_restore`, `_commit`) with `_on_evicted`: the n lowest
 * live items that `guard` does not protect, or none of them when fewer (nothing changes but
 * stale items). `guard(ctx, key)`: 1 protected, 0 not, -1 error (then nothing changes either).
 * The victims, in eviction order, are left in p->victims. 1 done, 0 not possible, -1 error. */
static int evict_where(prefix_t *p, int64_t n, int (*guard)(void *, uint64_t), void *ctx) {
    hkv_heap *skipped = &p->popped, *chosen = &p->victims;
    int error = unpark(p) < 0;
    skipped->len = chosen->len = 0;
    while (!error && p->heap.len && (int64_t)chosen->len < n) {
        hkv_item item = hkv_heap_pop(&p->heap);
        if (!live(p, item)) continue;
        int verdict = guard(ctx, item.key);
        error = verdict < 0 || append(verdict ? skipped : chosen, item) < 0;
        if (error && hkv_heap_push(&p->heap, item) < 0) return -1;
    }
    for (size_t i = 0; i < skipped->len; i++)
        if (hkv_heap_push(&p->heap, skipped->items[i]) < 0) return -1;
    if (error || (int64_t)chosen->len < n) {
        for (size_t i = 0; i < chosen->len; i++)
            if (hkv_heap_push(&p->heap, chosen->items[i]) < 0) return -1;
        chosen->len = 0;
        return error ? -1 : 0;
    }
    for (size_t i = 0; i < chosen->len; i++) {
        int64_t slot;
        hkv_map_del(&p->index, chosen->items[i].key, &slot);
        /* `inflated`: max() folds left to right over the victims' entry priorities */
        if (p->aging && p->pool[slot].priority > p->inflation) p->inflation = p->pool[slot].priority;
        p->pool[slot].seq = 0;
        p->free_slots[p->n_free++] = slot;
    }
    return 1;
}

static int in_map(void *map, uint64_t key) { return hkv_map_get((const hkv_map *)map, key) != NULL; }

static int pv_evict(hkv_expert *e, int64_t n, const hkv_map *protected) {
    return evict_where((prefix_t *)e, n, in_map, (void *)protected);
}

/* `PrefixValuePolicy.after_request`: `stored` unread; the resident reused blocks touched in
 * prefix order (`touch_all`, each with its entry's meta) as one request's references */
static int pv_after(hkv_expert *e, const hkv_block *stored, int64_t ns, const hkv_block *reused,
                    int64_t nr) {
    prefix_t *p = (prefix_t *)e;
    (void)stored;
    (void)ns;
    pentry *first = NULL;
    for (int64_t i = 0; i < nr && !first; i++) first = entry_of(p, reused[i].key);
    if (!first) return 0; /* nothing resident: nothing observed */
    if (first->position <= p->last_position && start_epoch(p) < 0) return -1;
    p->last_position = -1;
    p->one_request = 1;
    for (int64_t i = 0; i < nr; i++) {
        pentry *entry = entry_of(p, reused[i].key);
        if (!entry) continue;
        int r = observe(p, entry->key, entry->position, entry->worth, &entry->priority);
        if (r == 0) {
            entry->seq = ++p->seq;
            r = push(p, (hkv_item){entry->priority, entry->seq, entry->key});
        }
        if (r < 0) {
            p->one_request = 0;
            return -1;
        }
    }
    p->one_request = 0;
    return 0;
}

static void pv_destroy(hkv_expert *e) {
    prefix_t *p = (prefix_t *)e;
    hkv_map_free(&p->index);
    free(p->pool);
    free(p->free_slots);
    hkv_heap_free(&p->heap);
    hkv_heap_free(&p->parked);
    hkv_heap_free(&p->popped);
    hkv_heap_free(&p->victims);
    hkv_map_free(&p->counts);
    hkv_map_free(&p->epoch);
    hkv_map_free(&p->pending);
    free(p);
}

static const hkv_ops PREFIX_OPS = {pv_contains, pv_size, pv_admit, pv_insert,
                                   pv_evict, pv_after, pv_destroy};

int hkv_prefix_state_of(hkv_expert *e, hkv_prefix_state *state) {
    if (e->ops != &PREFIX_OPS) return 0;
    const prefix_t *p = (const prefix_t *)e;
    *state = (hkv_prefix_state){
        .seq = p->seq,
        .refs_until_halving = p->refs_until_halving,
        .last_position = p->last_position,
        .size = (int64_t)p->index.len,
        .inflation = p->inflation,
        .epoch_inflation = p->epoch_inflation,
        .chain_cap = p->chain_cap,
        .counts = &p->counts,
        .epoch = &p->epoch,
        .pending = &p->pending,
    };
    return 1;
}

void hkv_prefix_entries(hkv_expert *e, uint64_t *keys, int64_t *seqs, double *priorities) {
    const prefix_t *p = (const prefix_t *)e;
    int64_t n = 0;
    for (int64_t i = 0; i < e->capacity; i++) {
        const pentry *entry = &p->pool[i];
        if (!entry->seq) continue;
        keys[n] = entry->key;
        if (seqs) seqs[n] = entry->seq;
        if (priorities) priorities[n] = entry->priority;
        n++;
    }
}

/* `PrefixValuePolicy.reset` with its fields: see shadow.h for the three labels' arguments */
hkv_expert *hkv_prefix_new(int64_t capacity, int aging, int bypass, int use_worth,
                           double history_factor) {
    if (capacity < 1) return NULL;
    prefix_t *p = calloc(1, sizeof *p); /* zeroed: pv_destroy frees a partial one */
    if (!p) return NULL;
    p->base.ops = &PREFIX_OPS;
    p->base.capacity = capacity;
    p->aging = aging;
    p->bypass = bypass;
    p->use_worth = use_worth;
    int64_t refs = (int64_t)(history_factor * (double)capacity);
    p->history_refs = p->refs_until_halving = refs > 64 ? refs : 64;
    p->heap_limit = 2 * (size_t)capacity + 64;
    p->last_position = -1;
    p->chain_cap = INFINITY;
    p->pool = calloc((size_t)capacity, sizeof *p->pool);
    p->free_slots = malloc((size_t)capacity * sizeof *p->free_slots);
    if (!p->pool || !p->free_slots || hkv_map_init(&p->index, (size_t)capacity + 1) < 0 ||
        hkv_heap_init(&p->heap, p->heap_limit + 1) < 0 || hkv_heap_init(&p->parked, 64) < 0 ||
        hkv_heap_init(&p->popped, 64) < 0 || hkv_heap_init(&p->victims, 64) < 0 ||
        hkv_map_init(&p->counts, 1024) < 0 ||
        hkv_map_init(&p->epoch, 64) < 0 || hkv_map_init(&p->pending, (size_t)capacity + 2) < 0) {
        pv_destroy(&p->base);
        return NULL;
    }
    for (int64_t i = 0; i < capacity; i++) p->free_slots[i] = capacity - 1 - i;
    p->n_free = capacity;
    return &p->base;
}

hkv_expert *hkv_prefix_clone(const hkv_expert *e) {
    const prefix_t *p = (const prefix_t *)e;
    prefix_t *q = calloc(1, sizeof *q); /* zeroed: pv_destroy frees a partial one */
    if (!q) return NULL;
    *q = *p; /* the scalars; every array below is the copy's own */
    q->index = q->counts = q->epoch = q->pending = (hkv_map){0};
    q->heap = q->parked = q->popped = q->victims = (hkv_heap){0};
    size_t cap = (size_t)e->capacity;
    q->pool = malloc(cap * sizeof *q->pool);
    q->free_slots = malloc(cap * sizeof *q->free_slots);
    if (!q->pool || !q->free_slots || hkv_map_copy(&q->index, &p->index) < 0 ||
        hkv_map_copy(&q->counts, &p->counts) < 0 || hkv_map_copy(&q->epoch, &p->epoch) < 0 ||
        hkv_map_copy(&q->pending, &p->pending) < 0 || hkv_heap_copy(&q->heap, &p->heap) < 0 ||
        hkv_heap_copy(&q->parked, &p->parked) < 0 || hkv_heap_copy(&q->popped, &p->popped) < 0 ||
        hkv_heap_copy(&q->victims, &p->victims) < 0) {
        pv_destroy(&q->base);
        return NULL;
    }
    memcpy(q->pool, p->pool, cap * sizeof *q->pool);
    memcpy(q->free_slots, p->free_slots, cap * sizeof *q->free_slots);
    return &q->base;
}

/* ---- a prefix-value expert run as `auto`'s live leader (leader.c) ---- */

int hkv_prefix_evict_where(hkv_expert *e, int64_t n, int (*guard)(void *, uint64_t), void *ctx,
                           const hkv_item **victims) {
    prefix_t *p = (prefix_t *)e;
    int r = evict_where(p, n, guard, ctx);
    *victims = p->victims.items;
    return r;
}

int hkv_prefix_remove(hkv_expert *e, uint64_t key) {
    prefix_t *p = (prefix_t *)e;
    int64_t slot;
    if (!hkv_map_del(&p->index, key, &slot)) return 0;
    p->pool[slot].seq = 0; /* its heap items are stale now, as `_entries.pop` leaves them */
    p->free_slots[p->n_free++] = slot;
    return 1;
}

int hkv_prefix_touch(hkv_expert *e, const uint64_t *keys, int64_t n, int refresh) {
    prefix_t *p = (prefix_t *)e;
    for (int64_t i = 0; i < n; i++) {
        pentry *entry = entry_of(p, keys[i]);
        if (!entry) continue;
        /* `touch_all`: a reference observed; `refresh_all`: a new seq at the same priority */
        if (!refresh && observe(p, entry->key, entry->position, entry->worth, &entry->priority) < 0)
            return -1;
        entry->seq = ++p->seq;
        if (push(p, (hkv_item){entry->priority, entry->seq, entry->key}) < 0) return -1;
    }
    return 0;
}
