/* The loops of collectives._kernels for one instruction set.  _kernels.c
 * includes this file once per instruction set, having defined:
 *   SFX     the suffix of every name defined here (sse2, avx2, avx512, generic)
 *   TARGET  the function attribute that compiles for it (empty for the baseline)
 *   VB      its vector register's width in bytes: 16, 32 or 64
 *   HALF    how float16 converts: HALF_SCALAR, HALF_F16C or HALF_AVX512
 *   NT_BITS the widest streaming store: 0 (none), 128, 256 or 512
 * Everything computes on GCC vectors of one register (vf32, vi8, ...), the
 * same source for every instruction set.  (Vectors wider than the register
 * would be split by the compiler, but GCC 12 turns a split comparison into
 * scalar code.) */

#define FN(name) CAT(name, SFX)
#define VEC(T, bytes) __attribute__((vector_size(bytes))) T
typedef VEC(float, VB) FN(vf32);
typedef VEC(double, VB) FN(vf64);
typedef VEC(int8_t, VB) FN(vi8);
typedef VEC(uint8_t, VB) FN(vu8);
typedef VEC(int16_t, VB) FN(vi16);
typedef VEC(uint16_t, VB) FN(vu16);
typedef VEC(int32_t, VB) FN(vi32);
typedef VEC(uint32_t, VB) FN(vu32);
typedef VEC(int64_t, VB) FN(vi64);
typedef VEC(uint64_t, VB) FN(vu64);
typedef VEC(uint16_t, VB / 2) FN(vh16); /* float16 or bfloat16, one per float32 lane */
#undef VEC
#define V(t) FN(v##t)

/* Store `bytes` (a vector or half of one) from src to p, streamed when nt;
 * p is then aligned to `bytes`. */
static inline TARGET ALWAYS void FN(put)(char *p, const void *src, size_t bytes, int nt)
{
    const char *s = (const char *)src;
    if (!nt) {
        memcpy(p, s, bytes);
        return;
    }
#if NT_BITS >= 512
    if (bytes == 64) {
        __m512i t;
        memcpy(&t, s, 64);
        _mm512_stream_si512((void *)p, t);
        return;
    }
#endif
#if NT_BITS >= 256
    if (bytes == 32) {
        __m256i t;
        memcpy(&t, s, 32);
        _mm256_stream_si256((__m256i *)p, t);
        return;
    }
#endif
#if NT_BITS >= 128
    if (bytes == 16) {
        __m128i t;
        memcpy(&t, s, 16);
        _mm_stream_si128((__m128i *)p, t);
        return;
    }
#if defined(__x86_64__)
    if (bytes == 8) {
        long long t;
        memcpy(&t, s, 8);
        _mm_stream_si64((long long *)p, t);
        return;
    }
#endif
#endif
    memcpy(p, s, bytes);
}

/* float16 <-> float32 for one vector, rounding to nearest even */
static inline TARGET ALWAYS V(f32) FN(f16_load)(const char *p)
{
#if HALF == HALF_AVX512
    return (V(f32))_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
#elif HALF == HALF_F16C
    return (V(f32))_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
#else
    uint16_t h[LANES(V(f32))];
    V(f32) v;
    memcpy(h, p, sizeof h);
    for (size_t l = 0; l < LANES(V(f32)); l++)
        v[l] = half_to_float(h[l]);
    return v;
#endif
}

static inline TARGET ALWAYS V(h16) FN(f16_round)(V(f32) x)
{
#if HALF == HALF_AVX512
    return (V(h16))_mm512_cvtps_ph((__m512)x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
#elif HALF == HALF_F16C
    return (V(h16))_mm256_cvtps_ph((__m256)x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
#else
    V(h16) h;
    for (size_t l = 0; l < LANES(V(f32)); l++)
        h[l] = float_to_half(x[l]);
    return h;
#endif
}

/* bfloat16 is the top half of a float32: widening is a shift, and rounding
 * to nearest even adds 0x7fff plus the lowest kept bit before cutting (the
 * carry moves into the exponent exactly when it should).  A NaN becomes the
 * quiet NaN of its sign, as ml_dtypes converts it. */
static inline TARGET ALWAYS V(f32) FN(bf16_load)(const char *p)
{
    V(h16) h;
    memcpy(&h, p, sizeof h);
    return (V(f32))(__builtin_convertvector(h, V(u32)) << 16);
}

static inline TARGET ALWAYS V(h16) FN(bf16_round)(V(f32) x)
{
    V(u32) u = (V(u32))x;
    V(u32) nan = (V(u32))((u & 0x7fffffffu) > 0x7f800000u);
    V(u32) r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    V(u32) q = ((u >> 16) & 0x8000u) | 0x7fc0u;
    return __builtin_convertvector((r & ~nan) | (q & nan), V(h16));
}

#define LOAD_PLAIN(T, p) ({ T v_; memcpy(&v_, (p), sizeof v_); v_; })
#define LOAD_F16(T, p) FN(f16_load)(p)
#define LOAD_BF16(T, p) FN(bf16_load)(p)
#define STORE_PLAIN(p, v, nt) FN(put)((p), &(v), sizeof(v), (nt))
#define STORE_F16(p, v, nt) ({ V(h16) h_ = FN(f16_round)(v); FN(put)((p), &h_, sizeof h_, (nt)); })
#define STORE_BF16(p, v, nt) ({ V(h16) h_ = FN(bf16_round)(v); FN(put)((p), &h_, sizeof h_, (nt)); })

/* One kernel per (dtype, op): out = op(...op(op(in0, in1), in2)..., in_{k-1}),
 * divided by *div when div is set (floating dtypes only), one pass over
 * memory.  Every block reads all k inputs before it writes out, so out may be
 * any one of the inputs.  nt streams the stores from the first boundary of
 * out aligned to a block's store on; the head before it and the tail go
 * through a block on the stack. */
#define DEFINE_KERNEL(OP, NAME, S, VT, AVT, KIND, DIV)                                         \
    static inline TARGET ALWAYS V(VT) FN(NAME##_##OP##_block)(const char *const *in, size_t k,     \
                                                           size_t off, const double *div)     \
    {                                                                                          \
        V(VT) acc = LOAD_##KIND(V(VT), in[0] + off);                                                   \
        for (size_t j = 1; j < k; j++) {                                                       \
            V(VT) x = LOAD_##KIND(V(VT), in[j] + off);                                                 \
            acc = OP(V(VT), V(AVT), acc, x);                                                           \
        }                                                                                      \
        if (div)                                                                               \
            acc = DIV(acc, *div);                                                              \
        return acc;                                                                            \
    }                                                                                          \
    static TARGET void FN(NAME##_##OP##_part)(char *out, const char *const *in, size_t k,      \
                                              size_t off, size_t m, const double *div)        \
    {                                                                                          \
        S b[LANES(V(VT))];                                                                         \
        memset(b, 0, sizeof b);                                                                \
        memcpy(b, in[0] + off, m * sizeof(S));                                                 \
        V(VT) acc = LOAD_##KIND(V(VT), (const char *)b);                                               \
        for (size_t j = 1; j < k; j++) {                                                       \
            memcpy(b, in[j] + off, m * sizeof(S));                                             \
            V(VT) x = LOAD_##KIND(V(VT), (const char *)b);                                             \
            acc = OP(V(VT), V(AVT), acc, x);                                                           \
        }                                                                                      \
        if (div)                                                                               \
            acc = DIV(acc, *div);                                                              \
        STORE_##KIND((char *)b, acc, 0);                                                       \
        memcpy(out + off, b, m * sizeof(S));                                                   \
    }                                                                                          \
    static inline TARGET ALWAYS size_t FN(NAME##_##OP##_run)(char *out, const char *const *in, \
                                                              size_t k, size_t i, size_t n,   \
                                                              const double *div, int nt)      \
    {                                                                                          \
        for (; i + LANES(V(VT)) <= n; i += LANES(V(VT))) {                                             \
            V(VT) acc = FN(NAME##_##OP##_block)(in, k, i * sizeof(S), div);                        \
            STORE_##KIND(out + i * sizeof(S), acc, nt);                                        \
        }                                                                                      \
        return i;                                                                              \
    }                                                                                          \
    static TARGET void FN(NAME##_##OP)(char *out, const char *const *in, size_t k, size_t n,   \
                                       const double *div, int nt)                              \
    {                                                                                          \
        size_t i = 0;                                                                          \
        if (nt && (uintptr_t)out % sizeof(S) == 0) {                                           \
            i = ((0 - (uintptr_t)out) & (LANES(V(VT)) * sizeof(S) - 1)) / sizeof(S);          \
            if (i > n)                                                                         \
                i = n;                                                                         \
            if (i)                                                                             \
                FN(NAME##_##OP##_part)(out, in, k, 0, i, div);                                 \
            i = FN(NAME##_##OP##_run)(out, in, k, i, n, div, 1);                               \
            SFENCE();                                                                          \
        } else {                                                                               \
            i = FN(NAME##_##OP##_run)(out, in, k, i, n, div, 0);                               \
        }                                                                                      \
        if (i < n)                                                                             \
            FN(NAME##_##OP##_part)(out, in, k, i * sizeof(S), n - i, div);                     \
    }

#define DEFINE_OP_KERNELS(NAME, S, V, AV, KIND, DIV)     \
    DEFINE_KERNEL(OP_SUM, NAME, S, V, AV, KIND, DIV)     \
    DEFINE_KERNEL(OP_PROD, NAME, S, V, AV, KIND, DIV)    \
    DEFINE_KERNEL(OP_MAX, NAME, S, V, AV, KIND, DIV)     \
    DEFINE_KERNEL(OP_MIN, NAME, S, V, AV, KIND, DIV)
FOR_DTYPES(DEFINE_OP_KERNELS)
#undef DEFINE_OP_KERNELS

#define TABLE_ROW(NAME, S, V, AV, KIND, DIV) \
    {FN(NAME##_OP_SUM), FN(NAME##_OP_PROD), FN(NAME##_OP_MAX), FN(NAME##_OP_MIN)},
static const kernel_fn FN(table)[N_DTYPES][N_OPS] = {FOR_DTYPES(TABLE_ROW)};
#undef TABLE_ROW

/* memcpy, or with streaming stores from the first 64-byte boundary of d on */
static TARGET void FN(copy)(char *d, const char *s, size_t n, int nt)
{
    if (!nt) {
        memcpy(d, s, n);
        return;
    }
    size_t head = (0 - (uintptr_t)d) & 63;
    if (head > n)
        head = n;
    memcpy(d, s, head);
    size_t i = head;
    for (; i + 64 <= n; i += 64)
        for (size_t o = 0; o < 64; o += VB) {
            V(u8) v = LOAD_PLAIN(V(u8), s + i + o);
            FN(put)(d + i + o, &v, VB, 1);
        }
    SFENCE();
    memcpy(d + i, s + i, n - i);
}

#undef LOAD_PLAIN
#undef LOAD_F16
#undef LOAD_BF16
#undef STORE_PLAIN
#undef STORE_F16
#undef STORE_BF16
#undef DEFINE_KERNEL
#undef V
#undef FN
