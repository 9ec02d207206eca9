/* The C interface between the two layers' extensions.
 *
 * The transports' compiled exchange (transports._native, exchange_reduce)
 * reduces the ranks' buffers with a reduction it does not own: the
 * collectives layer's kernels (collectives._kernels) hand it one per (dtype,
 * op) as a PyCapsule named COLLECTIVES_REDUCER_CAPSULE whose pointer is a
 * collectives_reducer.  The structure is static in the provider and lives as
 * long as its module; a consumer checks the name and the version before it
 * calls anything.  Change the layout only with a new version (and name). */
#ifndef COLLECTIVES_NATIVE_API_H
#define COLLECTIVES_NATIVE_API_H

#include <stddef.h>

#define COLLECTIVES_REDUCER_CAPSULE "collectives.reducer.v1"
#define COLLECTIVES_REDUCER_VERSION 1

typedef struct collectives_reducer collectives_reducer;

/* out[i] = op(...op(op(in[0][i], in[1][i]), in[2][i])..., in[k-1][i]) for
 * the n elements of every input, in input order, each input read once; out
 * may be one of the inputs, and overlaps none otherwise.  Called with the
 * GIL held; it neither calls into Python nor fails. */
typedef void (*collectives_reduce_fn)(const collectives_reducer *self, char *out,
                                      const char *const *in, size_t k, size_t n);

struct collectives_reducer {
    int version;                  /* COLLECTIVES_REDUCER_VERSION */
    size_t itemsize;              /* bytes of one element */
    collectives_reduce_fn reduce;
    int dtype, op;                /* the provider's own indices */
};

#endif
