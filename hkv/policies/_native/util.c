/* The containers of hkv's native shadows: a u64 hash map, an ordered set, a 4-ary heap. */
#include <stdlib.h>
#include <string.h>

#include "shadow.h"

int hkv_map_init(hkv_map *m, size_t hint) {
    size_t cap = 16;
    while (cap < 2 * hint + 2) cap <<= 1;
    m->slots = malloc(cap * sizeof *m->slots);
    m->used = calloc(cap, 1);
    m->cap = cap;
    m->len = 0;
    if (!m->slots || !m->used) {
        hkv_map_free(m);
        return -1;
    }
    return 0;
}

void hkv_map_free(hkv_map *m) {
    free(m->slots);
    free(m->used);
    m->slots = NULL;
    m->used = NULL;
    m->cap = m->len = 0;
}

int hkv_map_copy(hkv_map *dst, const hkv_map *src) {
    dst->slots = malloc(src->cap * sizeof *dst->slots);
    dst->used = malloc(src->cap);
    dst->cap = src->cap;
    dst->len = src->len;
    if (!dst->slots || !dst->used) {
        hkv_map_free(dst);
        return -1;
    }
    memcpy(dst->slots, src->slots, src->cap * sizeof *dst->slots);
    memcpy(dst->used, src->used, src->cap);
    return 0;
}

void hkv_map_clear(hkv_map *m) {
    if (m->len) memset(m->used, 0, m->cap);
    m->len = 0;
}

static int grow(hkv_map *m) {
    hkv_map bigger;
    if (hkv_map_init(&bigger, m->cap) < 0) return -1; /* four times the slots (2 x cap + 2, up) */
    for (size_t i = 0; i < m->cap; i++)
        if (m->used[i]) { /* mixed already: its home is its low bits */
            size_t j = (size_t)m->slots[i].key & (bigger.cap - 1);
            while (bigger.used[j]) j = (j + 1) & (bigger.cap - 1);
            bigger.used[j] = 1;
            bigger.slots[j] = m->slots[i];
        }
    bigger.len = m->len;
    hkv_map_free(m);
    *m = bigger;
    return 0;
}

int hkv_map_put(hkv_map *m, uint64_t key, int64_t val) {
    if (2 * (m->len + 1) > m->cap && grow(m) < 0) return -1;
    uint64_t h = hkv_mix(key);
    size_t mask = m->cap - 1, i = (size_t)h & mask;
    while (m->used[i]) {
        if (m->slots[i].key == h) {
            m->slots[i].val = val;
            return 0;
        }
        i = (i + 1) & mask;
    }
    m->used[i] = 1;
    m->slots[i] = (hkv_slot){h, val};
    m->len++;
    return 1;
}

int hkv_map_del(hkv_map *m, uint64_t key, int64_t *old) {
    uint64_t h = hkv_mix(key);
    size_t mask = m->cap - 1, i = (size_t)h & mask;
    while (m->used[i] && m->slots[i].key != h) i = (i + 1) & mask;
    if (!m->used[i]) return 0;
    if (old) *old = m->slots[i].val;
    /* backward-shift deletion: no tombstones */
    size_t j = i;
    for (;;) {
        j = (j + 1) & mask;
        if (!m->used[j]) break;
        size_t home = (size_t)m->slots[j].key & mask;
        /* move j into the hole at i unless its home lies cyclically in (i, j] */
        int stays = (i <= j) ? (i < home && home <= j) : (i < home || home <= j);
        if (stays) continue;
        m->slots[i] = m->slots[j];
        i = j;
    }
    m->used[i] = 0;
    m->len--;
    return 1;
}

/* ---- ordered set ---- */

int hkv_oset_init(hkv_oset *s, size_t hint) {
    if (hkv_map_init(&s->index, hint) < 0) return -1;
    s->cap = hint > 16 ? (int32_t)hint : 16;
    s->nodes = malloc((size_t)s->cap * sizeof *s->nodes);
    if (!s->nodes) {
        hkv_map_free(&s->index);
        return -1;
    }
    s->used = 0;
    s->free_head = -1;
    s->head = s->tail = -1;
    s->len = 0;
    return 0;
}

void hkv_oset_free(hkv_oset *s) {
    hkv_map_free(&s->index);
    free(s->nodes);
    s->nodes = NULL;
    s->len = 0;
}

int32_t hkv_oset_find(const hkv_oset *s, uint64_t key) {
    int64_t *v = hkv_map_get(&s->index, key);
    return v ? (int32_t)*v : -1;
}

static int32_t new_node(hkv_oset *s, uint64_t key, int64_t val) {
    int32_t n = s->free_head;
    if (n >= 0) {
        s->free_head = s->nodes[n].next;
    } else {
        if (s->used == s->cap) {
            int32_t cap = s->cap * 2;
            hkv_onode *nodes = realloc(s->nodes, (size_t)cap * sizeof *nodes);
            if (!nodes) return -1;
            s->nodes = nodes;
            s->cap = cap;
        }
        n = s->used++;
    }
    if (hkv_map_put(&s->index, key, n) < 0) {
        s->nodes[n].next = s->free_head;
        s->free_head = n;
        return -1;
    }
    s->nodes[n].key = key;
    s->nodes[n].val = val;
    s->len++;
    return n;
}

static void link_back(hkv_oset *s, int32_t n) {
    s->nodes[n].prev = s->tail;
    s->nodes[n].next = -1;
    if (s->tail >= 0) s->nodes[s->tail].next = n;
    else s->head = n;
    s->tail = n;
}

static void unlink_node(hkv_oset *s, int32_t n) {
    hkv_onode *node = &s->nodes[n];
    if (node->prev >= 0) s->nodes[node->prev].next = node->next;
    else s->head = node->next;
    if (node->next >= 0) s->nodes[node->next].prev = node->prev;
    else s->tail = node->prev;
}

int hkv_oset_push_back(hkv_oset *s, uint64_t key, int64_t val) {
    int32_t n = new_node(s, key, val);
    if (n < 0) return -1;
    link_back(s, n);
    return 0;
}

int hkv_oset_push_front(hkv_oset *s, uint64_t key, int64_t val) {
    int32_t n = new_node(s, key, val);
    if (n < 0) return -1;
    s->nodes[n].prev = -1;
    s->nodes[n].next = s->head;
    if (s->head >= 0) s->nodes[s->head].prev = n;
    else s->tail = n;
    s->head = n;
    return 0;
}

int hkv_oset_move_to_end(hkv_oset *s, uint64_t key) {
    int32_t n = hkv_oset_find(s, key);
    if (n < 0) return 0;
    if (n != s->tail) {
        unlink_node(s, n);
        link_back(s, n);
    }
    return 1;
}

void hkv_oset_del_node(hkv_oset *s, int32_t n) {
    hkv_map_del(&s->index, s->nodes[n].key, NULL);
    unlink_node(s, n);
    s->nodes[n].next = s->free_head;
    s->free_head = n;
    s->len--;
}

int hkv_oset_del(hkv_oset *s, uint64_t key, int64_t *val) {
    int32_t n = hkv_oset_find(s, key);
    if (n < 0) return 0;
    if (val) *val = s->nodes[n].val;
    hkv_oset_del_node(s, n);
    return 1;
}

int hkv_oset_pop_front(hkv_oset *s, uint64_t *key, int64_t *val) {
    int32_t n = s->head;
    if (n < 0) return 0;
    if (key) *key = s->nodes[n].key;
    if (val) *val = s->nodes[n].val;
    hkv_oset_del_node(s, n);
    return 1;
}

int64_t *hkv_oset_val(const hkv_oset *s, uint64_t key) {
    int32_t n = hkv_oset_find(s, key);
    return n < 0 ? NULL : &s->nodes[n].val;
}

int hkv_osets_init(hkv_oset *const *sets, int n, size_t hint) {
    for (int i = 0; i < n; i++) {
        if (hkv_oset_init(sets[i], hint) < 0) {
            while (i-- > 0) hkv_oset_free(sets[i]);
            return -1;
        }
    }
    return 0;
}

void hkv_osets_free(hkv_oset *const *sets, int n) {
    for (int i = 0; i < n; i++) hkv_oset_free(sets[i]);
}

/* ---- heap ---- */

static inline int before(const hkv_item *a, const hkv_item *b) {
    if (a->priority != b->priority) return a->priority < b->priority;
    return a->seq < b->seq;
}

int hkv_heap_init(hkv_heap *h, size_t hint) {
    h->cap = hint > 16 ? hint : 16;
    h->len = 0;
    h->items = malloc(h->cap * sizeof *h->items);
    return h->items ? 0 : -1;
}

int hkv_heap_copy(hkv_heap *dst, const hkv_heap *src) {
    dst->cap = src->cap;
    dst->len = src->len;
    dst->items = malloc(src->cap * sizeof *dst->items);
    if (!dst->items) return -1;
    memcpy(dst->items, src->items, src->len * sizeof *dst->items);
    return 0;
}

void hkv_heap_free(hkv_heap *h) {
    free(h->items);
    h->items = NULL;
    h->len = h->cap = 0;
}

/* A 4-ary heap: half the levels of a binary one, a node's four children side by side (fewer
 * cache misses a pop, a few more comparisons). Every item's seq is its own (no two items tie),
 * so the items come out in the one order `before` gives, as from Python's heapq. */
#define ARITY 4

static void sift_down(hkv_heap *h, size_t i) {
    hkv_item item = h->items[i];
    const size_t len = h->len;
    for (;;) {
        size_t first = ARITY * i + 1, best = first;
        if (first >= len) break;
        size_t end = first + ARITY < len ? first + ARITY : len;
        for (size_t c = first + 1; c < end; c++)
            if (before(&h->items[c], &h->items[best])) best = c;
        if (!before(&h->items[best], &item)) break;
        h->items[i] = h->items[best];
        i = best;
    }
    h->items[i] = item;
}

int hkv_heap_reserve(hkv_heap *h) {
    if (h->len == h->cap) {
        size_t cap = h->cap * 2;
        hkv_item *items = realloc(h->items, cap * sizeof *items);
        if (!items) return -1;
        h->items = items;
        h->cap = cap;
    }
    return 0;
}

int hkv_heap_push(hkv_heap *h, hkv_item item) {
    if (hkv_heap_reserve(h) < 0) return -1;
    size_t i = h->len++;
    while (i > 0) {
        size_t parent = (i - 1) / ARITY;
        if (!before(&item, &h->items[parent])) break;
        h->items[i] = h->items[parent];
        i = parent;
    }
    h->items[i] = item;
    return 0;
}

hkv_item hkv_heap_pop(hkv_heap *h) {
    hkv_item top = h->items[0];
    h->items[0] = h->items[--h->len];
    if (h->len) sift_down(h, 0);
    return top;
}

void hkv_heapify(hkv_heap *h) {
    for (size_t i = h->len / ARITY + 1; i-- > 0;) sift_down(h, i);
}

void *hkv_expert_alloc(size_t size, const hkv_ops *ops, int64_t capacity) {
    hkv_expert *e = malloc(size);
    if (!e) return NULL;
    e->ops = ops;
    e->capacity = capacity;
    return e;
}

int hkv_admit_all(hkv_expert *e, const hkv_block *b) {
    (void)e;
    (void)b;
    return 1;
}
