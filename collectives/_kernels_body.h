/* The loops of collectives._kernels for one instruction set.  _kernels.c
 * includes this file once per instruction set, having defined:
 *   SFX     the suffix of every name defined here (sse2, avx2, avx512, generic)
 *   TARGET  the function attribute that compiles for it (empty for the baseline)
 *   VB      its vector register's width in bytes: 16, 32 or 64
 *   HALF    how float16 converts: HALF_INTEGER, HALF_F16C or HALF_AVX512
 *   NT_BITS the widest streaming store: 0 (none), 128, 256 or 512
 *   BF16_HW 1 where the processor rounds float32 to bfloat16 (AVX512_BF16)
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
typedef VEC(uint16_t, VB / 2) FN(vh16); /* float16, one per float32 lane (F16C) */
#undef VEC
#define V(t) FN(v##t)

/* Store `bytes` (a vector, or half of one of at least 16 bytes) from src to
 * p, streamed when nt; p is then aligned to `bytes`. */
#define STREAM_IF(width, T, stream)             \
    if (bytes == (width)) {                     \
        T t_;                                   \
        memcpy(&t_, s, (width));                \
        stream((T *)p, t_);                     \
        return;                                 \
    }
static inline TARGET ALWAYS void FN(put)(char *p, const void *src, size_t bytes, int nt)
{
    const char *s = (const char *)src;
    if (!nt) {
        memcpy(p, s, bytes);
        return;
    }
#if NT_BITS >= 512
    STREAM_IF(64, __m512i, _mm512_stream_si512)
#endif
#if NT_BITS >= 256
    STREAM_IF(32, __m256i, _mm256_stream_si256)
#endif
#if NT_BITS >= 128
    STREAM_IF(16, __m128i, _mm_stream_si128)
#endif
    memcpy(p, s, bytes);
}
#undef STREAM_IF

/* float16 <-> float32, rounding to nearest even.  With F16C or AVX-512 the
 * processor converts; the baseline converts with integer arithmetic on the
 * even and odd halves of 32-bit words, as bfloat16 does below.  A NaN stays a
 * NaN, quieted, with the top of its payload, as F16C converts it. */
#if HALF == HALF_INTEGER
/* h: float16 bits in the low half of each lane */
static inline TARGET ALWAYS V(f32) FN(f16_widen)(V(u32) h)
{
    V(u32) em = h & 0x7fffu, bits = em << 13;
    /* exponent and mantissa shifted into place read as a float 2^112 times
     * too small, subnormals included: one exact multiplication rebiases
     * (were the processor told to read subnormal floats as zero, DAZ, the
     * subnormal float16 would read as zero) */
    V(u32) f = (V(u32))((V(f32))bits * 0x1p112f);
    V(u32) infnan = (V(u32))((V(i32))em >= 0x7c00);
    f = (f & ~infnan) | ((bits + 0x70000000u) & infnan);
    return (V(f32))(f | ((h & 0x8000u) << 16));
}

/* the float16 bits of x, in the low half of each lane */
static inline TARGET ALWAYS V(u32) FN(f16_narrow)(V(f32) x)
{
    V(u32) u = (V(u32))x, a = u & 0x7fffffffu;
    V(i32) ai = (V(i32))a;
    V(u32) big = (V(u32))(ai >= 0x47800000);   /* 2^16 and up: inf; or NaN */
    V(u32) nan = (V(u32))(ai > 0x7f800000);
    V(u32) small = (V(u32))(ai < 0x38800000); /* under 2^-14: subnormal or zero */
    /* normal: rebias the exponent, round the 13 bits cut off (65520 carries to inf) */
    V(u32) o = (a - 0x38000000u + 0xfffu + ((a >> 13) & 1u)) >> 13;
    /* subnormal: adding 0.5 leaves |x| rounded to a multiple of 2^-24 (to
     * nearest even, by the FPU) in the low bits of 0.5 */
    V(u32) sub = (V(u32))((V(f32))a + 0.5f) - 0x3f000000u;
    V(u32) inf = 0x7c00u | (nan & (0x0200u | ((a >> 13) & 0x3ffu)));
    o = (o & ~small) | (sub & small);
    o = (o & ~big) | (inf & big);
    return o | ((u >> 16) & 0x8000u);
}
#else
static inline TARGET ALWAYS V(f32) FN(f16_load)(const char *p)
{
#if HALF == HALF_AVX512
    return (V(f32))_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
#else
    return (V(f32))_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
#endif
}

static inline TARGET ALWAYS V(h16) FN(f16_round)(V(f32) x)
{
#if HALF == HALF_AVX512
    return (V(h16))_mm512_cvtps_ph((__m512)x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
#else
    return (V(h16))_mm256_cvtps_ph((__m256)x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
#endif
}
#endif

/* bfloat16 is the top half of a float32, so a 32-bit word of two bfloat16
 * holds the even element as (word << 16) and the odd one as (word &
 * 0xffff0000): a block of bfloat16 is two float32 vectors, and widening and
 * narrowing need no shuffles.  Rounding to nearest even adds 0x7fff plus the
 * lowest kept bit before cutting (the carry moves into the exponent exactly
 * when it should); a NaN becomes the quiet NaN of its sign, as ml_dtypes
 * converts it.  The result is in the low 16 bits of each lane. */
static inline TARGET ALWAYS void FN(bf16_load)(V(f32) *x, const char *p)
{
    V(u32) w;
    memcpy(&w, p, sizeof w);
    x[0] = (V(f32))(w << 16);
    x[1] = (V(f32))(w & 0xffff0000u);
}

static inline TARGET ALWAYS V(u32) FN(bf16_round)(V(f32) x)
{
    V(u32) u = (V(u32))x;
    V(u32) nan = (V(u32))((V(i32))(u & 0x7fffffffu) > 0x7f800000);
    V(u32) r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    V(u32) q = ((u >> 16) & 0x8000u) | 0x7fc0u;
    return (r & ~nan) | (q & nan);
}

#if BF16_HW
/* The processor rounds to nearest even too (VCVTNE2PS2BF16), but reads a
 * subnormal float32 as zero and keeps a NaN's payload: a block with either
 * (one VFPCLASSPS a vector tells) takes the integer rounding above, so the
 * bits are those of every other path. */
static inline TARGET ALWAYS void FN(bf16_store)(char *p, const V(f32) *x, int nt)
{
    enum { NAN_OR_SUBNORMAL = 0x01 | 0x80 | 0x20 }; /* quiet NaN, signalling NaN, denormal */
    V(u32) w;
    if (__builtin_expect(!(_mm512_fpclass_ps_mask((__m512)x[0], NAN_OR_SUBNORMAL) |
                           _mm512_fpclass_ps_mask((__m512)x[1], NAN_OR_SUBNORMAL)), 1)) {
        /* elements 0-15 the even ones, 16-31 the odd ones: interleave */
        const __m512i order = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10,
                                               25, 9, 24, 8, 23, 7, 22, 6, 21, 5, 20, 4,
                                               19, 3, 18, 2, 17, 1, 16, 0);
        __m512i both = (__m512i)_mm512_cvtne2ps_pbh((__m512)x[1], (__m512)x[0]);
        w = (V(u32))_mm512_permutexvar_epi16(order, both);
    } else {
        w = FN(bf16_round)(x[0]) | (FN(bf16_round)(x[1]) << 16);
    }
    FN(put)(p, &w, VB, nt);
}
#define STORE_BF16(p, x, nt) FN(bf16_store)((p), (x), (nt))
#else
#define STORE_BF16(p, x, nt) ({ V(u32) w_ = FN(bf16_round)((x)[0]) | (FN(bf16_round)((x)[1]) << 16); \
                                FN(put)((p), &w_, VB, (nt)); })
#endif

/* How each kind loads a unit of memory (UNIT_KIND bytes) into VECS_KIND
 * vectors x, and stores them back */
#define UNIT_PLAIN VB
#define VECS_PLAIN 1
#define LOAD_PLAIN(x, p) memcpy((x), (p), VB)
#define STORE_PLAIN(p, x, nt) FN(put)((p), (x), VB, (nt))
#define UNIT_BF16 VB
#define VECS_BF16 2
#define LOAD_BF16(x, p) FN(bf16_load)((x), (p))
#if HALF == HALF_INTEGER
#define UNIT_F16 VB
#define VECS_F16 2
#define LOAD_F16(x, p) ({ V(u32) w_; memcpy(&w_, (p), VB);                           \
                          (x)[0] = FN(f16_widen)(w_ & 0xffffu); (x)[1] = FN(f16_widen)(w_ >> 16); })
#define STORE_F16(p, x, nt) ({ V(u32) w_ = FN(f16_narrow)((x)[0]) | (FN(f16_narrow)((x)[1]) << 16); \
                               FN(put)((p), &w_, VB, (nt)); })
#else
#define UNIT_F16 (VB / 2)
#define VECS_F16 1
#define LOAD_F16(x, p) ((x)[0] = FN(f16_load)(p))
#define STORE_F16(p, x, nt) ({ V(h16) h_ = FN(f16_round)((x)[0]); FN(put)((p), &h_, VB / 2, (nt)); })
#endif
/* A block is UNROLL units: that many independent chains of k-1 ops keep
 * the out-of-order core busy where one chain would wait on each op's
 * latency (it matters in cache; from memory the loads decide). */
#define UNROLL 2

/* One kernel per (dtype, op): out = op(...op(op(in0, in1), in2)..., in_{k-1}),
 * divided by *div when div is set (floating dtypes only), one pass over
 * memory, a block at a time.  Every block reads all k inputs before it writes
 * out, so out may be any one of the inputs.  nt streams the stores from the
 * first boundary of out aligned to a unit on; the head before it and the
 * tail go through a block on the stack. */
#define DEFINE_KERNEL(OP, NAME, S, VT, AVT, KIND, DIV)                                          \
    enum { FN(NAME##_##OP##_W) = UNROLL * VECS_##KIND,                                          \
           FN(NAME##_##OP##_BLOCK) = UNROLL * UNIT_##KIND / sizeof(S) };                        \
    /* acc = x (first) or op(acc, x), x the block at p */                                       \
    static inline TARGET ALWAYS void FN(NAME##_##OP##_fold)(V(VT) *acc, const char *p, int first) \
    {                                                                                           \
        V(VT) x[FN(NAME##_##OP##_W)];                                                           \
        for (int u = 0; u < UNROLL; u++)                                                        \
            LOAD_##KIND(x + u * VECS_##KIND, p + u * UNIT_##KIND);                              \
        for (int w = 0; w < FN(NAME##_##OP##_W); w++)                                           \
            acc[w] = first ? x[w] : OP(V(VT), V(AVT), acc[w], x[w]);                            \
    }                                                                                           \
    static inline TARGET ALWAYS void FN(NAME##_##OP##_store)(char *out, V(VT) *acc,             \
                                                             const double *div, int nt)         \
    {                                                                                           \
        if (div)                                                                                \
            for (int w = 0; w < FN(NAME##_##OP##_W); w++)                                       \
                acc[w] = DIV(acc[w], *div);                                                     \
        for (int u = 0; u < UNROLL; u++)                                                        \
            STORE_##KIND(out + u * UNIT_##KIND, acc + u * VECS_##KIND, nt);                     \
    }                                                                                           \
    static TARGET void FN(NAME##_##OP##_part)(char *out, const char *const *in, size_t k,       \
                                              size_t off, size_t m, const double *div)         \
    {                                                                                           \
        V(VT) acc[FN(NAME##_##OP##_W)];                                                         \
        S b[FN(NAME##_##OP##_BLOCK)];                                                           \
        memset(b, 0, sizeof b);                                                                 \
        memcpy(b, in[0] + off, m * sizeof(S));                                                  \
        FN(NAME##_##OP##_fold)(acc, (const char *)b, 1);                                        \
        for (size_t j = 1; j < k; j++) {                                                        \
            memcpy(b, in[j] + off, m * sizeof(S));                                              \
            FN(NAME##_##OP##_fold)(acc, (const char *)b, 0);                                    \
        }                                                                                       \
        FN(NAME##_##OP##_store)((char *)b, acc, div, 0);                                        \
        memcpy(out + off, b, m * sizeof(S));                                                    \
    }                                                                                           \
    static inline TARGET ALWAYS size_t FN(NAME##_##OP##_run)(char *out, const char *const *in,  \
                                                              size_t k, size_t i, size_t n,    \
                                                              const double *div, int nt)       \
    {                                                                                           \
        for (; i + FN(NAME##_##OP##_BLOCK) <= n; i += FN(NAME##_##OP##_BLOCK)) {                \
            V(VT) acc[FN(NAME##_##OP##_W)];                                                     \
            FN(NAME##_##OP##_fold)(acc, in[0] + i * sizeof(S), 1);                              \
            for (size_t j = 1; j < k; j++)                                                      \
                FN(NAME##_##OP##_fold)(acc, in[j] + i * sizeof(S), 0);                          \
            FN(NAME##_##OP##_store)(out + i * sizeof(S), acc, div, nt);                         \
        }                                                                                       \
        return i;                                                                               \
    }                                                                                           \
    static TARGET void FN(NAME##_##OP)(char *out, const char *const *in, size_t k, size_t n,    \
                                       const double *div, int nt)                               \
    {                                                                                           \
        size_t i = 0;                                                                           \
        if (nt && (uintptr_t)out % sizeof(S) == 0) {                                            \
            i = ((0 - (uintptr_t)out) & (UNIT_##KIND - 1)) / sizeof(S);                         \
            if (i > n)                                                                          \
                i = n;                                                                          \
            if (i)                                                                              \
                FN(NAME##_##OP##_part)(out, in, k, 0, i, div);                                  \
            i = FN(NAME##_##OP##_run)(out, in, k, i, n, div, 1);                                \
            SFENCE();                                                                           \
        } else {                                                                                \
            i = FN(NAME##_##OP##_run)(out, in, k, i, n, div, 0);                                \
        }                                                                                       \
        if (i < n)                                                                              \
            FN(NAME##_##OP##_part)(out, in, k, i * sizeof(S), n - i, div);                      \
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

#undef LOAD_PLAIN
#undef LOAD_F16
#undef LOAD_BF16
#undef UNIT_PLAIN
#undef UNIT_F16
#undef UNIT_BF16
#undef VECS_PLAIN
#undef VECS_F16
#undef VECS_BF16
#undef UNROLL
#undef STORE_PLAIN
#undef STORE_F16
#undef STORE_BF16
#undef DEFINE_KERNEL
#undef V
#undef FN
