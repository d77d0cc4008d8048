/* The "arc" expert: `ARCPolicy` (hkv/policies/arc.py, on hkv/policies/queue.py), its T1/T2
 * queues and B1/B2 ghost lists as ordered sets, each LRU first; the T1 target a double, as
 * Python's float. */
#include <stdlib.h>

#include "shadow.h"

typedef struct {
    hkv_expert base;
    double target; /* `target_t1_blocks` */
    hkv_oset t1, t2; /* resident: seen once, seen again (LRU first) */
    hkv_oset b1, b2; /* ghosts of T1 and T2 (oldest first), each at most `capacity` keys */
} arc_t;

static int arc_contains(hkv_expert *e, uint64_t key) {
    arc_t *p = (arc_t *)e;
    return hkv_oset_has(&p->t1, key) || hkv_oset_has(&p->t2, key);
}

static int64_t arc_size(hkv_expert *e) {
    arc_t *p = (arc_t *)e;
    return hkv_oset_len(&p->t1) + hkv_oset_len(&p->t2);
}

/* `ARCPolicy._adapt_to_ghost_hit`: a key in B1 raises the T1 target, one in B2 lowers it */
static void adapt_to_ghost_hit(arc_t *p, uint64_t key) {
    if (hkv_oset_has(&p->b1, key)) {
        double delta = (double)hkv_oset_len(&p->b2) / (double)hkv_oset_len(&p->b1);
        if (delta < 1.0) delta = 1.0;                        /* max(1.0, ...) */
        double raised = p->target + delta;                   /* min(..., capacity) */
        double cap = (double)p->base.capacity;
        p->target = cap < raised ? cap : raised;
        hkv_oset_move_to_end(&p->b1, key);
    } else if (hkv_oset_has(&p->b2, key)) {
        double delta = (double)hkv_oset_len(&p->b1) / (double)hkv_oset_len(&p->b2);
        if (delta < 1.0) delta = 1.0;
        double lowered = p->target - delta;                  /* max(..., 0.0) */
        p->target = lowered < 0.0 ? 0.0 : lowered;
        hkv_oset_move_to_end(&p->b2, key);
    }
}

/* `ARCPolicy.admit`: adapt on a ghost hit, admit everything */
static int arc_admit(hkv_expert *e, const hkv_block *b) {
    adapt_to_ghost_hit((arc_t *)e, b->key);
    return 1;
}

/* `ARCPolicy.insert`: into T1's MRU end, forgotten by both ghost lists */
static int arc_insert(hkv_expert *e, const hkv_block *b) {
    arc_t *p = (arc_t *)e;
    if (hkv_oset_push_back(&p->t1, b->key, 0) < 0) return -1;
    hkv_oset_del(&p->b1, b->key, NULL);
    hkv_oset_del(&p->b2, b->key, NULL);
    return 0;
}

/* `ARCPolicy.touch`: T1 -> T2's MRU end, T2 -> its MRU end, else a ghost hit adapts */
static int arc_touch(arc_t *p, uint64_t key) {
    if (hkv_oset_del(&p->t1, key, NULL)) return hkv_oset_push_back(&p->t2, key, 0);
    if (hkv_oset_move_to_end(&p->t2, key)) return 0;
    adapt_to_ghost_hit(p, key);
    return 0;
}

/* `next(_evictable(queue, protected, chosen), None)`: the node at or after *cursor that is not
 * protected (the generator yields each of its own queue's keys once, so `chosen` never bites);
 * -1 once exhausted, for good */
static int32_t next_evictable(const hkv_oset *q, int32_t *cursor, const hkv_map *protected) {
    int32_t i = *cursor;
    while (i >= 0 && hkv_map_get(protected, q->nodes[i].key)) i = q->nodes[i].next;
    *cursor = i >= 0 ? q->nodes[i].next : -1;
    return i;
}

/* `ARCPolicy.evict` (`evict_chains` with no stand_in): T1's LRU block while T1 is at or above
 * int(target), else T2's, falling back to the other; evicted keys join their ghost list */
static int arc_evict(hkv_expert *e, int64_t n, const hkv_map *protected) {
    arc_t *p = (arc_t *)e;
    if (n <= 0) return 1;
    int32_t *picks = malloc((size_t)n * sizeof *picks);
    uint8_t *from_t1 = malloc((size_t)n);
    if (!picks || !from_t1) {
        free(picks);
        free(from_t1);
        return -1;
    }
    int32_t c1 = p->t1.head, c2 = p->t2.head;
    int64_t t1_size = hkv_oset_len(&p->t1);
    int64_t target = (int64_t)p->target; /* int(): truncation, target >= 0 */
    int ok = 1;
    for (int64_t k = 0; k < n; k++) {
        int32_t node = -1;
        int in_t1 = 0;
        if (t1_size >= target && (node = next_evictable(&p->t1, &c1, protected)) >= 0) in_t1 = 1;
        if (node < 0) node = next_evictable(&p->t2, &c2, protected);
        if (node < 0 && (node = next_evictable(&p->t1, &c1, protected)) >= 0) in_t1 = 1;
        if (node < 0) {
            ok = 0; /* None: nothing changed */
            break;
        }
        t1_size -= in_t1;
        picks[k] = node;
        from_t1[k] = (uint8_t)in_t1;
    }
    if (ok) {
        for (int64_t k = 0; k < n; k++) {
            hkv_oset *queue = from_t1[k] ? &p->t1 : &p->t2;
            hkv_oset *ghost = from_t1[k] ? &p->b1 : &p->b2;
            uint64_t key = queue->nodes[picks[k]].key;
            hkv_oset_del_node(queue, picks[k]);
            if (hkv_oset_push_back(ghost, key, 0) < 0) {
                ok = -1;
                break;
            }
        }
        while (hkv_oset_len(&p->b1) > p->base.capacity) hkv_oset_pop_front(&p->b1, NULL, NULL);
        while (hkv_oset_len(&p->b2) > p->base.capacity) hkv_oset_pop_front(&p->b2, NULL, NULL);
    }
    free(picks);
    free(from_t1);
    return ok;
}

/* `ARCPolicy.after_request`: the stored keys re-ranked tail first in each of T1 and T2
 * (`QueuePolicy.refresh_all`), then the reused keys still resident touched tail first (a
 * reused key held aside, or gone, is no ghost hit) */
static int arc_after(hkv_expert *e, const hkv_block *stored, int64_t ns, const hkv_block *reused,
                     int64_t nr) {
    arc_t *p = (arc_t *)e;
    for (int64_t i = ns; i-- > 0;) hkv_oset_move_to_end(&p->t1, stored[i].key);
    for (int64_t i = ns; i-- > 0;) hkv_oset_move_to_end(&p->t2, stored[i].key);
    /* residency is the same before and after each touch, so filtering as we go is Python's
     * filtering first */
    for (int64_t i = nr; i-- > 0;)
        if (arc_contains(e, reused[i].key) && arc_touch(p, reused[i].key) < 0) return -1;
    return 0;
}

static void arc_destroy(hkv_expert *e) {
    arc_t *p = (arc_t *)e;
    hkv_oset *const sets[4] = {&p->t1, &p->t2, &p->b1, &p->b2};
    hkv_osets_free(sets, 4);
    free(p);
}

static const hkv_ops ARC_OPS = {arc_contains, arc_size, arc_admit, arc_insert,
                                arc_evict, arc_after, arc_destroy};

/* `make_expert("arc", capacity)`: `ARCPolicy(capacity)`, reset */
hkv_expert *hkv_arc_new(int64_t capacity) {
    arc_t *p = hkv_expert_alloc(sizeof *p, &ARC_OPS, capacity);
    if (!p) return NULL;
    p->target = 0.0;
    hkv_oset *const sets[4] = {&p->t1, &p->t2, &p->b1, &p->b2};
    if (hkv_osets_init(sets, 4, (size_t)capacity + 1) < 0) {
        free(p);
        return NULL;
    }
    return &p->base;
}

int hkv_arc_queues(hkv_expert *e, const hkv_oset **sets, const char **names, double *target) {
    if (e->ops != &ARC_OPS) return 0;
    arc_t *p = (arc_t *)e;
    const hkv_oset *mine[4] = {&p->t1, &p->t2, &p->b1, &p->b2};
    static const char *const labels[4] = {"t1", "t2", "b1", "b2"};
    for (int i = 0; i < 4; i++) {
        sets[i] = mine[i];
        names[i] = labels[i];
    }
    *target = p->target;
    return 4;
}
