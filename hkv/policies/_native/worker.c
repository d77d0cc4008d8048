/* One background thread that runs a job at a time, without the GIL: a sampled `auto` replays
 * a request in its shadow tiers there while vLLM's scheduler goes on (`Shadows.replay_request`
 * with `deferred`, whose hits are read at the next request's end), and an exact one stores
 * there a request whose hits it has just read (`replay_filled`, where `hkv_worker_parallel`).
 *
 * The thread is started at the first job. Where no thread can run (pthread_create fails, the
 * environment sets HKV_SHADOW_THREAD=0, or this is a process forked from the one that started
 * it) the job runs in the caller, at once: the same results, read at the same point. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "worker.h"

struct hkv_worker {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    pthread_t thread;
    void (*job)(void *);
    void *arg;
    int busy;    /* a job queued or running */
    int stop;    /* the thread is asked to end */
    int started; /* the thread runs (in process `pid`) */
    int inline_only;
    pid_t pid;
    int cpus;        /* this process's CPUs, as last asked (`hkv_worker_parallel`) */
    unsigned checks; /* calls of `hkv_worker_parallel` */
};

static void *work(void *arg) {
    hkv_worker *w = arg;
    pthread_mutex_lock(&w->lock);
    for (;;) {
        while (!w->busy && !w->stop) pthread_cond_wait(&w->changed, &w->lock);
        if (w->stop) break;
        void (*job)(void *) = w->job;
        void *job_arg = w->arg;
        pthread_mutex_unlock(&w->lock);
        job(job_arg);
        pthread_mutex_lock(&w->lock);
        w->busy = 0;
        pthread_cond_broadcast(&w->changed);
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

hkv_worker *hkv_worker_new(void) {
    hkv_worker *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    if (pthread_mutex_init(&w->lock, NULL) != 0) {
        free(w);
        return NULL;
    }
    if (pthread_cond_init(&w->changed, NULL) != 0) {
        pthread_mutex_destroy(&w->lock);
        free(w);
        return NULL;
    }
    const char *env = getenv("HKV_SHADOW_THREAD");
    w->inline_only = env && !strcmp(env, "0");
    return w;
}

/* whether jobs run on the thread (started here, or to be started) */
static int threaded(hkv_worker *w) {
    if (w->inline_only) return 0;
    if (w->started && w->pid != getpid()) w->inline_only = 1; /* forked: no thread here */
    return !w->inline_only;
}

int hkv_worker_threaded(hkv_worker *w) { return threaded(w); }

/* (the CPUs this process may use, asked again every PARALLEL_CHECK calls: a system call each
 * request would cost a one-CPU caller what the thread saves a larger one) */
#define PARALLEL_CHECK 1024

int hkv_worker_parallel(hkv_worker *w) {
    if (!threaded(w)) return 0;
    if (w->checks++ % PARALLEL_CHECK == 0) {
        cpu_set_t cpus;
        w->cpus = sched_getaffinity(0, sizeof cpus, &cpus) != 0 ? 2 : CPU_COUNT(&cpus);
    }
    return w->cpus > 1;
}

void hkv_worker_wait(hkv_worker *w) {
    if (!threaded(w) || !w->started) return;
    pthread_mutex_lock(&w->lock);
    int busy = w->busy;
    pthread_mutex_unlock(&w->lock);
    if (!busy) return;
    Py_BEGIN_ALLOW_THREADS pthread_mutex_lock(&w->lock);
    while (w->busy) pthread_cond_wait(&w->changed, &w->lock);
    pthread_mutex_unlock(&w->lock);
    Py_END_ALLOW_THREADS
}

void hkv_worker_submit(hkv_worker *w, void (*job)(void *), void *arg) {
    hkv_worker_wait(w);
    if (threaded(w) && !w->started) {
        w->pid = getpid();
        w->started = pthread_create(&w->thread, NULL, work, w) == 0;
        if (!w->started) w->inline_only = 1;
    }
    if (!threaded(w)) {
        job(arg);
        return;
    }
    pthread_mutex_lock(&w->lock);
    w->job = job;
    w->arg = arg;
    w->busy = 1;
    pthread_cond_broadcast(&w->changed);
    pthread_mutex_unlock(&w->lock);
}

void hkv_worker_free(hkv_worker *w) {
    if (!w) return;
    if (threaded(w) && w->started) {
        hkv_worker_wait(w);
        pthread_mutex_lock(&w->lock);
        w->stop = 1;
        pthread_cond_broadcast(&w->changed);
        pthread_mutex_unlock(&w->lock);
        pthread_join(w->thread, NULL); /* (it never takes the GIL: held here, no deadlock) */
    }
    if (!w->started || !w->inline_only || w->pid == getpid()) {
        pthread_cond_destroy(&w->changed);
        pthread_mutex_destroy(&w->lock);
    }
    free(w);
}
