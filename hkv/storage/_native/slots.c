/* hkv.storage._slots: the disk tier's slot reads and writes with the GIL released.
 *
 * `DiskTier` (hkv/storage/disk.py) reads and writes its slots from I/O threads. In Python, each
 * slot costs a few system calls and a checksum, and each of those gives up the GIL and waits to
 * take it back; inside a serving engine whose own thread keeps the GIL busy, every retake waits
 * for the interpreter's switch interval, and reads crawl (measured in bench.transfer_disk's
 * `busy` case). Here a whole batch runs without the GIL: `read_slots` reads runs of consecutive
 * slots, checks each slot's header and crc32 and copies its payload out; `write_slots` writes
 * headers and payloads of a batch with `pwritev`; `drop_pages` forgets written slots from the
 * page cache. The layout, the checks and their order are those of disk.py, which keeps the
 * pure-Python path and explains every slot this module reports lost.
 *
 * crc32 is zlib's: the `crc32` of the zlib the system has (libz.so.1, found with dlopen at import:
 * often the one Python's own zlib module uses, with its vectorised code), else the IEEE polynomial
 * (reflected 0xEDB88320) computed here eight bytes at a time from eight tables.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#define HEADER_BYTES 64
#define HEADER_USED 32 /* magic 4, version 2, format 1, kind 1, key 8, length 8, checksum 8 */
#define SLOT_VERSION 1
#define KIND_CRC32 1
#define MAX_IOV 1020

enum { OK = 0, NOT_VALID, NO_HEADER, BAD_HEADER, BAD_FORMAT, TOO_LONG, OTHER_KIND, SHORT,
       BAD_SUM, IO_ERROR };

static uint32_t crc_table[8][256];
typedef unsigned long (*zlib_crc32_fn)(unsigned long, const unsigned char *, unsigned int);
static zlib_crc32_fn zlib_crc32 = NULL;

static void crc_init(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[0][n] = c;
    }
    for (int t = 1; t < 8; t++)
        for (uint32_t n = 0; n < 256; n++)
            crc_table[t][n] = (crc_table[t - 1][n] >> 8) ^ crc_table[0][crc_table[t - 1][n] & 0xff];
}

static uint32_t crc32_table(uint32_t crc, const unsigned char *p, size_t n) {
    crc = ~crc;
    while (n && ((uintptr_t)p & 7)) {
        crc = crc_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
        n--;
    }
    while (n >= 8) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4);
        memcpy(&hi, p + 4, 4);
        lo ^= crc;
        crc = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^
              crc_table[5][(lo >> 16) & 0xff] ^ crc_table[4][lo >> 24] ^
              crc_table[3][hi & 0xff] ^ crc_table[2][(hi >> 8) & 0xff] ^
              crc_table[1][(hi >> 16) & 0xff] ^ crc_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--) crc = crc_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return ~crc;
}

static uint32_t crc32_of(uint32_t crc, const unsigned char *p, size_t n) {
    if (zlib_crc32 == NULL) return crc32_table(crc, p, n);
    while (n) { /* zlib takes an unsigned int length */
        unsigned int part = n > (1u << 30) ? (1u << 30) : (unsigned int)n;
        crc = (uint32_t)zlib_crc32(crc, p, part);
        p += part, n -= part;
    }
    return crc;
}

static void find_zlib(void) {
    void *lib = dlopen("libz.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib != NULL) zlib_crc32 = (zlib_crc32_fn)dlsym(lib, "crc32");
}

static uint64_t load_le64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static void store_le64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* pread until `n` bytes or the end of the file; bytes read, or -1 (errno set) */
static Py_ssize_t read_fully(int fd, unsigned char *buf, size_t n, off_t at) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, buf + got, n - got, at + (off_t)got);
        if (r < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (r == 0) break;
        got += (size_t)r;
    }
    return (Py_ssize_t)got;
}

typedef struct {
    int fd;
    int64_t data_at, stride, slot_bytes, run_slots;
    const int64_t *slots, *offsets;
    const uint64_t *keys;
    const unsigned char *valid;
    int fmt;
    unsigned char *out;
    Py_ssize_t out_size, n;
    unsigned char *codes;
} ReadJob;

/* checks of one slot read at `at` of `staging` (`got` bytes), as DiskTier._check orders them */
static unsigned char check_slot(const ReadJob *j, Py_ssize_t i, const unsigned char *staging,
                                int64_t at, int64_t got) {
    if (!j->valid[i]) return NOT_VALID;
    if (at + HEADER_USED > got) return NO_HEADER;
    const unsigned char *h = staging + at;
    unsigned version = (unsigned)h[4] | ((unsigned)h[5] << 8);
    if (memcmp(h, "HKVS", 4) != 0 || version != SLOT_VERSION || load_le64(h + 8) != j->keys[i])
        return BAD_HEADER;
    if (h[6] != j->fmt) return BAD_FORMAT;
    uint64_t nbytes = load_le64(h + 16);
    if (nbytes > (uint64_t)j->slot_bytes || j->offsets[i] < 0 ||
        (uint64_t)j->offsets[i] + nbytes > (uint64_t)j->out_size)
        return TOO_LONG;
    if (h[7] != KIND_CRC32) return OTHER_KIND;
    int64_t first = at + HEADER_BYTES;
    if (first + (int64_t)nbytes > got) return SHORT;
    unsigned char *dest = j->out + j->offsets[i];
    memcpy(dest, staging + first, (size_t)nbytes);
    if ((uint64_t)crc32_of(0, dest, (size_t)nbytes) != load_le64(h + 24)) return BAD_SUM;
    return OK;
}

static void read_all(ReadJob *j) {
    unsigned char *staging = NULL;
    size_t staging_size = 0;
    Py_ssize_t start = 0;
    while (start < j->n) {
        Py_ssize_t end = start + 1;
        while (end < j->n && end - start < j->run_slots && j->slots[end] == j->slots[end - 1] + 1)
            end++;
        size_t span = (size_t)((end - start - 1) * j->stride + HEADER_BYTES + j->slot_bytes);
        if (span > staging_size) {
            free(staging);
            staging = malloc(span);
            staging_size = staging ? span : 0;
        }
        Py_ssize_t got = staging ? read_fully(j->fd, staging, span,
                                              (off_t)(j->data_at + j->slots[start] * j->stride))
                                 : -1;
        for (Py_ssize_t i = start; i < end; i++)
            j->codes[i] = got < 0 ? IO_ERROR
                                  : check_slot(j, i, staging, (i - start) * j->stride, got);
        start = end;
    }
    free(staging);
}

static int want(Py_buffer *b, Py_ssize_t n, Py_ssize_t item, const char *what) {
    if (b->len != n * item) {
        PyErr_Format(PyExc_ValueError, "read_slots: %s holds %zd bytes, expected %zd", what,
                     b->len, n * item);
        return 0;
    }
    return 1;
}

/* read_slots(fd, data_at, stride, slot_bytes, run_slots, slots: int64[n], keys: uint64[n],
 *            valid: uint8[n], fmt, out: writable bytes, offsets: int64[n]) -> bytes of n codes */
static PyObject *read_slots(PyObject *self, PyObject *args) {
    ReadJob j;
    long long data_at, stride, slot_bytes, run_slots;
    Py_buffer slots, keys, valid, out, offsets;
    if (!PyArg_ParseTuple(args, "iLLLLy*y*y*iw*y*", &j.fd, &data_at, &stride, &slot_bytes,
                          &run_slots, &slots, &keys, &valid, &j.fmt, &out, &offsets))
        return NULL;
    PyObject *codes = NULL;
    j.n = slots.len / 8;
    if (stride < HEADER_BYTES + slot_bytes || run_slots < 1 || data_at < 0) {
        PyErr_SetString(PyExc_ValueError, "read_slots: bad geometry");
    } else if (want(&slots, j.n, 8, "slots") && want(&keys, j.n, 8, "keys") &&
               want(&valid, j.n, 1, "valid") && want(&offsets, j.n, 8, "offsets")) {
        codes = PyBytes_FromStringAndSize(NULL, j.n);
    }
    if (codes != NULL) {
        j.data_at = data_at, j.stride = stride, j.slot_bytes = slot_bytes;
        j.run_slots = run_slots;
        j.slots = slots.buf, j.keys = keys.buf, j.valid = valid.buf, j.offsets = offsets.buf;
        j.out = out.buf, j.out_size = out.len;
        j.codes = (unsigned char *)PyBytes_AS_STRING(codes);
        Py_BEGIN_ALLOW_THREADS read_all(&j);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&slots), PyBuffer_Release(&keys), PyBuffer_Release(&valid);
    PyBuffer_Release(&out), PyBuffer_Release(&offsets);
    return codes;
}

typedef struct {
    int fd;
    int64_t data_at, stride;
    Py_ssize_t n;
    const int64_t *slots;
    const uint64_t *keys;
    const unsigned char *fmts;
    Py_buffer *payloads;
    unsigned char *headers; /* n x HEADER_BYTES */
    const unsigned char *zeros;
} WriteJob;

static int write_vec(int fd, struct iovec *iov, int count, off_t at) {
    while (count > 0) {
        ssize_t r = pwritev(fd, iov, count, at);
        if (r < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        at += r;
        while (count > 0 && (size_t)r >= iov->iov_len) r -= (ssize_t)iov->iov_len, iov++, count--;
        if (count > 0) iov->iov_base = (char *)iov->iov_base + r, iov->iov_len -= (size_t)r;
    }
    return 0;
}

/* headers, then one pwritev per run of consecutive slots; 0 or an errno */
static int write_all(WriteJob *w) {
    struct iovec iov[MAX_IOV + 3];
    int count = 0;
    int64_t run_start = 0, previous = 0, last_bytes = 0;
    for (Py_ssize_t i = 0; i < w->n; i++) {
        unsigned char *h = w->headers + i * HEADER_BYTES;
        const unsigned char *data = w->payloads[i].buf;
        size_t nbytes = (size_t)w->payloads[i].len;
        memset(h, 0, HEADER_BYTES);
        memcpy(h, "HKVS", 4);
        h[4] = SLOT_VERSION, h[5] = 0, h[6] = w->fmts[i], h[7] = KIND_CRC32;
        store_le64(h + 8, w->keys[i]);
        store_le64(h + 16, nbytes);
        store_le64(h + 24, crc32_of(0, data, nbytes));
        if (count && (w->slots[i] != previous + 1 || count >= MAX_IOV)) {
            if (write_vec(w->fd, iov, count, (off_t)(w->data_at + run_start * w->stride)))
                return errno;
            count = 0;
        }
        if (!count) {
            run_start = w->slots[i];
        } else if (w->stride - HEADER_BYTES - last_bytes > 0) {
            iov[count].iov_base = (void *)w->zeros;
            iov[count++].iov_len = (size_t)(w->stride - HEADER_BYTES - last_bytes);
        }
        iov[count].iov_base = h, iov[count++].iov_len = HEADER_BYTES;
        iov[count].iov_base = (void *)data, iov[count++].iov_len = nbytes;
        previous = w->slots[i], last_bytes = (int64_t)nbytes;
    }
    if (count && write_vec(w->fd, iov, count, (off_t)(w->data_at + run_start * w->stride)))
        return errno;
    return 0;
}

/* write_slots(fd, data_at, stride, slots: int64[n], keys: uint64[n], fmts: uint8[n],
 *             payloads: sequence of n buffers) -> payload bytes written (crc32 checksums) */
static PyObject *write_slots(PyObject *self, PyObject *args) {
    WriteJob w;
    long long data_at, stride;
    Py_buffer slots, keys, fmts;
    PyObject *seq;
    if (!PyArg_ParseTuple(args, "iLLy*y*y*O", &w.fd, &data_at, &stride, &slots, &keys, &fmts,
                          &seq))
        return NULL;
    PyObject *result = NULL, *fast = PySequence_Fast(seq, "write_slots: payloads");
    Py_ssize_t taken = 0;
    w.n = slots.len / 8;
    w.payloads = NULL, w.headers = NULL;
    unsigned char *zeros = NULL;
    if (fast == NULL) goto done;
    if (!want(&slots, w.n, 8, "slots") || !want(&keys, w.n, 8, "keys") ||
        !want(&fmts, w.n, 1, "fmts") || !want(&slots, PySequence_Fast_GET_SIZE(fast), 8, "payloads"))
        goto done;
    w.payloads = PyMem_Calloc((size_t)w.n + 1, sizeof(Py_buffer));
    w.headers = PyMem_Malloc((size_t)(w.n + 1) * HEADER_BYTES);
    zeros = PyMem_Calloc((size_t)stride + 1, 1);
    if (!w.payloads || !w.headers || !zeros) {
        PyErr_NoMemory();
        goto done;
    }
    long long total = 0;
    for (; taken < w.n; taken++) {
        PyObject *item = PySequence_Fast_GET_ITEM(fast, taken);
        if (PyObject_GetBuffer(item, &w.payloads[taken], PyBUF_C_CONTIGUOUS) < 0) goto done;
        if (w.payloads[taken].len > stride - HEADER_BYTES) {
            PyErr_Format(PyExc_ValueError, "write_slots: payload %zd holds %zd bytes, more than "
                         "a slot", taken, w.payloads[taken].len);
            taken++;
            goto done;
        }
        total += w.payloads[taken].len;
    }
    w.data_at = data_at, w.stride = stride, w.slots = slots.buf, w.keys = keys.buf;
    w.fmts = fmts.buf, w.zeros = zeros;
    int error;
    Py_BEGIN_ALLOW_THREADS error = write_all(&w);
    Py_END_ALLOW_THREADS
    if (error) {
        errno = error;
        PyErr_SetFromErrno(PyExc_OSError);
    } else {
        result = PyLong_FromLongLong(total);
    }
done:
    for (Py_ssize_t i = 0; i < taken; i++) PyBuffer_Release(&w.payloads[i]);
    PyMem_Free(w.payloads), PyMem_Free(w.headers), PyMem_Free(zeros);
    Py_XDECREF(fast);
    PyBuffer_Release(&slots), PyBuffer_Release(&keys), PyBuffer_Release(&fmts);
    return result;
}

/* drop_pages(fd, data_at, stride, slots: int64[n]): POSIX_FADV_DONTNEED for each slot */
static PyObject *drop_pages(PyObject *self, PyObject *args) {
    int fd;
    long long data_at, stride;
    Py_buffer slots;
    if (!PyArg_ParseTuple(args, "iLLy*", &fd, &data_at, &stride, &slots)) return NULL;
    const int64_t *s = slots.buf;
    Py_ssize_t n = slots.len / 8;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++)
        posix_fadvise(fd, (off_t)(data_at + s[i] * stride), (off_t)stride, POSIX_FADV_DONTNEED);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&slots);
    Py_RETURN_NONE;
}

static PyObject *crc32_py(PyObject *self, PyObject *args) {
    Py_buffer data;
    unsigned int value = 0;
    if (!PyArg_ParseTuple(args, "y*|I", &data, &value)) return NULL;
    uint32_t crc;
    Py_BEGIN_ALLOW_THREADS crc = crc32_of(value, data.buf, (size_t)data.len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLong(crc);
}

/* crc32_table(buffer, value=0): the table implementation, whatever runs (tests compare them) */
static PyObject *crc32_table_py(PyObject *self, PyObject *args) {
    Py_buffer data;
    unsigned int value = 0;
    if (!PyArg_ParseTuple(args, "y*|I", &data, &value)) return NULL;
    uint32_t crc = crc32_table(value, data.buf, (size_t)data.len);
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLong(crc);
}

static PyMethodDef methods[] = {
    {"read_slots", read_slots, METH_VARARGS, "Read, check and copy out slots (GIL released)."},
    {"write_slots", write_slots, METH_VARARGS, "Write slots' headers and payloads."},
    {"drop_pages", drop_pages, METH_VARARGS, "Forget slots from the page cache."},
    {"crc32", crc32_py, METH_VARARGS, "zlib's crc32 of a buffer."},
    {"crc32_table", crc32_table_py, METH_VARARGS, "crc32 from this module's own tables."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_slots", NULL, -1, methods};

PyMODINIT_FUNC PyInit__slots(void) {
    crc_init();
    find_zlib();
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    PyModule_AddStringConstant(m, "CRC32", zlib_crc32 != NULL ? "zlib" : "tables");
    PyModule_AddIntConstant(m, "HEADER_BYTES", HEADER_BYTES);
    PyModule_AddIntConstant(m, "CHECKSUM_KIND", KIND_CRC32);
    return m;
}
