/* `VllmTier(expert, refuses=False)` (hkv/policies/tier.py) over 64-bit keys: a request's hits,
 * then its store as vLLM's CPU tier stores it behind hkv's adapter. */
#include <stdlib.h>

#include "shadow.h"

int hkv_tier_init(hkv_tier *t, hkv_expert *expert) {
    t->expert = expert;
    return hkv_oset_init(&t->aside, 64);
}

void hkv_tier_free(hkv_tier *t) {
    if (t->expert) t->expert->ops->destroy(t->expert);
    t->expert = NULL;
    hkv_oset_free(&t->aside);
}

static inline int held(hkv_tier *t, uint64_t key) {
    return t->expert->ops->contains(t->expert, key) || hkv_oset_has(&t->aside, key);
}

/* Make room for n blocks: the ones aside first (oldest first, unprotected), then the expert's
 * victims. 1 done, 0 not possible (nothing changed), -1 error. */
static int make_room(hkv_tier *t, int64_t n, const hkv_map *protected) {
    hkv_oset *aside = &t->aside;
    int64_t first = 0;
    int32_t i;
    for (i = aside->head; i >= 0 && first < n; i = aside->nodes[i].next)
        if (!hkv_map_get(protected, aside->nodes[i].key)) first++;
    if (first < n) {
        int r = t->expert->ops->evict(t->expert, n - first, protected);
        if (r <= 0) return r;
    }
    for (i = aside->head; i >= 0 && first > 0;) {
        int32_t next = aside->nodes[i].next;
        if (!hkv_map_get(protected, aside->nodes[i].key)) {
            hkv_oset_del_node(aside, i);
            first--;
        }
        i = next;
    }
    return 1;
}

typedef struct {
    hkv_block *reused, *taken, *declined;
    int64_t n_reused, n_taken, n_declined;
    hkv_map protected; /* the request's keys (also: a key met again in the request) */
} scratch;

static int scratch_init(scratch *s, int64_t n) {
    s->reused = malloc((size_t)(3 * n + 3) * sizeof(hkv_block));
    if (!s->reused) return -1;
    s->taken = s->reused + n + 1;
    s->declined = s->taken + n + 1;
    s->n_reused = s->n_taken = s->n_declined = 0;
    if (hkv_map_init(&s->protected, (size_t)n) < 0) {
        free(s->reused);
        return -1;
    }
    return 0;
}

static void scratch_free(scratch *s) {
    free(s->reused);
    hkv_map_free(&s->protected);
}

/* `VllmTier.store`: 0, or -1 on error */
static int store(hkv_tier *t, const hkv_block *blocks, int64_t n, scratch *s) {
    hkv_expert *e = t->expert;
    const hkv_ops *ops = e->ops;
    for (int64_t i = 0; i < n; i++) {
        const hkv_block *b = &blocks[i];
        int first = hkv_map_put(&s->protected, b->key, 1);
        if (first < 0) return -1;
        if (held(t, b->key)) { /* nothing is stored before the loop ends: held stays held */
            s->reused[s->n_reused++] = *b;
            continue;
        }
        if (!first) continue; /* met before in the request, not held: taken or declined */
        int ok = ops->admit(e, b);
        if (ok < 0) return -1;
        if (ok) s->taken[s->n_taken++] = *b;
        else s->declined[s->n_declined++] = *b;
    }
    int64_t size = ops->size(e) + hkv_oset_len(&t->aside);
    int64_t room = size + s->n_taken + s->n_declined - e->capacity;
    if (room > 0) {
        int r = make_room(t, room, &s->protected);
        if (r < 0) return -1;
        if (r == 0) return ops->after_request(e, NULL, 0, s->reused, s->n_reused);
    }
    for (int64_t i = 0; i < s->n_taken; i++)
        if (ops->insert(e, &s->taken[i]) < 0) return -1;
    for (int64_t i = 0; i < s->n_declined; i++)
        if (hkv_oset_push_back(&t->aside, s->declined[i].key, 0) < 0) return -1;
    return ops->after_request(e, s->taken, s->n_taken, s->reused, s->n_reused);
}

int64_t hkv_tier_replay(hkv_tier *t, const hkv_block *blocks, int64_t n) {
    int64_t hits = 0;
    while (hits < n && held(t, blocks[hits].key)) hits++;
    scratch s;
    if (scratch_init(&s, n) < 0) return -1;
    int r = store(t, blocks, n, &s);
    scratch_free(&s);
    return r < 0 ? -1 : hits;
}
