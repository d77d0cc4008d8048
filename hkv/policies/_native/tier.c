/* `VllmTier(expert, refuses=False)` (hkv/policies/tier.py) over 64-bit keys: a request's hits,
 * then its store as vLLM's CPU tier stores it behind hkv's adapter. */
#include <stdlib.h>
#include <string.h>

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

void hkv_request_init(hkv_request *r) { memset(r, 0, sizeof *r); }

void hkv_request_free(hkv_request *r) {
    if (r->cap) hkv_map_free(&r->keys);
    free(r->first);
    free(r->scratch);
    hkv_request_init(r);
}

int hkv_request_set(hkv_request *r, const hkv_block *blocks, int64_t n) {
    /* sized for this request: grown when short, shrunk after a much longer one (clearing the
     * keys' map costs its whole size) */
    if (n > r->cap || (r->cap > 1024 && r->cap > 8 * n)) {
        hkv_request_free(r);
        int64_t cap = n > 32 ? n : 32;
        r->first = malloc((size_t)cap);
        r->scratch = malloc((size_t)(3 * cap) * sizeof *r->scratch);
        if (!r->first || !r->scratch || hkv_map_init(&r->keys, (size_t)cap) < 0) {
            free(r->first);
            free(r->scratch);
            hkv_request_init(r);
            return -1;
        }
        r->cap = cap;
    } else {
        hkv_map_clear(&r->keys);
    }
    r->blocks = blocks;
    r->n = n;
    for (int64_t i = 0; i < n; i++) {
        int first = hkv_map_put(&r->keys, blocks[i].key, 1);
        if (first < 0) return -1;
        r->first[i] = (uint8_t)first;
    }
    return 0;
}

/* `VllmTier.store` (its first `known` blocks held, as found): 0, or -1 on error */
int hkv_tier_store(hkv_tier *t, const hkv_request *r, int64_t known) {
    hkv_expert *e = t->expert;
    const hkv_ops *ops = e->ops;
    hkv_block *reused = r->scratch, *taken = reused + r->cap, *declined = taken + r->cap;
    int64_t n_reused = 0, n_taken = 0, n_declined = 0;
    for (int64_t i = 0; i < r->n; i++) {
        const hkv_block *b = &r->blocks[i];
        if (i < known || hkv_tier_holds(t, b->key)) { /* nothing is stored before the loop ends */
            reused[n_reused++] = *b;
            continue;
        }
        if (!r->first[i]) continue; /* met before in the request, not held: taken or declined */
        int ok = ops->admit(e, b);
        if (ok < 0) return -1;
        if (ok) taken[n_taken++] = *b;
        else declined[n_declined++] = *b;
    }
    int64_t size = ops->size(e) + hkv_oset_len(&t->aside);
    int64_t room = size + n_taken + n_declined - e->capacity;
    if (room > 0) {
        int done = make_room(t, room, &r->keys);
        if (done < 0) return -1;
        if (done == 0) return ops->after_request(e, NULL, 0, reused, n_reused);
    }
    for (int64_t i = 0; i < n_taken; i++)
        if (ops->insert(e, &taken[i]) < 0) return -1;
    for (int64_t i = 0; i < n_declined; i++)
        if (hkv_oset_push_back(&t->aside, declined[i].key, 0) < 0) return -1;
    return ops->after_request(e, taken, n_taken, reused, n_reused);
}

int64_t hkv_tier_hits(hkv_tier *t, const hkv_request *r) {
    int64_t hits = 0;
    while (hits < r->n && hkv_tier_holds(t, r->blocks[hits].key)) hits++;
    return hits;
}

int64_t hkv_tier_replay(hkv_tier *t, const hkv_request *r) {
    int64_t hits = hkv_tier_hits(t, r);
    return hkv_tier_store(t, r, hits) < 0 ? -1 : hits;
}
