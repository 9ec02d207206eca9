/* Copies with non-temporal (streaming) stores: the destination's cache lines
 * are written straight to memory instead of being read into the cache first
 * and evicted later.  For an output larger than the caches that halves the
 * memory traffic of the copy (docs/performance.md).  SSE2 is part of every
 * x86-64 processor; elsewhere the copy is plain memcpy. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

static void copy_stream(char *d, const char *s, size_t n)
{
#if defined(__SSE2__)
    size_t head = (16 - ((uintptr_t)d & 15)) & 15;  /* align the stores */
    if (head > n)
        head = n;
    memcpy(d, s, head);
    d += head;
    s += head;
    n -= head;
    size_t i = 0;
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
    _mm_sfence();  /* the streamed stores are visible before anything after */
    memcpy(d + i, s + i, n - i);
#else
    memcpy(d, s, n);
#endif
}

/* copy(dst_address, src_address, nbytes): the caller has checked both ranges */
static PyObject *copy(PyObject *self, PyObject *args)
{
    unsigned long long dst, src;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "KKn", &dst, &src, &n))
        return NULL;
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "copy: negative size");
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    copy_stream((char *)(uintptr_t)dst, (const char *)(uintptr_t)src, (size_t)n);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"copy", copy, METH_VARARGS, "copy(dst, src, nbytes): a copy with streaming stores"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_ntcopy", NULL, -1, methods};

PyMODINIT_FUNC PyInit__ntcopy(void) { return PyModule_Create(&module); }
