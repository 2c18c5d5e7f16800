/* celtune: fused (linear) cross-entropy kernels with tuned configs.
 *
 * A training job links libceltune (pkg-config: celtune), creates one context,
 * and calls celtune_flce / celtune_ce with device pointers (or, on a context
 * from celtune_create_cpu, host pointers). Each call resolves its kernel
 * config, in this order:
 *   1. the explicit config in the call (args.config_json)
 *   2. CELTUNE_CONFIG in the environment (JSON)
 *   3. the database: this device and this exact problem
 *   4. the database: this device, the nearest token count (log distance), same
 *      hidden, vocab, dtype, mode and loss options
 *   5. the database: another device of the same sm architecture
 *   6. the built-in default
 * The databases, in order: the path given to celtune_create, $CELTUNE_DB, the
 * user's database ($XDG_DATA_HOME/celtune/celtune.sqlite, else
 * ~/.local/share/celtune/celtune.sqlite, where `celtune tune` writes), and
 * celtune.sqlite installed beside libceltune; the entry comes from the first
 * that has one that fits (a borrowed config must fit the problem's scratch
 * budget). Without a GPU, lookups answer for the CPU device. A missing,
 * unreadable, damaged, locked or newer-schema database gives one warning on
 * stderr and the next source; each is opened read-only and never written. A
 * malformed CELTUNE_BUSY_TIMEOUT_MS (how long to wait for a locked database)
 * gives one warning and the default, 10000 ms.
 * A malformed CELTUNE_CONFIG fails every call with CELTUNE_ERROR_INVALID_ARGUMENT
 * (it is never silently replaced). CELTUNE_LOG=1 logs each problem's config
 * and its source once, whichever source it came from.
 *
 * Threads: a context may be shared by threads; calls on one context are
 * serialised by a lock inside it. For concurrency, use one context per thread.
 * Fork: a child process may use a CPU context (inherited or new) after its
 * parent's calls; the thread that forked runs the CPU backend's parallel loops
 * on itself there (OpenMP's pool of that thread has no workers in the child),
 * other threads of the child as usual. A CUDA context does not survive fork.
 * Errors: every call returns a status; celtune_last_error(ctx) says why (each
 * thread reads its own). A target outside [0, V) that is not ignore_index is
 * not an error status: its token is treated as ignored and the first such
 * token is reported through bad_target, which the caller checks (the CLI and
 * the Python package make it an error); without bad_target it goes unreported.
 * The math: docs/flce-math.md. */
#ifndef CELTUNE_CELTUNE_H
#define CELTUNE_CELTUNE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct celtune_context celtune_context;
/* A CUDA stream (cudaStream_t); NULL is the default stream. */
typedef void* celtune_stream;

typedef enum {
  CELTUNE_OK = 0,
  CELTUNE_ERROR_INVALID_ARGUMENT = 2, /* bad shape, option, pointer or config (a bad target: see
                                         bad_target) */
  CELTUNE_ERROR_ENVIRONMENT = 3,      /* CUDA or cuBLASLt error, no device, build without CUDA */
  CELTUNE_ERROR_INTERNAL = 4,
  CELTUNE_ERROR_BUFFER_TOO_SMALL = 5  /* an output buffer cannot hold the answer; celtune_last_error
                                         says the size needed */
} celtune_status;

typedef enum { CELTUNE_BF16 = 0, CELTUNE_FP16 = 1, CELTUNE_FP32 = 2 } celtune_dtype;
typedef enum { CELTUNE_INT32 = 0, CELTUNE_INT64 = 1 } celtune_target_dtype;
typedef enum { CELTUNE_MEAN = 0, CELTUNE_SUM = 1, CELTUNE_NONE = 2 } celtune_reduction;
typedef enum { CELTUNE_FORWARD = 0, CELTUNE_FORWARD_BACKWARD = 1 } celtune_mode;

typedef struct {
  int64_t ignore_index;   /* PyTorch's default: -100. Not inside [0, V), where it would hide real
                             targets (CELTUNE_ERROR_INVALID_ARGUMENT): map such a padding id
                             to one outside, as the Python package does */
  celtune_reduction reduction;
  float label_smoothing;  /* [0, 1] */
  float softcap;          /* 0: off */
  float z_loss;           /* 0, or 1.2e-38 up to 1e6 */
} celtune_loss_options;

/* Fills the PyTorch defaults: ignore_index -100, mean, no smoothing, softcap or z-loss. */
void celtune_loss_defaults(celtune_loss_options* o);

/* On a GPU, x, w, dx and dw must be 16-byte aligned, as cudaMalloc's pointers
 * are (a slice of a buffer may not be: copy it): the GEMMs read and write their
 * rows in 16-byte pieces, so a call given one off that grid returns
 * CELTUNE_ERROR_INVALID_ARGUMENT before it launches anything. So does a call
 * whose outputs (loss, token_loss, lse, dx, dw, db, bad_target; ce's dz)
 * share memory with each other or with an input it reads; the one exception is
 * ce's dz equal to its logits (in place). Inputs may share memory (tied x and w). */
typedef struct {
  int64_t tokens, hidden, vocab; /* N, H, V */
  celtune_dtype dtype;
  celtune_target_dtype target_dtype;
  celtune_loss_options options;
  celtune_mode mode;
  const void* x;           /* [N,H] */
  const void* w;           /* [V,H] */
  const void* bias;        /* [V] or NULL */
  const void* targets;     /* [N] */
  const float* grad_scale; /* device scalar g (mean/sum, backward) */
  const float* grad_tokens;/* device [N] g_i (none, backward) */
  float* loss;             /* device scalar */
  float* token_loss;       /* device [N] */
  float* lse;              /* device [N] */
  void* dx;                /* [N,H] (backward) */
  void* dw;                /* [V,H] (backward) */
  void* db;                /* [V]   (backward with bias) */
  int64_t* bad_target;     /* optional device scalar: first token whose target is outside [0, V)
                              and not ignore_index, or -1 (such tokens are treated as ignored) */
  const char* config_json; /* explicit config, or NULL to resolve */
} celtune_flce_args;

typedef struct {
  int64_t tokens, vocab;   /* N, V */
  celtune_dtype dtype;
  celtune_target_dtype target_dtype;
  celtune_loss_options options;
  celtune_mode mode;
  void* logits;            /* [N,V] */
  const void* targets;
  const float* grad_scale;
  const float* grad_tokens;
  float* loss;
  float* token_loss;
  float* lse;
  void* dz;                /* [N,V] (backward); may equal logits: in place */
  int64_t* bad_target;     /* optional, as for flce */
  const char* config_json;
} celtune_ce_args;

/* db_path: the first database to read, or NULL; then $CELTUNE_DB, the user's, the shipped one.
 * The context belongs to the CUDA device current at creation. With no CUDA device
 * (or a build without CUDA) it is still created: celtune_*_config answer (an
 * explicit config, CELTUNE_CONFIG, else the default: no device's rows match it),
 * its kernel calls return CELTUNE_ERROR_ENVIRONMENT, and celtune_context_device
 * gives -1. */
celtune_status celtune_create(celtune_context** ctx, const char* db_path);

/* A context on the CPU backend, with the same config resolution (the device
 * being this CPU). Every pointer in the args is host memory, the scalars
 * (grad_scale, loss, bad_target) included, and the stream is ignored: a call
 * returns when its outputs are written. Targets outside [0, V) that are not
 * ignore_index are treated as ignored and reported through bad_target, as on
 * the GPU. It runs the GPU's algorithm in fp32 on all cores: meant for tests
 * and small work, not for speed. */
celtune_status celtune_create_cpu(celtune_context** ctx, const char* db_path);
/* Frees the context and every thread's last error on it; NULL does nothing. A
 * context must not be in use by another thread, nor used or destroyed again
 * afterwards (undefined behaviour: it is not detected). Safe in an atexit
 * handler or a static destructor, as every call is. */
void celtune_destroy(celtune_context* ctx);

celtune_status celtune_flce(celtune_context* ctx, const celtune_flce_args* args, celtune_stream stream);
celtune_status celtune_ce(celtune_context* ctx, const celtune_ce_args* args, celtune_stream stream);

/* dst[i] = src[i] * (*scale) for the n elements of dtype at src: the product in
 * fp32, rounded once to the dtype (to nearest even), on the context's device and
 * stream. An element that is zero stays as it is, whatever the scale (inf and
 * NaN included): a zero gradient is an ignored token's, which PyTorch leaves
 * zero whatever the upstream gradient. dst may equal src (in place) but may not overlap it otherwise; in
 * place with *scale == 1 the call leaves memory untouched (no pass over it). For
 * gradients a call computed with grad_scale 1, scaled afterwards by an upstream
 * gradient known only then (the Python package's backward for mean and sum): a
 * 16-bit tensor times a CUDA fp32 scalar is PyTorch's slow mixed-dtype path,
 * which also rounds the scalar first. scale, like dst and src, is device memory
 * (host memory for a CPU context, where the call returns when dst is written).
 * n == 0 does nothing; n < 0, a null pointer (n > 0) or n elements past
 * INT64_MAX bytes: CELTUNE_ERROR_INVALID_ARGUMENT. */
celtune_status celtune_scale(celtune_context* ctx, void* dst, const void* src, int64_t n, celtune_dtype dtype,
                             const float* scale, celtune_stream stream);

/* The config a call with these args would use (no kernel runs): its JSON and
 * its source tag (explicit, env, exact, nearest, same-arch, default). An
 * explicit or CELTUNE_CONFIG config the context's device cannot run is refused
 * here as the call would refuse it (CELTUNE_ERROR_INVALID_ARGUMENT, the buffers
 * untouched, celtune_last_error saying why). A buffer
 * too small for either (NUL included) returns CELTUNE_ERROR_BUFFER_TOO_SMALL,
 * the buffers hold a truncated, NUL-terminated prefix, and celtune_last_error
 * names the sizes needed. Either buffer may be NULL to skip it. */
celtune_status celtune_flce_config(celtune_context* ctx, const celtune_flce_args* args, char* json, size_t json_size,
                                   char* tag, size_t tag_size);
celtune_status celtune_ce_config(celtune_context* ctx, const celtune_ce_args* args, char* json, size_t json_size,
                                 char* tag, size_t tag_size);

/* The device a context runs on: a CUDA ordinal, or -1 for a CPU context and for
 * one celtune_create made where no CUDA device was available. */
int celtune_context_device(const celtune_context* ctx);

/* sizeof the named public struct ("celtune_flce_args", "celtune_ce_args",
 * "celtune_loss_options"), 0 for another name: lets a binding from another
 * language (ctypes, cffi) check its layout before it passes one. */
size_t celtune_sizeof(const char* type_name);

/* The message of the calling thread's last call on this context if it failed,
 * "" if it succeeded or there was none: a thread sharing a context reads its
 * own errors. The string holds until this thread's next call on the context or
 * celtune_destroy. A thread keeps no message for a context once it has been
 * destroyed. A call made while its thread or the process ends (a thread_local
 * or static destructor, an atexit handler) still returns its status and sets
 * its message, which is kept then in the context, shared by the threads that
 * are ending. With ctx NULL: why the calling thread's last celtune_create or
 * celtune_create_cpu failed, until its next one (a malformed
 * CELTUNE_MAX_SCRATCH, for instance, fails the creation with
 * CELTUNE_ERROR_INVALID_ARGUMENT), else "null context". */
const char* celtune_last_error(const celtune_context* ctx);
const char* celtune_version(void);

#ifdef __cplusplus
}
#endif
#endif
