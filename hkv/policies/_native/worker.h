/* A background thread for one job at a time (worker.c). */
#ifndef HKV_WORKER_H
#define HKV_WORKER_H

typedef struct hkv_worker hkv_worker;

hkv_worker *hkv_worker_new(void); /* NULL: out of memory */
/* run job(arg) on the thread (after the one in flight), or here at once where no thread runs;
 * the job must not touch Python objects (it runs without the GIL) */
void hkv_worker_submit(hkv_worker *w, void (*job)(void *), void *arg);
void hkv_worker_wait(hkv_worker *w); /* until no job is in flight; call with the GIL held */
int hkv_worker_threaded(hkv_worker *w); /* 1: jobs run on the thread, 0: in the caller */
/* 1 where jobs run on the thread and this process may run on more than one CPU (a thread that
 * shares the caller's only CPU adds a handover to the same work), else 0 */
int hkv_worker_parallel(hkv_worker *w);
void hkv_worker_free(hkv_worker *w);  /* waits for the job in flight, ends the thread */

#endif
