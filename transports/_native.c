/* transports._native: the transports' compiled pieces.
 *
 * - stream_copy: a copy with streaming (non-temporal) stores, the one
 *   compiled copy of the library (transports/copy.py is its Python face;
 *   both layers use it from there).
 * - exchange_reduce: the small all-reduce through the shm transport's
 *   exchange buffers in one call: the protocol of transports/shm/exchange.py
 *   (Exchange.run) word for word, then a reduction in rank order that the
 *   caller hands over (a collectives_reducer, transports/native_api.h; the
 *   collectives layer's kernels provide them).
 * - mpi_swap: one send and one receive between two ranks through the MPI
 *   library the process has loaded (transports/mpi.py, MpiEndpoint.sendrecv):
 *   posted and polled here, handed back to Python's wait when a peer is late.
 *   mpi_steps: a schedule of them, with reductions (MpiEndpoint.steps: the
 *   whole of a small all-reduce, all-gather or reduce-scatter in one call).
 *
 * Optional: where it does not build, the shm transport runs the Python
 * exchange and copies with numpy. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "native_api.h"

/* memcpy, with streaming stores from the first 64-byte boundary of d on: whole
 * cache lines go to memory without being read into the cache first, which
 * halves the memory traffic of a copy into an output larger than the caches
 * (docs/performance.md).  SSE2 is part of every x86-64 processor; 16-byte
 * stores stream as fast as wider ones (memory decides).  Elsewhere plain
 * memcpy. */
static void stream_copy_bytes(char *d, const char *s, size_t n)
{
#if defined(__SSE2__)
    size_t head = (0 - (uintptr_t)d) & 63;
    if (head > n)
        head = n;
    memcpy(d, s, head);
    size_t i = head;
    for (; i + 64 <= n; i += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)(s + i));
        __m128i b = _mm_loadu_si128((const __m128i *)(s + i + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(s + i + 32));
        __m128i e = _mm_loadu_si128((const __m128i *)(s + i + 48));
        _mm_stream_si128((__m128i *)(d + i), a);
        _mm_stream_si128((__m128i *)(d + i + 16), b);
        _mm_stream_si128((__m128i *)(d + i + 32), c);
        _mm_stream_si128((__m128i *)(d + i + 48), e);
    }
    _mm_sfence(); /* the streamed stores are visible before anything after */
    memcpy(d + i, s + i, n - i);
#else
    memcpy(d, s, n);
#endif
}

/* the collectives_reducer in capsule obj (transports/native_api.h), or NULL
 * with an exception set */
static const collectives_reducer *reducer_of(PyObject *obj)
{
    const collectives_reducer *red =
        (const collectives_reducer *)PyCapsule_GetPointer(obj, COLLECTIVES_REDUCER_CAPSULE);
    if (red && (red->version != COLLECTIVES_REDUCER_VERSION || !red->reduce || !red->itemsize)) {
        PyErr_SetString(PyExc_ValueError, "transports._native: a reducer of another version");
        return NULL;
    }
    return red;
}

/* stream_copy(dst_address, src_address, nbytes): the caller has checked both
 * ranges (transports/copy.py) */
static PyObject *stream_copy(PyObject *self, PyObject *args)
{
    unsigned long long dst, src;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "KKn", &dst, &src, &n))
        return NULL;
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "stream_copy: negative size");
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    stream_copy_bytes((char *)(uintptr_t)dst, (const char *)(uintptr_t)src, (size_t)n);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

#ifdef __linux__
#include <limits.h>
#include <errno.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#define EXCHANGE_REDUCE 1

static int overlaps(const Py_buffer *a, const Py_buffer *b)
{
    const char *p = (const char *)a->buf, *q = (const char *)b->buf;
    return a->len && b->len && p < q + b->len && q < p + a->len;
}

/* The plan (an int64 array that Exchange builds once) says where the words are:
 *   [base address, exchange buffer bytes, N, this rank,
 *    then per rank: doorbell (u32 index), its coll SLEEPING flag (u32 index),
 *    its exchanged word (i64 index), the (bytes, call, call size) words of
 *    buffer 0 and of buffer 1 (i64 index of the first), buffer 0 and buffer 1
 *    (byte offsets)].
 * N is any number of ranks: the plan is as long as N says.
 * Exchange k: copy x into this rank's buffer k mod 2, publish the bytes, the
 * call and the call size in that buffer's words, then k as the exchanged
 * word; ring every peer (its doorbell + 1, a futex wake where one of its
 * SLEEPING flags, coll's or p2p's, is set); look for the peers' exchanged
 * words a bounded number of times; check what they published; reduce every
 * rank's buffer, rank 0 first, into out with the reducer.  Returns XR_DONE;
 * XR_LATE where a peer has not published k yet (Python waits as any call
 * does: this function holds the GIL and never sleeps); XR_MISMATCH where a
 * peer published other words (Python checks them again and raises its
 * errors).  Both after publishing.  An error (bad arguments, no memory) is
 * raised before anything is published. */
enum { XR_DONE = 0, XR_LATE = 1, XR_MISMATCH = 2 };
enum { PLAN_HEAD = 4, PLAN_STRIDE = 7 };
enum { P_BELL, P_SLEEP, P_SEQ, P_META0, P_META1, P_BUF0, P_BUF1 };
/* polls of the peers' words before handing over to Python's wait: about
 * 2 us (1 to 2 ns a poll here), as long as Python's own look (PRESPIN), so
 * that a peer a little behind is caught without a sleep and a rank whose
 * peer needs its core (more ranks than cores) gives it up soon.  No PAUSE
 * between polls: under KVM it can exit to the host (pause-loop exiting),
 * 200 to 300 ns a PAUSE measured on the development VM. */
#define XR_POLLS 2048

/* Ring every peer of n ranks but me: bump its doorbell, and wake it where
 * one of its SLEEPING flags (coll's, p2p's) is set.  ranks[stride * p] is
 * rank p's doorbell, ranks[stride * p + 1] its coll SLEEPING flag (u32
 * indices; p2p's follows it). */
_Static_assert(P_BELL == 0 && P_SLEEP == 1, "ring_peers reads a rank's doorbell, then its flag");
static void ring_peers(volatile uint32_t *u32, const int64_t *ranks, int64_t stride, int64_t n,
                       int64_t me)
{
    for (int64_t p = 0; p < n; p++) {
        if (p == me)
            continue;
        const int64_t *r = ranks + stride * p;
        /* a locked add: the new doorbell is visible before the flags are read */
        __atomic_fetch_add((uint32_t *)(u32 + r[0]), 1u, __ATOMIC_SEQ_CST);
        if (u32[r[1]] || u32[r[1] + 1])
            syscall(SYS_futex, (uint32_t *)(u32 + r[0]), FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
    }
}

static PyObject *exchange_reduce(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError,
                        "exchange_reduce(reducer, plan, x, out, k, call, key) takes 7 arguments");
        return NULL;
    }
    const collectives_reducer *red = reducer_of(args[0]);
    if (!red)
        return NULL;
    long long k = PyLong_AsLongLong(args[4]), call = PyLong_AsLongLong(args[5]);
    long long key = PyLong_AsLongLong(args[6]);
    if (PyErr_Occurred())
        return NULL;
    if (k < 1) {
        PyErr_SetString(PyExc_ValueError, "exchange_reduce: k out of range");
        return NULL;
    }
    Py_buffer plan, x, out;
    if (PyObject_GetBuffer(args[1], &plan, PyBUF_SIMPLE) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[2], &x, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&plan);
        return NULL;
    }
    if (PyObject_GetBuffer(args[3], &out, PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&plan);
        PyBuffer_Release(&x);
        return NULL;
    }
    PyObject *result = NULL;
    const char *small_in[8];
    const char **in = small_in;
    const int64_t *pl = (const int64_t *)plan.buf;
    size_t words = (size_t)plan.len / sizeof(int64_t);
    int64_t n = words >= PLAN_HEAD ? pl[2] : 0, me = words >= PLAN_HEAD ? pl[3] : -1;
    size_t size = red->itemsize;
    if (n < 1 || me < 0 || me >= n || (size_t)n > (words - PLAN_HEAD) / PLAN_STRIDE) {
        PyErr_SetString(PyExc_ValueError, "exchange_reduce: not a plan");
        goto done;
    }
    if (x.len != out.len || x.len <= 0 || x.len > pl[1] || (size_t)x.len % size ||
        (overlaps(&x, &out) && x.buf != out.buf)) {
        PyErr_SetString(PyExc_ValueError,
                        "exchange_reduce: x and out must be the same whole number of "
                        "elements, at most one exchange buffer, the same memory or apart");
        goto done;
    }
    if (n > 8 && !(in = PyMem_Calloc((size_t)n, sizeof(char *)))) {
        PyErr_NoMemory();
        goto done;
    }
    char *base = (char *)(intptr_t)pl[0];
    volatile uint32_t *u32 = (volatile uint32_t *)base;
    int64_t *q = (int64_t *)base;
    const int64_t *mine = pl + PLAN_HEAD + PLAN_STRIDE * me;
    int par = (int)(k & 1);
    int64_t nb = (int64_t)x.len;
    memcpy(base + mine[P_BUF0 + par], x.buf, (size_t)nb);
    /* publish: the words of this buffer, then the sequence number (release:
     * a peer that sees k sees the data and the words) */
    volatile int64_t *w = q + mine[P_META0 + par];
    w[0] = nb;
    w[1] = call;
    w[2] = key;
    __atomic_store_n(q + mine[P_SEQ], (int64_t)k, __ATOMIC_RELEASE);
    ring_peers(u32, pl + PLAN_HEAD, PLAN_STRIDE, n, me);
    int64_t late = -1;
    for (int poll = 0; poll < XR_POLLS; poll++) {
        late = -1;
        for (int64_t p = 0; p < n && late < 0; p++)
            if (p != me && __atomic_load_n(q + pl[PLAN_HEAD + PLAN_STRIDE * p + P_SEQ],
                                           __ATOMIC_ACQUIRE) < k)
                late = p;
        if (late < 0)
            break;
    }
    if (late >= 0) {
        result = PyLong_FromLong(XR_LATE);
        goto done;
    }
    int bad = 0;
    for (int64_t p = 0; p < n; p++) {
        const int64_t *r = pl + PLAN_HEAD + PLAN_STRIDE * p;
        volatile const int64_t *m = q + r[P_META0 + par];
        if (p != me && (m[0] != nb || m[1] != call || m[2] != key))
            bad = 1;
        in[p] = base + r[P_BUF0 + par];
    }
    if (!bad)
        red->reduce(red, (char *)out.buf, in, (size_t)n, (size_t)nb / size);
    result = PyLong_FromLong(bad ? XR_MISMATCH : XR_DONE);
done:
    if (in != small_in)
        PyMem_Free(in);
    PyBuffer_Release(&plan);
    PyBuffer_Release(&x);
    PyBuffer_Release(&out);
    return result;
}
#endif

#ifdef EXCHANGE_REDUCE
#include <sys/uio.h>
/* The one-copy gather (transports/shm/one_copy.py, OneCopy.gather): publish
 * this rank's source, read block p of the output from every peer p with
 * process_vm_readv, copy the own block, say done and look for the peers'
 * done, in one call: the protocol of OneCopy.expose, Remote.read and
 * Remote.finish word for word.  The plan (an int64 array that OneCopy builds
 * once):
 *   [base address, N, this rank, the block's word offsets D_POSTED, D_ADDR,
 *    D_BYTES, D_CALL, D_KEY, D_DONE, D_HUGE,
 *    then per rank: doorbell (u32 index), its coll SLEEPING flag (u32
 *    index), its one-copy block (i64 index), its process id].
 * Like exchange_reduce it holds the GIL while it looks for peers (a bounded
 * number of polls) and hands a late peer to Python's wait; the reads and the
 * copy run without the GIL, as ctypes' system calls and numpy's copies do. */
enum { OC_HEAD = 10, OC_STRIDE = 4 };
enum { OC_BELL, OC_SLEEP, OC_BLOCK, OC_PID };
_Static_assert(OC_BELL == 0 && OC_SLEEP == 1, "ring_peers reads a rank's doorbell, then its flag");
enum { OC_DONE = 0, OC_LATE = 1, OC_MISMATCH = 2, OC_LATE_DONE = 3 };

/* whether every peer's word `field` of its block is k, within XR_POLLS looks */
static int oc_all(const int64_t *pl, int64_t *q, int64_t n, int64_t me, int64_t field, int64_t k)
{
    for (int poll = 0; poll < XR_POLLS; poll++) {
        int64_t p = 0;
        for (; p < n; p++)
            if (p != me && __atomic_load_n(q + pl[OC_HEAD + OC_STRIDE * p + OC_BLOCK] + field,
                                           __ATOMIC_ACQUIRE) != k)
                break;
        if (p == n)
            return 1;
    }
    return 0;
}

/* one_copy_gather(plan, phase, k, call, key, x, xbytes, out, nb, off, own_off, own,
 * only): addresses and sizes as ints (the caller has checked its arrays).
 * Phase 0 publishes x's xbytes bytes as publication k and looks for the
 * peers'; 1 goes on once Python has waited for them.  Then out + p * nb gets
 * bytes [off, off + nb) of every peer p's source, and (own: 1 plain, 2 with
 * streaming stores) out + rank * nb gets x + own_off's nb bytes; with only
 * a rank (a scatter's root), out itself gets those bytes of only's source
 * alone (none where only is this rank), and the own block goes to out too.
 * Returns
 * OC_DONE; OC_LATE where a peer has not published (call again with phase 1
 * once it has); OC_MISMATCH where a peer is in another call or call size;
 * OC_LATE_DONE where every read is done and a peer has not finished (Python
 * waits for its done word); (4, p, published bytes) where peer p published
 * fewer than off + nb bytes; (5, p, errno) where reading from p failed
 * (nothing said done then). */
static PyObject *one_copy_gather(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 13) {
        PyErr_SetString(PyExc_TypeError, "one_copy_gather takes 13 arguments");
        return NULL;
    }
    long long v[12];
    for (int i = 0; i < 12; i++)
        v[i] = PyLong_AsLongLong(args[i + 1]);
    if (PyErr_Occurred())
        return NULL;
    long long phase = v[0], k = v[1], call = v[2], key = v[3], xaddr = v[4], xbytes = v[5];
    long long oaddr = v[6], nb = v[7], off = v[8], own_off = v[9], own = v[10], only = v[11];
    Py_buffer plan;
    if (PyObject_GetBuffer(args[0], &plan, PyBUF_SIMPLE) < 0)
        return NULL;
    const int64_t *pl = (const int64_t *)plan.buf;
    size_t words = (size_t)plan.len / sizeof(int64_t);
    int64_t n = words >= OC_HEAD ? pl[1] : 0, me = words >= OC_HEAD ? pl[2] : -1;
    PyObject *result = NULL;
    if (n < 2 || me < 0 || me >= n || (size_t)n > (words - OC_HEAD) / OC_STRIDE || k < 1 ||
        only < -1 || only >= n ||
        nb < 0 || off < 0 || xbytes < 0 || (own && (own_off < 0 || own_off + nb > xbytes))) {
        PyErr_SetString(PyExc_ValueError, "one_copy_gather: bad arguments");
        goto done;
    }
    char *base = (char *)(intptr_t)pl[0];
    volatile uint32_t *u32 = (volatile uint32_t *)base;
    int64_t *q = (int64_t *)base;
    const int64_t F_POSTED = pl[3], F_ADDR = pl[4], F_BYTES = pl[5], F_CALL = pl[6];
    const int64_t F_KEY = pl[7], F_DONE = pl[8], F_HUGE = pl[9];
    volatile int64_t *mine = q + pl[OC_HEAD + OC_STRIDE * me + OC_BLOCK];
    if (phase == 0) {
        mine[F_ADDR] = xbytes ? xaddr : 0;
        mine[F_BYTES] = xbytes;
        mine[F_HUGE] = 0;
        mine[F_CALL] = call;
        mine[F_KEY] = key;
        __atomic_store_n((int64_t *)&mine[F_POSTED], (int64_t)k, __ATOMIC_RELEASE);
        ring_peers(u32, pl + OC_HEAD, OC_STRIDE, n, me);
        if (!oc_all(pl, q, n, me, F_POSTED, k)) {
            result = PyLong_FromLong(OC_LATE);
            goto done;
        }
    }
    for (int64_t p = 0; p < n; p++) {
        volatile int64_t *b = q + pl[OC_HEAD + OC_STRIDE * p + OC_BLOCK];
        if (p != me && (b[F_CALL] != call || b[F_KEY] != key)) {
            result = PyLong_FromLong(OC_MISMATCH);
            goto done;
        }
    }
    for (int64_t p = 0; p < n; p++) {
        volatile int64_t *b = q + pl[OC_HEAD + OC_STRIDE * p + OC_BLOCK];
        if (p != me && (only < 0 || p == only) && nb && off + nb > b[F_BYTES]) {
            result = Py_BuildValue("iLL", 4, (long long)p, (long long)b[F_BYTES]);
            goto done;
        }
    }
    int64_t failed = -1;
    int err = 0;
    Py_BEGIN_ALLOW_THREADS
    for (int64_t i = 1; i < n && nb && failed < 0; i++) {
        int64_t p = (me + i) % n;
        if (only >= 0 && p != only)
            continue;
        const int64_t *r = pl + OC_HEAD + OC_STRIDE * p;
        char *src = (char *)(intptr_t)q[r[OC_BLOCK] + F_ADDR] + off;
        char *dst = (char *)(intptr_t)oaddr + (only < 0 ? p * nb : 0);
        long long got = 0;
        while (got < nb) {
            struct iovec local = {dst + got, (size_t)(nb - got)};
            struct iovec remote = {src + got, (size_t)(nb - got)};
            ssize_t m = syscall(SYS_process_vm_readv, (pid_t)r[OC_PID], &local, 1UL, &remote,
                                1UL, 0UL);
            if (m <= 0) {
                failed = p;
                err = m < 0 ? errno : EIO;
                break;
            }
            got += m;
        }
    }
    if (failed < 0 && own && nb) {
        char *dst = (char *)(intptr_t)oaddr + (only < 0 ? me * nb : 0);
        const char *src = (const char *)(intptr_t)xaddr + own_off;
        if (own == 2)
            stream_copy_bytes(dst, src, (size_t)nb);
        else
            memcpy(dst, src, (size_t)nb);
    }
    Py_END_ALLOW_THREADS
    if (failed >= 0) {
        result = Py_BuildValue("iLi", 5, (long long)failed, err);
        goto done;
    }
    __atomic_store_n((int64_t *)&mine[F_DONE], (int64_t)k, __ATOMIC_RELEASE);
    ring_peers(u32, pl + OC_HEAD, OC_STRIDE, n, me);
    result = PyLong_FromLong(oc_all(pl, q, n, me, F_DONE, k) ? OC_DONE : OC_LATE_DONE);
done:
    PyBuffer_Release(&plan);
    return result;
}
#endif

#if defined(__x86_64__) || defined(__aarch64__)
#define MPI_SWAP
#include <limits.h>
#include <sched.h>

/* MPI's calls, bound at run time (mpi_bind) to the library that mpi4py has
 * loaded, so that nothing here is built against an mpi.h: the same object
 * serves MPICH and Open MPI.  Handles (communicators, datatypes, requests)
 * are ints in one and pointers in the other; each is passed in a register
 * or an 8-byte stack slot of its own on these two ABIs, so a 64-bit integer
 * carries either, and a request is read from an 8-byte zeroed slot whose
 * width (4 or 8 bytes) mpi_bind is told. */
typedef int (*mpi_post_fn)(void *, int, intptr_t, int, int, intptr_t, void *);
typedef int (*mpi_test_fn)(void *, int *, void *);
typedef int (*mpi_count_fn)(const void *, intptr_t, int *);
typedef int (*mpi_cvar_write_fn)(void *, const void *);

static struct {
    mpi_post_fn isend, irecv;
    mpi_test_fn test;
    mpi_count_fn get_count;
    intptr_t byte;           /* MPI_BYTE */
    int req_size;            /* sizeof(MPI_Request): 4 or 8 */
    mpi_cvar_write_fn cvar_write; /* the bound on refused sends (transports/_bounded.py) */
    void *cvar;
    int bound, old;
} mpi;

/* mpi_bind(isend, irecv, test, get_count, byte, req_size, cvar_write, cvar,
 * bound, old): the addresses of MPI_Isend, MPI_Irecv, MPI_Test and
 * MPI_Get_count, MPI_BYTE's handle, sizeof(MPI_Request); then
 * MPI_T_cvar_write, the bound's cvar handle and the values to write around
 * a bounded send (0 for cvar_write: no bound) */
static PyObject *mpi_bind(PyObject *self, PyObject *args)
{
    unsigned long long isend, irecv, test, count, byte, write, cvar;
    int req_size, bound, old;
    if (!PyArg_ParseTuple(args, "KKKKKiKKii", &isend, &irecv, &test, &count, &byte, &req_size,
                          &write, &cvar, &bound, &old))
        return NULL;
    if (!isend || !irecv || !test || !count || (req_size != 4 && req_size != 8)) {
        PyErr_SetString(PyExc_ValueError, "mpi_bind: missing calls or a request of another size");
        return NULL;
    }
    mpi.isend = (mpi_post_fn)(uintptr_t)isend;
    mpi.irecv = (mpi_post_fn)(uintptr_t)irecv;
    mpi.test = (mpi_test_fn)(uintptr_t)test;
    mpi.get_count = (mpi_count_fn)(uintptr_t)count;
    mpi.byte = (intptr_t)byte;
    mpi.req_size = req_size;
    mpi.cvar_write = (mpi_cvar_write_fn)(uintptr_t)write;
    mpi.cvar = (void *)(uintptr_t)cvar;
    mpi.bound = bound;
    mpi.old = old;
    Py_RETURN_NONE;
}

/* a request's handle as mpi4py writes it (MPI._handleof): an int handle
 * sign-extended, as an unsigned 64-bit integer */
static unsigned long long req_value(const int64_t *slot)
{
    return (unsigned long long)(mpi.req_size == 4 ? (int64_t) * (const int32_t *)slot : *slot);
}

/* One send and one receive (either may be absent: dest or source < 0),
 * posted and polled as mpi_swap says below; the GIL is released. */
typedef struct {
    int64_t sreq, rreq;
    int sdone, rdone, got, state, on_send;
} swap_result;

static void swap_run(const void *sbuf, int slen, int dest, void *rbuf, int rlen, int source,
                     int tag, intptr_t comm, long polls, int bounded, swap_result *o)
{
    int64_t st[16]; /* an MPI_Status of either library, with room */
    int err = 0;
    o->sreq = o->rreq = 0;
    o->sdone = dest < 0, o->rdone = source < 0;
    o->got = 0, o->state = 0, o->on_send = 0;
    if (source >= 0)
        err = mpi.irecv(rbuf, rlen, mpi.byte, source, tag, comm, &o->rreq);
    if (!err && dest >= 0) {
        int b = bounded && mpi.cvar_write;
        if (b)
            mpi.cvar_write(mpi.cvar, &mpi.bound);
        err = mpi.isend((void *)sbuf, slen, mpi.byte, dest, tag, comm, &o->sreq);
        if (b)
            mpi.cvar_write(mpi.cvar, &mpi.old);
        if (err && bounded) {
            o->state = 2; /* refused (or failed: Python's post tells which) */
            err = 0;
            o->sdone = 1;
            o->sreq = 0;
        } else
            o->on_send = 1;
    }
    for (long i = 0; !err && i < polls; i++) {
        int flag = 0;
        if (!o->rdone) {
            o->on_send = 0;
            if ((err = mpi.test(&o->rreq, &flag, st)))
                break;
            if (flag) {
                o->rdone = 1;
                if ((err = mpi.get_count(st, mpi.byte, &o->got)))
                    break;
            }
        }
        if (!o->sdone) {
            o->on_send = 1;
            if ((err = mpi.test(&o->sreq, &flag, st)))
                break;
            o->sdone = flag;
        }
        if (o->rdone && o->sdone)
            break;
        sched_yield();
    }
    if (err)
        o->state = 3, o->got = err;
    else if (o->state == 0 && !(o->rdone && o->sdone))
        o->state = 1;
}

/* whether a send-receive finished whole: both done, the message rlen bytes */
static int swap_whole(const swap_result *o, int source, int rlen)
{
    return o->state == 0 && (source < 0 || o->got == rlen);
}

/* (state, send, recv, got, on_send) of a send-receive that did not finish
 * whole, as mpi_swap returns it (prefix: the step, for mpi_steps) */
static PyObject *swap_tuple(const swap_result *o, Py_ssize_t step)
{
    unsigned long long sh = o->sdone ? 0ULL : req_value(&o->sreq);
    unsigned long long rh = o->rdone ? 0ULL : req_value(&o->rreq);
    if (step < 0)
        return Py_BuildValue("(iKKii)", o->state, sh, rh, o->got, o->on_send);
    return Py_BuildValue("(niKKii)", step, o->state, sh, rh, o->got, o->on_send);
}

static int mpi_bound(void)
{
    if (!mpi.isend)
        PyErr_SetString(PyExc_RuntimeError, "transports._native: mpi_bind first");
    return mpi.isend != NULL;
}

/* mpi_swap(sbuf, dest, rbuf, source, tag, comm, polls, bounded): post a
 * receive of rbuf's bytes from source, then a send of sbuf's to dest (its
 * post between the bound's writes where bounded), and poll both, giving
 * the core up between polls (more ranks than cores), at most polls times.
 * None: both done and the message filled rbuf.  Else a tuple (state, send,
 * recv, got, on_send): state 0 done, got the bytes that came (not rbuf's
 * size); 1 one is pending after the polls; 2 the send was refused
 * (MPIX_ERR_EAGAIN under the bound: nothing posted); 3 an MPI call failed
 * (got: its error code; on_send: 1 where it was the send's, 0 the
 * receive's).  send and recv: the handles of requests still pending, 0 for
 * one that is done or was never posted. */
static PyObject *mpi_swap(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError,
                        "mpi_swap(sbuf, dest, rbuf, source, tag, comm, polls, bounded) takes 8 arguments");
        return NULL;
    }
    if (!mpi_bound())
        return NULL;
    long dest = PyLong_AsLong(args[1]), source = PyLong_AsLong(args[3]);
    long tag = PyLong_AsLong(args[4]), polls = PyLong_AsLong(args[6]);
    unsigned long long comm = PyLong_AsUnsignedLongLongMask(args[5]);
    int bounded = PyObject_IsTrue(args[7]);
    if (PyErr_Occurred() || bounded < 0)
        return NULL;
    if (dest < 0 || source < 0) {
        PyErr_SetString(PyExc_ValueError, "mpi_swap: a negative rank");
        return NULL;
    }
    Py_buffer sb, rb;
    if (PyObject_GetBuffer(args[0], &sb, PyBUF_SIMPLE) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[2], &rb, PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&sb);
        return NULL;
    }
    if (sb.len > INT_MAX || rb.len > INT_MAX) {
        PyBuffer_Release(&sb);
        PyBuffer_Release(&rb);
        PyErr_SetString(PyExc_ValueError, "mpi_swap: a message of 2 GiB or more");
        return NULL;
    }
    swap_result o;
    Py_BEGIN_ALLOW_THREADS
    swap_run(sb.buf, (int)sb.len, (int)dest, rb.buf, (int)rb.len, (int)source, (int)tag,
             (intptr_t)comm, polls, bounded, &o);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&sb);
    int rlen = (int)rb.len;
    PyBuffer_Release(&rb);
    if (swap_whole(&o, 0, rlen))
        Py_RETURN_NONE;
    return swap_tuple(&o, -1);
}

/* mpi_steps's kinds of step (transports/_swap.py has the same numbers):
 * send and receive into tmp, then reduce tmp into buf; send; receive into
 * tmp, then reduce; receive into buf; send and receive into buf; copy src
 * into buf */
enum { STEP_SWAP_REDUCE = 0, STEP_SEND = 1, STEP_RECV_REDUCE = 2, STEP_RECV = 3, STEP_SWAP = 4,
       STEP_COPY = 5, STEP_OUT = 6 };
enum { STEP_WORDS = 7 }; /* kind, to, from, send offset, length, receive offset, length */

/* a checked schedule and its buffers, as steps_go runs it */
typedef struct {
    const int32_t *steps;
    Py_ssize_t nsteps, unit;
    const char *src, *elsewhere;
    char *buf, *tmp, *dst;
    const collectives_reducer *red;
    intptr_t comm;
    long polls;
    int bounded;
} steps_args;

/* whether steps start.. of a schedule fit buffers of these lengths (dlen
 * -1: no dst), their ranks below ``ranks``; else -1, ValueError set */
static int steps_check(const int32_t *steps, Py_ssize_t nsteps, Py_ssize_t start,
                       Py_ssize_t unit, Py_ssize_t n, Py_ssize_t tmplen, Py_ssize_t srclen,
                       Py_ssize_t dlen, Py_ssize_t ranks, const collectives_reducer *red)
{
    if (unit < 0 || start < 0 || start > nsteps || (red && unit % (Py_ssize_t)red->itemsize)) {
        PyErr_SetString(PyExc_ValueError, "mpi_steps: start out of range or a unit of part "
                                          "elements");
        return -1;
    }
    for (Py_ssize_t k = start; k < nsteps; k++) {
        const int32_t *w = steps + STEP_WORDS * k;
        int kind = w[0], reduces = kind == STEP_SWAP_REDUCE || kind == STEP_RECV_REDUCE;
        long long so = w[3], sl = w[4], ro = w[5], rl = w[6];
        if (kind < STEP_SWAP_REDUCE || kind > STEP_OUT || w[1] < 0 || w[1] >= ranks ||
            w[2] < 0 || w[2] >= ranks ||
            so < 0 || sl < 0 || ro < 0 || rl < 0 || (ro + rl) * unit > n ||
            (kind != STEP_OUT && (so + sl) * unit > n) ||
            sl * unit > INT_MAX || rl * unit > INT_MAX || (reduces && (!red || rl * unit > tmplen)) ||
            (kind == STEP_COPY && rl * unit > srclen) ||
            (kind == STEP_OUT && (so + rl) * unit > dlen)) {
            PyErr_SetString(PyExc_ValueError, "mpi_steps: a step of another kind or rank, out of "
                                              "src, buf, tmp or dst, of 2 GiB or more, or a "
                                              "reduction without a reducer");
            return -1;
        }
    }
    return 0;
}

/* run steps start.. of a checked schedule: nsteps where every one is done,
 * else the step that did not finish whole (``o`` says how) */
static Py_ssize_t steps_go(const steps_args *a, Py_ssize_t start, int tag, swap_result *o)
{
    Py_ssize_t unit = a->unit;
    char *buf = a->buf;
    for (Py_ssize_t k = start; k < a->nsteps; k++) {
        const int32_t *w = a->steps + STEP_WORDS * k;
        int kind = w[0], to = w[1];
        if (kind == STEP_COPY) {
            if (buf + w[5] * unit != a->src)
                memmove(buf + w[5] * unit, a->src, (size_t)(w[6] * unit));
            continue;
        }
        if (kind == STEP_OUT) {
            memmove(a->dst + w[3] * unit, buf + w[5] * unit, (size_t)(w[6] * unit));
            continue;
        }
        int sends = kind == STEP_SWAP_REDUCE || kind == STEP_SEND || kind == STEP_SWAP;
        int reduces = kind == STEP_SWAP_REDUCE || kind == STEP_RECV_REDUCE;
        int source = kind == STEP_SEND ? -1 : w[2];
        int rlen = (int)(w[6] * unit);
        char *at = buf + w[5] * unit;
        Py_BEGIN_ALLOW_THREADS
        swap_run(buf + w[3] * unit, (int)(w[4] * unit), sends ? to : -1, reduces ? a->tmp : at,
                 rlen, source, tag, a->comm, a->polls,
                 sends && a->bounded && a->elsewhere[to], o);
        Py_END_ALLOW_THREADS
        if (!swap_whole(o, source, rlen))
            return k;
        if (reduces) {
            const char *in[2] = {at, a->tmp};
            a->red->reduce(a->red, at, in, 2, (size_t)rlen / a->red->itemsize);
        }
    }
    return a->nsteps;
}

/* mpi_steps(reducer, steps, src, buf, tmp, start, tag, comm, polls,
 * elsewhere, bounded, unit, dst): a schedule of send-receives with one peer
 * each way, run from step ``start``: ``steps`` holds int32 words (kind,
 * the rank sent to, the rank received from, send offset, send length,
 * receive offset, receive length), offsets and lengths in units of
 * ``unit`` bytes of buf.  A reducing step reduces
 * what came into tmp into buf at the receive offset: buf = op(buf, tmp).
 * A copy step copies src's first bytes to the receive offset (none where
 * src is that part of buf itself).  An out step copies the receive length
 * from buf at the receive offset into dst (None where no step is one) at the
 * send offset.
 * The reductions are the reducer's (transports/native_api.h), with the
 * GIL held; every step's messages as mpi_swap's, a send bounded where
 * ``bounded`` and elsewhere[to] (a byte per rank) is set.  None: every
 * step done.  Else (step, state, send, recv, got, on_send): that step did
 * not finish whole (mpi_swap's tuple), the ones before it did. */
static PyObject *mpi_steps(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 13) {
        PyErr_SetString(PyExc_TypeError, "mpi_steps(reducer, steps, src, buf, tmp, start, tag, "
                                         "comm, polls, elsewhere, bounded, unit, dst) takes 13 "
                                         "arguments");
        return NULL;
    }
    if (!mpi_bound())
        return NULL;
    const collectives_reducer *red = NULL;
    if (args[0] != Py_None && !(red = reducer_of(args[0])))
        return NULL;
    Py_ssize_t start = PyLong_AsSsize_t(args[5]), unit = PyLong_AsSsize_t(args[11]);
    long tag = PyLong_AsLong(args[6]), polls = PyLong_AsLong(args[8]);
    unsigned long long comm = PyLong_AsUnsignedLongLongMask(args[7]);
    int bounded = PyObject_IsTrue(args[10]);
    if (PyErr_Occurred() || bounded < 0)
        return NULL;
    Py_buffer bufs[6]; /* steps, src, buf, tmp, elsewhere, dst */
    static const int flags[6] = {PyBUF_SIMPLE, PyBUF_SIMPLE, PyBUF_WRITABLE, PyBUF_WRITABLE,
                                 PyBUF_SIMPLE, PyBUF_WRITABLE};
    static const int which[6] = {1, 2, 3, 4, 9, 12};
    int got_bufs = 0, nbufs = args[12] == Py_None ? 5 : 6;
    PyObject *result = NULL;
    for (; got_bufs < nbufs; got_bufs++)
        if (PyObject_GetBuffer(args[which[got_bufs]], &bufs[got_bufs], flags[got_bufs]) < 0)
            goto done;
    steps_args a = {(const int32_t *)bufs[0].buf,
                    bufs[0].len / (Py_ssize_t)(STEP_WORDS * sizeof(int32_t)), unit,
                    bufs[1].buf, bufs[4].buf, bufs[2].buf, bufs[3].buf,
                    nbufs == 6 ? bufs[5].buf : NULL, red, (intptr_t)comm, polls, bounded};
    if (steps_check(a.steps, a.nsteps, start, unit, bufs[2].len, bufs[3].len, bufs[1].len,
                    nbufs == 6 ? bufs[5].len : -1, bufs[4].len, red) < 0)
        goto done;
    swap_result o;
    Py_ssize_t k = steps_go(&a, start, (int)tag, &o);
    if (k < a.nsteps) {
        result = swap_tuple(&o, k);
        goto done;
    }
    result = Py_None;
    Py_INCREF(result);
done:
    while (got_bufs > 0)
        PyBuffer_Release(&bufs[--got_bufs]);
    return result;
}

/* A lane: one small call's compiled steps, ready to run again and again
 * (collectives/communicator.py, Communicator._small_call; MpiEndpoint.lane
 * in transports/mpi.py): the schedule, the scratch it works in, and the
 * words of the communicator that each call reads and moves on, so that a
 * call is one C call from Python:
 *   seqs[0] the sequence number of the last collective, seqs[1] whether
 *     lanes may run now (0 while calls are queued, after a failure, closed);
 *   cells[0] the calls of the size class so far (adaptation's count),
 *     cells[1] the count below which its calls run compiled, cells[2] the
 *     identity of the algorithm they run (the lane's ``run``, else another),
 *     cells[3] the count from which they are timed: call cells[3] + i
 *     writes its start and end (CLOCK_MONOTONIC, ns: Python's
 *     time.perf_counter) to cells[4 + 2i] and cells[5 + 2i], for i below
 *     LANE_SLOTS (a call that a late peer hands on to Python: its end
 *     here);
 *   board[a], board[k]: this rank's arrival word and call size where the
 *     transport notes arrivals in memory (hier's hosts), else none (not
 *     held: see lane_new);
 *   counts[0..3] += each call's bytes (sent, to other hosts, received, from
 *     them), which the endpoint adds to its counters when asked.
 * Every 64th sequence number goes through Python (set_arrived's look at
 * the peers' notices), as does a call that adaptation times. */
enum { LANE_VIEWS = 8, LANE_SLOTS = 16 };
typedef struct {
    steps_args a;
    Py_buffer views[LANE_VIEWS];
    int nviews, scratch, ndim;
    int64_t *seqs, *cells, *counts;
    volatile int64_t *arrived, *arrived_key;
    int64_t run, key, keytag, per[4];
    Py_ssize_t inplace_at;
    long seqmask;
    Py_ssize_t xbytes, obytes, shape[8];
    PyObject *dtype, *alloc, *reducer;
} lane_t;

#define LANE_CAPSULE "transports._native.lane"

static void lane_free(PyObject *cap)
{
    lane_t *L = (lane_t *)PyCapsule_GetPointer(cap, LANE_CAPSULE);
    if (!L)
        return;
    while (L->nviews > 0)
        PyBuffer_Release(&L->views[--L->nviews]);
    Py_XDECREF(L->dtype);
    Py_XDECREF(L->alloc);
    Py_XDECREF(L->reducer);
    PyMem_Free(L);
}

/* a view held for the lane's life (its object cannot resize meanwhile) */
static char *lane_view(lane_t *L, PyObject *obj, int flags, Py_ssize_t least)
{
    Py_buffer *v = &L->views[L->nviews];
    if (PyObject_GetBuffer(obj, v, flags | PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    L->nviews++;
    if (v->len < least) {
        PyErr_SetString(PyExc_ValueError, "lane_new: a buffer too short");
        return NULL;
    }
    return v->buf;
}

/* lane_new(seqs, cells, counts, board, a, k, steps, scratch, tmp, reducer,
 * comm, polls, elsewhere, bounded, unit, run, key, keytag, seqmask, xbytes,
 * dtype, shape, alloc, per, inplace_at): a lane (above); ``inplace_at``
 * the offset in the output at which x may lie (an all_gather in place:
 * the steps read x in their copy steps alone, before any step writes that
 * part), -1 where x and the output must lie apart; ``board`` None where the
 * transport has no arrival words, ``scratch`` None where the steps work in
 * the output itself, ``reducer`` None where they do not reduce; ``shape``
 * the output's, ``alloc()`` makes one; ``per`` the four byte counts of a
 * call. */
static PyObject *lane_new(PyObject *self, PyObject *args)
{
    PyObject *seqs, *cells, *counts, *board, *steps, *scratch, *tmp, *reducer, *elsewhere;
    PyObject *dtype, *shape, *alloc;
    Py_ssize_t a_at, k_at, unit, xbytes;
    unsigned long long comm;
    long polls, seqmask;
    int bounded;
    long long run, key, keytag, per[4];
    Py_ssize_t inplace_at;
    if (!PyArg_ParseTuple(args, "OOOOnnOOOOKlOpnLLLlnOO!O(LLLL)n", &seqs, &cells, &counts,
                          &board, &a_at, &k_at, &steps, &scratch, &tmp, &reducer, &comm, &polls,
                          &elsewhere, &bounded, &unit, &run, &key, &keytag, &seqmask, &xbytes,
                          &dtype, &PyTuple_Type, &shape, &alloc, &per[0], &per[1], &per[2],
                          &per[3], &inplace_at))
        return NULL;
    if (!mpi_bound())
        return NULL;
    Py_ssize_t ndim = PyTuple_GET_SIZE(shape);
    if (ndim > 8 || unit <= 0 || xbytes <= 0 || a_at < 0 || k_at < 0) {
        PyErr_SetString(PyExc_ValueError, "lane_new: a shape of over 8 dimensions, or a size "
                                          "out of range");
        return NULL;
    }
    const collectives_reducer *red = NULL;
    if (reducer != Py_None && !(red = reducer_of(reducer)))
        return NULL;
    lane_t *L = (lane_t *)PyMem_Calloc(1, sizeof(lane_t));
    if (!L)
        return PyErr_NoMemory();
    PyObject *cap = PyCapsule_New(L, LANE_CAPSULE, lane_free);
    if (!cap) {
        PyMem_Free(L);
        return NULL;
    }
    L->obytes = 1;
    L->ndim = (int)ndim;
    for (Py_ssize_t i = 0; i < ndim; i++) {
        L->shape[i] = PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, i));
        L->obytes *= L->shape[i];
    }
    if (PyErr_Occurred())
        goto fail;
    L->dtype = dtype, L->alloc = alloc, L->reducer = reducer;
    Py_INCREF(dtype), Py_INCREF(alloc), Py_INCREF(reducer);
    {
        PyObject *isz = PyObject_GetAttrString(dtype, "itemsize");
        Py_ssize_t itemsize = isz ? PyLong_AsSsize_t(isz) : -1;
        Py_XDECREF(isz);
        if (itemsize <= 0)
            goto fail;
        L->obytes *= itemsize;
    }
    if (!(L->seqs = (int64_t *)lane_view(L, seqs, PyBUF_WRITABLE, 2 * 8)) ||
        !(L->cells = (int64_t *)lane_view(L, cells, PyBUF_WRITABLE, (4 + 2 * LANE_SLOTS) * 8)) ||
        !(L->counts = (int64_t *)lane_view(L, counts, PyBUF_WRITABLE, 4 * 8)))
        goto fail;
    if (board != Py_None) {
        /* not held: the transport unmaps it at close, after which the
         * communicator keeps seqs[1] at 0 and no call reaches it */
        Py_buffer bv;
        if (PyObject_GetBuffer(board, &bv, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
            goto fail;
        int64_t *b = (int64_t *)bv.buf;
        Py_ssize_t blen = bv.len;
        PyBuffer_Release(&bv);
        if (blen < 8 * (1 + (a_at > k_at ? a_at : k_at))) {
            PyErr_SetString(PyExc_ValueError, "lane_new: a board too short");
            goto fail;
        }
        L->arrived = b + a_at, L->arrived_key = b + k_at;
    }
    const char *st = lane_view(L, steps, PyBUF_SIMPLE, 0);
    if (!st)
        goto fail;
    Py_ssize_t slen = L->views[L->nviews - 1].len;
    char *sc = NULL;
    Py_ssize_t n = L->obytes;
    if (scratch != Py_None) {
        if (!(sc = lane_view(L, scratch, PyBUF_WRITABLE, 0)))
            goto fail;
        n = L->views[L->nviews - 1].len;
    }
    char *tm = lane_view(L, tmp, PyBUF_WRITABLE, 0);
    if (!tm)
        goto fail;
    Py_ssize_t tmplen = L->views[L->nviews - 1].len;
    const char *el = lane_view(L, elsewhere, PyBUF_SIMPLE, 0);
    if (!el)
        goto fail;
    Py_ssize_t ranks = L->views[L->nviews - 1].len;
    steps_args a = {(const int32_t *)st, slen / (Py_ssize_t)(STEP_WORDS * sizeof(int32_t)), unit,
                    NULL, el, sc, tm, NULL, red, (intptr_t)comm, polls, bounded};
    /* src: the x of a call (xbytes); dst: its output where there is scratch */
    if (steps_check(a.steps, a.nsteps, 0, unit, n, tmplen, xbytes, sc ? L->obytes : -1, ranks,
                    red) < 0)
        goto fail;
    L->a = a;
    L->scratch = sc != NULL;
    L->run = run, L->key = key, L->keytag = keytag, L->seqmask = seqmask, L->xbytes = xbytes;
    L->inplace_at = inplace_at >= 0 && inplace_at + xbytes <= L->obytes ? inplace_at : -1;
    for (int i = 0; i < 4; i++)
        L->per[i] = per[i];
    return cap;
fail:
    Py_DECREF(cap);
    return NULL;
}

/* run a lane's steps on x into out, as call #seq; out's reference is the
 * caller's, handed on (the result) */
static PyObject *lane_go(lane_t *L, Py_buffer *xv, Py_buffer *ov, PyObject *out, int64_t seq)
{
    steps_args a = L->a;
    a.src = xv->buf;
    if (L->scratch)
        a.dst = ov->buf;
    else
        a.buf = ov->buf;
    swap_result o;
    Py_ssize_t k = steps_go(&a, 0, (int)((seq & L->seqmask) | L->keytag), &o);
    PyBuffer_Release(ov);
    PyBuffer_Release(xv);
    if (k == a.nsteps) {
        for (int i = 0; i < 4; i++)
            L->counts[i] += L->per[i];
        return out;
    }
    unsigned long long sh = o.sdone ? 0ULL : req_value(&o.sreq);
    unsigned long long rh = o.rdone ? 0ULL : req_value(&o.rreq);
    PyObject *res = Py_BuildValue("(OLniKKii)", out, (long long)seq, k, o.state, sh, rh, o.got,
                                  o.on_send);
    Py_DECREF(out);
    return res;
}

/* a lane's steps now, in the collective that Python has begun (seqs[0]),
 * on flat x and out of the lane's sizes: as mpi_lane; None where they do
 * not fit (nothing moved) */
static PyObject *lane_now(lane_t *L, PyObject *x, PyObject *out)
{
    Py_buffer xv, ov;
    if (PyObject_GetBuffer(x, &xv, PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    if (PyObject_GetBuffer(out, &ov, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        PyErr_Clear();
        PyBuffer_Release(&xv);
        Py_RETURN_NONE;
    }
    if (xv.len != L->xbytes || ov.len != L->obytes ||
        !((char *)xv.buf + xv.len <= (char *)ov.buf || (char *)ov.buf + ov.len <= (char *)xv.buf)) {
        PyBuffer_Release(&ov);
        PyBuffer_Release(&xv);
        Py_RETURN_NONE;
    }
    Py_INCREF(out);
    return lane_go(L, &xv, &ov, out, L->seqs[0]);
}

/* mpi_lane(lane, x, out[, now]): one call of a lane on x into out (None: a new
 * one; x apart from out, or at the lane's place in it).  With ``now`` true,
 * only its steps, in the call that Python has begun (adaptation's timed
 * calls run the algorithm as the lane would): none of the words below is
 * read or moved on.  The output where every step is done; None where the lane does not
 * take this call (nothing moved, nothing counted: the caller goes the long
 * way); else (out, seq, step, state, send, recv, got, on_send): the call
 * #seq is under way and that step did not finish whole (mpi_steps). */
static PyObject *mpi_lane(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 && nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "mpi_lane(lane, x, out[, now]) takes 3 or 4 arguments");
        return NULL;
    }
    lane_t *L = (lane_t *)PyCapsule_GetPointer(args[0], LANE_CAPSULE);
    if (!L)
        return NULL;
    int64_t *seqs = L->seqs, *cells = L->cells;
    int now = nargs == 4 && PyObject_IsTrue(args[3]) > 0;
    if (now)
        return lane_now(L, args[1], args[2]);
    if (!seqs[1] || cells[2] != L->run || cells[0] >= cells[1] || !((seqs[0] + 1) & 63))
        Py_RETURN_NONE;
    Py_buffer xv, ov;
    if (PyObject_GetBuffer(args[1], &xv, PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    PyObject *out = args[2];
    if (out == Py_None) {
        out = PyObject_CallNoArgs(L->alloc);
        if (!out) {
            PyBuffer_Release(&xv);
            return NULL;
        }
    } else {
        Py_INCREF(out);
        if (Py_TYPE(out) != Py_TYPE(args[1])) {
            PyBuffer_Release(&xv);
            Py_DECREF(out);
            Py_RETURN_NONE;
        }
        PyObject *dt = PyObject_GetAttrString(out, "dtype");
        Py_XDECREF(dt);
        if (dt != L->dtype) {
            PyErr_Clear();
            PyBuffer_Release(&xv);
            Py_DECREF(out);
            Py_RETURN_NONE;
        }
    }
    if (PyObject_GetBuffer(out, &ov, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        PyErr_Clear();
        PyBuffer_Release(&xv);
        Py_DECREF(out);
        Py_RETURN_NONE;
    }
    int fits = xv.len == L->xbytes && ov.len == L->obytes && ov.ndim == L->ndim &&
               ((char *)xv.buf + xv.len <= (char *)ov.buf ||
                (char *)ov.buf + ov.len <= (char *)xv.buf ||
                (L->inplace_at >= 0 && (char *)xv.buf == (char *)ov.buf + L->inplace_at));
    for (int i = 0; fits && i < L->ndim; i++)
        fits = ov.shape[i] == L->shape[i];
    if (!fits) {
        PyBuffer_Release(&ov);
        PyBuffer_Release(&xv);
        Py_DECREF(out);
        Py_RETURN_NONE;
    }
    int64_t slot = cells[0]++ - cells[3];
    struct timespec t0;
    if (slot >= 0 && slot < LANE_SLOTS)
        clock_gettime(CLOCK_MONOTONIC, &t0);
    int64_t seq = ++seqs[0];
    if (L->arrived) { /* 0 while the call size changes, as set_arrived writes them */
        *L->arrived = 0;
        __atomic_thread_fence(__ATOMIC_RELEASE);
        *L->arrived_key = L->key;
        __atomic_thread_fence(__ATOMIC_RELEASE);
        *L->arrived = seq;
    }
    PyObject *res = lane_go(L, &xv, &ov, out, seq);
    if (slot >= 0 && slot < LANE_SLOTS) {
        struct timespec t1;
        clock_gettime(CLOCK_MONOTONIC, &t1);
        cells[4 + 2 * slot] = (int64_t)t0.tv_sec * 1000000000 + t0.tv_nsec;
        cells[5 + 2 * slot] = (int64_t)t1.tv_sec * 1000000000 + t1.tv_nsec;
    }
    return res;
}
#endif

/* address(a): the address of the first element of a numpy array (or of any
 * object with the buffer protocol), without the dict that
 * a.__array_interface__ builds.  Neither a format nor writability is asked
 * for, so that every dtype (bfloat16's too) and read-only arrays answer. */
static PyObject *address(PyObject *self, PyObject *obj)
{
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_STRIDES) < 0)
        return NULL;
    void *p = view.buf;
    PyBuffer_Release(&view);
    return PyLong_FromVoidPtr(p);
}

static PyMethodDef methods[] = {
    {"address", address, METH_O,
     "address(a): the address of the first element of a (the buffer protocol)"},
    {"stream_copy", stream_copy, METH_VARARGS,
     "stream_copy(dst, src, nbytes): a copy between two addresses with streaming stores"},
#ifdef EXCHANGE_REDUCE
    {"exchange_reduce", (PyCFunction)(void (*)(void))exchange_reduce, METH_FASTCALL,
     "exchange_reduce(reducer, plan, x, out, k, call, key): the small all-reduce of x "
     "into out through the shm exchange buffers; 0 done, 1 a peer is late, 2 mismatch"},
    {"one_copy_gather", (PyCFunction)(void (*)(void))one_copy_gather, METH_FASTCALL,
     "one_copy_gather(plan, phase, k, call, key, x, xbytes, out, nb, off, own_off, own, only): "
     "a one-copy gather of blocks on shm; 0 done, 1 a peer is late, 2 mismatch, 3 a peer "
     "has not finished, or a tuple naming the peer that failed"},
#endif
#ifdef MPI_SWAP
    {"mpi_bind", mpi_bind, METH_VARARGS,
     "mpi_bind(isend, irecv, test, get_count, byte, req_size, cvar_write, cvar, bound, old): "
     "the MPI library's calls for mpi_swap"},
    {"mpi_swap", (PyCFunction)(void (*)(void))mpi_swap, METH_FASTCALL,
     "mpi_swap(sbuf, dest, rbuf, source, tag, comm, polls, bounded): one send and one "
     "receive through MPI, polled here; None when both are done"},
    {"mpi_steps", (PyCFunction)(void (*)(void))mpi_steps, METH_FASTCALL,
     "mpi_steps(reducer, steps, src, buf, tmp, start, tag, comm, polls, elsewhere, bounded, "
     "unit, dst): "
     "a schedule of send-receives and reductions through MPI; None when every step is done"},
    {"lane_new", lane_new, METH_VARARGS,
     "lane_new(seqs, cells, counts, board, a, k, steps, scratch, tmp, reducer, comm, polls, "
     "elsewhere, bounded, unit, run, key, keytag, seqmask, xbytes, dtype, shape, alloc, per): "
     "a small call's compiled steps, for mpi_lane"},
    {"mpi_lane", (PyCFunction)(void (*)(void))mpi_lane, METH_FASTCALL,
     "mpi_lane(lane, x, out[, now]): one call of a lane; the output, None where it does not "
     "take the call, or a tuple where a step is unfinished"},
#endif
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native", NULL, -1, methods};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&module); }
