/* collectives._kernels: one-pass k-input reductions.
 *
 * A reduction of k inputs with numpy ufuncs is k-1 passes, each re-reading
 * and re-writing the output; here every input is read once and the output
 * written once.  float16 and bfloat16 are widened to float32, reduced, and
 * rounded once to nearest even at the end (as DeepSpeed's CPU shared-memory
 * all-reduce does for bfloat16).  The instruction set is chosen when the
 * module loads (__builtin_cpu_supports) among functions compiled for each
 * with __attribute__((target)), so a build runs on any x86-64 processor;
 * set_isa() picks a lower one (for tests).  collectives/kernels.py is the
 * Python face: it checks the arrays; this file checks only what memory
 * safety needs (sizes, overlap).  Build with -ffp-contract=off: float32 and
 * float64 results must be bit for bit numpy's sequence of binary ops.
 *
 * reducer(dtype, op) hands a reduction to the transports' compiled exchange
 * (transports._native) as a PyCapsule, by the interface of
 * transports/native_api.h.  The one compiled copy of the library is
 * transports._native's; a k = 1 "reduction" here is memcpy, or the uint8
 * kernel (a copy) where the output streams. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "native_api.h"

#if !defined(__GNUC__)
#error "collectives._kernels needs GCC or clang (vector extensions); the library falls back to numpy"
#endif

/* x86-64, where SSE2 is the baseline, picks among SSE2, AVX2, AVX-512 and
 * AVX-512 with AVX512_BF16 (the processor's bfloat16 rounding, else the same);
 * everything else builds the portable loops alone, as -DCOLLECTIVES_KERNELS_GENERIC
 * does on x86-64 (to test them there) */
#if defined(__x86_64__) && !defined(COLLECTIVES_KERNELS_GENERIC)
#define X86 1
#include <immintrin.h>
#define SFENCE() _mm_sfence()
#else
#define X86 0
#define SFENCE() ((void)0)
#endif

#define CAT_(a, b) a##_##b
#define CAT(a, b) CAT_(a, b)
#define ALWAYS __attribute__((always_inline))
#define LANES(V) (sizeof(V) / sizeof(((V){0})[0]))

/* The ops, on vectors V, with arithmetic in AV: the unsigned twin of a signed
 * integer vector, so that overflow wraps around as numpy's does (signed
 * overflow is undefined in C).  max and min are numpy's exactly: the first
 * operand when it is NaN or strictly greater (smaller), else the second, so
 * NaN propagates and maximum(-0.0, +0.0) is +0.0, maximum(+0.0, -0.0) -0.0. */
#define SELECT(m, a, b) ((__typeof__(a))(((__typeof__(m))(a) & (m)) | ((__typeof__(m))(b) & ~(m))))
#define OP_SUM(V, AV, a, b) ((V)((AV)(a) + (AV)(b)))
#define OP_PROD(V, AV, a, b) ((V)((AV)(a) * (AV)(b)))
#define OP_MAX(V, AV, a, b) SELECT(((a) > (b)) | ((a) != (a)), a, b)
#define OP_MIN(V, AV, a, b) SELECT(((a) < (b)) | ((a) != (a)), a, b)
#define N_OPS 4
static const char *const OP_NAMES[N_OPS] = {"sum", "prod", "max", "min"};

#define DIV_FLOAT(acc, d) ((acc) / (__typeof__((acc)[0]))(d))
#define DIV_NONE(acc, d) (acc)

/* The dtypes: name, element in memory, the vector it computes in and the
 * one its arithmetic wraps in (vectors of the body's width: f32 is
 * float32 lanes), how it loads and stores, whether it divides. */
#define FOR_DTYPES(X)                                  \
    X(float16, uint16_t, f32, f32, F16, DIV_FLOAT)     \
    X(bfloat16, uint16_t, f32, f32, BF16, DIV_FLOAT)   \
    X(float32, float, f32, f32, PLAIN, DIV_FLOAT)      \
    X(float64, double, f64, f64, PLAIN, DIV_FLOAT)     \
    X(int8, int8_t, i8, u8, PLAIN, DIV_NONE)           \
    X(int16, int16_t, i16, u16, PLAIN, DIV_NONE)       \
    X(int32, int32_t, i32, u32, PLAIN, DIV_NONE)       \
    X(int64, int64_t, i64, u64, PLAIN, DIV_NONE)       \
    X(uint8, uint8_t, u8, u8, PLAIN, DIV_NONE)         \
    X(uint16, uint16_t, u16, u16, PLAIN, DIV_NONE)     \
    X(uint32, uint32_t, u32, u32, PLAIN, DIV_NONE)     \
    X(uint64, uint64_t, u64, u64, PLAIN, DIV_NONE)

#define COUNT(...) +1
enum { N_DTYPES = 0 FOR_DTYPES(COUNT) };
#undef COUNT
#define NAME_OF(NAME, ...) #NAME,
static const char *const DTYPE_NAMES[N_DTYPES] = {FOR_DTYPES(NAME_OF)};
#define SIZE_OF(NAME, S, ...) sizeof(S),
static const size_t DTYPE_SIZES[N_DTYPES] = {FOR_DTYPES(SIZE_OF)};
#define INDEX_OF(NAME, ...) DT_##NAME,
enum { FOR_DTYPES(INDEX_OF) };
#undef NAME_OF
#undef SIZE_OF
#undef INDEX_OF

typedef void (*kernel_fn)(char *out, const char *const *in, size_t k, size_t n,
                          const double *div, int nt);

#define HALF_INTEGER 0
#define HALF_F16C 1
#define HALF_AVX512 2

struct isa {
    const char *name;
    const kernel_fn (*table)[N_OPS];
};

#if X86
#define SFX sse2
#define VB 16
#define TARGET
#define HALF HALF_INTEGER
#define NT_BITS 128
#define BF16_HW 0
#include "_kernels_body.h"
#undef SFX
#undef VB
#undef TARGET
#undef HALF
#undef NT_BITS
#undef BF16_HW

#define SFX avx2
#define VB 32
#define TARGET __attribute__((target("avx2,f16c")))
#define HALF HALF_F16C
#define NT_BITS 256
#define BF16_HW 0
#include "_kernels_body.h"
#undef SFX
#undef VB
#undef TARGET
#undef HALF
#undef NT_BITS
#undef BF16_HW

#define SFX avx512
#define VB 64
#define TARGET __attribute__((target("avx2,f16c,avx512f,avx512bw,avx512dq,avx512vl")))
#define HALF HALF_AVX512
#define NT_BITS 512
#define BF16_HW 0
#include "_kernels_body.h"
#undef SFX
#undef VB
#undef TARGET
#undef HALF
#undef NT_BITS
#undef BF16_HW

#define SFX avx512bf16
#define VB 64
#define TARGET __attribute__((target("avx2,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512bf16")))
#define HALF HALF_AVX512
#define NT_BITS 512
#define BF16_HW 1
#include "_kernels_body.h"
#undef SFX
#undef VB
#undef TARGET
#undef HALF
#undef NT_BITS
#undef BF16_HW

static const struct isa ISAS[] = {
    {"sse2", table_sse2},
    {"avx2", table_avx2},
    {"avx512", table_avx512},
    {"avx512bf16", table_avx512bf16},
};

static int best_isa(void)
{
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c"))
        return __builtin_cpu_supports("avx512bf16") ? 3 : 2;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c"))
        return 1;
    return 0;
}
#else
#define SFX generic
#define VB 16
#define TARGET
#define HALF HALF_INTEGER
#define NT_BITS 0
#define BF16_HW 0
#include "_kernels_body.h"
#undef SFX
#undef VB
#undef TARGET
#undef HALF
#undef NT_BITS
#undef BF16_HW

static const struct isa ISAS[] = {{"generic", table_generic}};

static int best_isa(void) { return 0; }
#endif

static int isa_best, isa_now;

/* Buffers of the arguments, released together */
struct views {
    Py_buffer *v;
    Py_ssize_t got;
    Py_buffer small[9];
};

static void views_release(struct views *s)
{
    for (Py_ssize_t i = 0; i < s->got; i++)
        PyBuffer_Release(&s->v[i]);
    if (s->v != s->small)
        PyMem_Free(s->v);
}

static int views_get(struct views *s, PyObject *obj, int flags)
{
    if (PyObject_GetBuffer(obj, &s->v[s->got], flags) < 0)
        return -1;
    s->got++;
    return 0;
}

static int overlaps(const Py_buffer *a, const Py_buffer *b)
{
    const char *p = (const char *)a->buf, *q = (const char *)b->buf;
    return a->len && b->len && p < q + b->len && q < p + a->len;
}

/* reduce(out, inputs, dtype, op, stream, divisor): dtype and op index
 * DTYPES and OPS; divisor is None or a number */
static PyObject *reduce(PyObject *self, PyObject *args)
{
    PyObject *out, *inputs, *divobj;
    int dt, op, stream;
    if (!PyArg_ParseTuple(args, "OOiipO", &out, &inputs, &dt, &op, &stream, &divobj))
        return NULL;
    if (dt < 0 || dt >= N_DTYPES || op < 0 || op >= N_OPS) {
        PyErr_SetString(PyExc_ValueError, "reduce: dtype or op index out of range");
        return NULL;
    }
    double div = 0.0;
    const double *divp = NULL;
    if (divobj != Py_None) {
        div = PyFloat_AsDouble(divobj);
        if (div == -1.0 && PyErr_Occurred())
            return NULL;
        divp = &div;
    }
    PyObject *seq = PySequence_Fast(inputs, "reduce_into: inputs must be a sequence");
    if (!seq)
        return NULL;
    Py_ssize_t k = PySequence_Fast_GET_SIZE(seq);
    struct views s = {NULL, 0, {{0}}};
    const char *small_in[8];
    const char **in = small_in;
    PyObject *result = NULL;
    s.v = k + 1 <= 9 ? s.small : PyMem_Calloc((size_t)k + 1, sizeof(Py_buffer));
    if (k > 8)
        in = PyMem_Calloc((size_t)k, sizeof(char *));
    if (!s.v || !in) {
        PyErr_NoMemory();
        goto done;
    }
    if (k < 1) {
        PyErr_SetString(PyExc_ValueError, "reduce_into: needs at least one input");
        goto done;
    }
    if (views_get(&s, out, PyBUF_WRITABLE) < 0)
        goto done;
    const Py_buffer *o = &s.v[0];
    size_t size = DTYPE_SIZES[dt];
    if ((size_t)o->len % size) {
        PyErr_SetString(PyExc_ValueError, "reduce_into: out is not a whole number of elements");
        goto done;
    }
    for (Py_ssize_t j = 0; j < k; j++) {
        if (views_get(&s, PySequence_Fast_GET_ITEM(seq, j), PyBUF_SIMPLE) < 0)
            goto done;
        const Py_buffer *b = &s.v[j + 1];
        if (b->len != o->len) {
            PyErr_Format(PyExc_ValueError, "reduce_into: inputs[%zd] has %zd bytes, out %zd",
                         j, b->len, o->len);
            goto done;
        }
        if (b->buf != o->buf && overlaps(o, b)) {
            PyErr_Format(PyExc_ValueError,
                         "reduce_into: out overlaps inputs[%zd] without being the same memory", j);
            goto done;
        }
        in[j] = (const char *)b->buf;
    }
    size_t n = (size_t)o->len / size;
    char *dst = (char *)o->buf;
    const struct isa *isa = &ISAS[isa_now];
    Py_BEGIN_ALLOW_THREADS
    if (k == 1 && !divp) { /* a copy: no conversion round trip for half types */
        if (dst != in[0] && !stream)
            memcpy(dst, in[0], (size_t)o->len);
        else if (dst != in[0]) /* the uint8 kernel of one input: a streamed copy */
            isa->table[DT_uint8][0](dst, in, 1, (size_t)o->len, NULL, 1);
    } else if (n)
        isa->table[dt][op](dst, in, (size_t)k, n, divp, stream);
    Py_END_ALLOW_THREADS
    Py_INCREF(Py_None);
    result = Py_None;
done:
    views_release(&s);
    if (in != small_in)
        PyMem_Free(in);
    Py_DECREF(seq);
    return result;
}

/* The reducers that reducer() hands out, one per (dtype, op): the kernel of
 * the instruction set in use when it runs, with no divisor and no streaming */
static void reduce_with_kernels(const collectives_reducer *self, char *out,
                                const char *const *in, size_t k, size_t n)
{
    ISAS[isa_now].table[self->dtype][self->op](out, in, k, n, NULL, 0);
}

static collectives_reducer REDUCERS[N_DTYPES][N_OPS];

/* reducer(dtype, op): a PyCapsule of the reduction (transports/native_api.h) */
static PyObject *reducer(PyObject *self, PyObject *args)
{
    int dt, op;
    if (!PyArg_ParseTuple(args, "ii", &dt, &op))
        return NULL;
    if (dt < 0 || dt >= N_DTYPES || op < 0 || op >= N_OPS) {
        PyErr_SetString(PyExc_ValueError, "reducer: dtype or op index out of range");
        return NULL;
    }
    return PyCapsule_New(&REDUCERS[dt][op], COLLECTIVES_REDUCER_CAPSULE, NULL);
}

static PyObject *isa(PyObject *self, PyObject *noargs)
{
    return PyUnicode_FromString(ISAS[isa_now].name);
}

static PyObject *set_isa(PyObject *self, PyObject *args)
{
    const char *name;
    if (!PyArg_ParseTuple(args, "s", &name))
        return NULL;
    for (int i = 0; i <= isa_best; i++)
        if (!strcmp(ISAS[i].name, name)) {
            isa_now = i;
            Py_RETURN_NONE;
        }
    return PyErr_Format(PyExc_ValueError, "set_isa: '%s' is not one of this processor's", name);
}

static PyObject *names(const char *const *v, int n)
{
    PyObject *t = PyTuple_New(n);
    for (int i = 0; t && i < n; i++) {
        PyObject *s = PyUnicode_FromString(v[i]);
        if (!s) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, i, s);
    }
    return t;
}

static PyObject *isas(PyObject *self, PyObject *noargs)
{
    const char *v[sizeof ISAS / sizeof ISAS[0]];
    for (int i = 0; i <= isa_best; i++)
        v[i] = ISAS[i].name;
    return names(v, isa_best + 1);
}

static PyMethodDef methods[] = {
    {"reduce", reduce, METH_VARARGS,
     "reduce(out, inputs, dtype, op, stream, divisor): out = the reduction of inputs"},
    {"reducer", reducer, METH_VARARGS,
     "reducer(dtype, op): the reduction as a PyCapsule for transports._native.exchange_reduce"},
    {"isa", isa, METH_NOARGS, "isa(): the instruction set the kernels use"},
    {"isas", isas, METH_NOARGS, "isas(): the instruction sets this processor runs, best last"},
    {"set_isa", set_isa, METH_VARARGS, "set_isa(name): use one of isas()"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kernels", NULL, -1, methods};

PyMODINIT_FUNC PyInit__kernels(void)
{
    isa_best = isa_now = best_isa();
    for (int d = 0; d < N_DTYPES; d++)
        for (int o = 0; o < N_OPS; o++)
            REDUCERS[d][o] = (collectives_reducer){COLLECTIVES_REDUCER_VERSION, DTYPE_SIZES[d],
                                                   reduce_with_kernels, d, o};
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    PyObject *dtypes = names(DTYPE_NAMES, N_DTYPES), *ops = names(OP_NAMES, N_OPS);
    if (!dtypes || !ops || PyModule_AddObject(m, "DTYPES", dtypes) < 0) {
        Py_XDECREF(dtypes);
        Py_XDECREF(ops);
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddObject(m, "OPS", ops) < 0) {
        Py_DECREF(ops);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
