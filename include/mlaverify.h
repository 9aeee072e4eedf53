/* mlaverify: the verify attention of speculative decoding for Multi-head Latent Attention.
 *
 * One C11 header, the whole public API. No CUDA types: a stream is a `void *` (cudaStream_t).
 *
 * What is computed (absorbed MLA, one latent KV head shared by all H query heads):
 *
 *   for request b, query token t (local index i < q_len[b]), head h, visible KV row j:
 *     s[t,h,j]   = scale * dot(q[t,h,0:Dl+Dr], kv[j,0:Dl+Dr])
 *     visible    = j < prefix_len[b]  or  mask bit (i, j - prefix_len[b])
 *     out[t,h,:] = sum_j softmax_j(s[t,h,j]) * kv[j,0:Dl]
 *     lse[t,h]   = log(sum_j exp(s[t,h,j]))     (natural log, fp32)
 *   prefix_len[b] = kv_len[b] - q_len[b]; a row with no visible key gets out = 0, lse = -inf.
 *
 * Tensor layouts (row-major, densely packed, T = q_indptr[B], W = Dl + Dr):
 *   q          [T, H, W]                      dtype       query token t of request b is row
 *                                                         q_indptr[b] + i
 *   kv_cache   [num_pages, page_size, W]      kv_dtype    c_kv (Dl) then k_pe (Dr); with
 *                                                         kv_dtype FP8_E4M3 one byte per
 *                                                         element, value = e4m3(byte) x kv_scale
 *   page_table [B, max_pages]                 int32       KV row j of request b lives at
 *                                                         page_table[b][j / page_size], slot
 *                                                         j % page_size
 *   tree_mask  [T, words]                     uint32      words = ceil(max_q_len / 32); bit k
 *                                                         (word k/32, bit k%32) of row t: draft
 *                                                         node k of t's request is visible
 *   out        [T, H, Dl]                     dtype
 *   lse        [T, H]                         float32
 *
 * Threading: a context is used by one thread at a time; a plan is immutable once created and
 * may be run from several threads at once (each with its own workspace). Error sentences are
 * kept per thread (like errno), see mlav_last_error().
 */
#ifndef MLAVERIFY_H
#define MLAVERIFY_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32) && defined(MLAV_BUILDING_SHARED)
#define MLAV_API __declspec(dllexport)
#elif defined(__GNUC__) && defined(MLAV_BUILDING_LIBRARY)
#define MLAV_API __attribute__((visibility("default")))
#else
#define MLAV_API
#endif

#define MLAV_VERSION_MAJOR 0
#define MLAV_VERSION_MINOR 4
#define MLAV_VERSION_PATCH 0
#define MLAV_VERSION_NUMBER (MLAV_VERSION_MAJOR * 10000 + MLAV_VERSION_MINOR * 100 + MLAV_VERSION_PATCH)

/** Runtime version, MLAV_VERSION_NUMBER of the library actually loaded. */
MLAV_API unsigned mlav_version_number(void);
/** Runtime version as "MAJOR.MINOR.PATCH". */
MLAV_API const char *mlav_version_string(void);

/** Opaque handles: a context picks and holds a backend; a plan is a scheduled problem, or a plan
 *  for limits whose steps' lengths come by mlav_plan_update (one kind underneath: a plan for one
 *  problem is a plan for limits whose update ran at plan time). */
typedef struct mlav_context mlav_context;
typedef struct mlav_plan mlav_plan;

/* ------------------------------------------------------------------------------------------- */
/* Status codes: fixed values, never renumbered.                                                */

typedef enum mlav_status {
    MLAV_OK = 0,
    MLAV_ERR_INVALID_ARG = 1,   /* null pointer, bad length, bad page id, inconsistent shape */
    MLAV_ERR_UNSUPPORTED = 2,   /* valid request this backend cannot do (dims, residency, dtype) */
    MLAV_ERR_OUT_OF_MEMORY = 3, /* a host or device allocation failed (plan or offload mapping) */
    MLAV_ERR_WORKSPACE = 4,     /* workspace missing, too small or misaligned */
    MLAV_ERR_NO_DEVICE = 5,     /* the backend needs a GPU that is not there (or not built in) */
    MLAV_ERR_CUDA = 6,          /* a CUDA call failed; the sentence names the call and file:line */
    /* 7 and 8 are reserved: the tools' MLAV_ERR_FORMAT and MLAV_ERR_IO (a golden bundle
       malformed, a file unreadable), which the library never returns */
    MLAV_ERR_INTERNAL = 9       /* a bug: please report the sentence */
} mlav_status;

/** Constant name of a status ("MLAV_ERR_INVALID_ARG"); never NULL. */
MLAV_API const char *mlav_status_string(mlav_status s);

/** The sentence explaining the most recent failure of a mlav_ call made by this thread
 *  ("" if none yet). Stays valid until this thread's next failing call. `ctx` may be NULL:
 *  the text is per thread, so a plan shared by threads reports to each its own error. */
MLAV_API const char *mlav_last_error(const mlav_context *ctx);

/* ------------------------------------------------------------------------------------------- */
/* Enumerations                                                                                 */

typedef enum mlav_backend {
    MLAV_BACKEND_AUTO = 0,       /* CUDA if built in and a device of cc >= 8.0 is present, else
                                    CPU; MLAV_BACKEND=cpu|cuda|cuda-naive|reference overrides */
    MLAV_BACKEND_CPU = 1,        /* OpenMP + OpenBLAS, fp32 accumulation */
    MLAV_BACKEND_CUDA = 2,       /* flash verify: tensor cores, split-KV, sm_80+ (sm_120-legal) */
    MLAV_BACKEND_CUDA_NAIVE = 3, /* one block per (token, head): the GPU baseline */
    MLAV_BACKEND_REFERENCE = 4   /* the fp64 oracle: plain loops, the definition of truth */
} mlav_backend;

/** "auto", "cpu", "cuda", "cuda-naive", "reference"; "?" for an unknown value. */
MLAV_API const char *mlav_backend_name(mlav_backend b);
/** Parse a backend name as above. MLAV_ERR_INVALID_ARG for an unknown name. */
MLAV_API mlav_status mlav_backend_from_name(const char *name, mlav_backend *out);

typedef enum mlav_dtype {
    MLAV_DTYPE_F32 = 0,
    MLAV_DTYPE_BF16 = 1,
    MLAV_DTYPE_F16 = 2,
    MLAV_DTYPE_FP8_E4M3 = 3 /* float8 e4m3fn (bias 7, no infinities, 0x7f / 0xff NaN, max 448):
                               the KV cache only (mlav_problem.kv_dtype), never q or out */
} mlav_dtype;

/** Bytes per element of a dtype (4, 2 or 1); 0 for an unknown value. */
MLAV_API size_t mlav_dtype_size(mlav_dtype d);
/** "f32", "bf16", "f16", "fp8_e4m3"; "?" for an unknown value. */
MLAV_API const char *mlav_dtype_name(mlav_dtype d);
/** The i-th name of the library's one table of dtype names (i from 0; NULL past the last) and
 *  its dtype through *d (may be NULL): the canonical names and their aliases ("fp32", "float32",
 *  "bfloat16", "fp16", "half", "fp8", "e4m3", "float8_e4m3fn", ...), which the CLI, the bundle
 *  tools and the Python binding accept. */
MLAV_API const char *mlav_dtype_alias(int32_t i, mlav_dtype *d);
/** The dtype `name` denotes: a name of mlav_dtype_alias's table in any case, with or without a
 *  "torch." prefix. MLAV_OK, or MLAV_ERR_INVALID_ARG with a sentence naming the canonical ones. */
MLAV_API mlav_status mlav_dtype_parse(const char *name, mlav_dtype *d);

typedef enum mlav_memory {
    MLAV_MEM_HOST = 0,   /* ordinary host memory */
    MLAV_MEM_DEVICE = 1  /* CUDA device memory of the current device */
} mlav_memory;

/* ------------------------------------------------------------------------------------------- */
/* Problem description (host data, read by plan) and the tensors of one run                    */

typedef struct mlav_problem {
    int32_t num_heads;        /* H >= 1 */
    int32_t d_latent;         /* Dl >= 1 (512 for DeepSeek-V3 / Kimi K2) */
    int32_t d_rope;           /* Dr >= 0 (64 for DeepSeek-V3 / Kimi K2) */
    float softmax_scale;      /* finite; usually 1/sqrt(192) times the model's mscale factor */
    mlav_dtype dtype;         /* dtype of q and out (F32, BF16 or F16), and of kv_cache unless
                                 kv_dtype says FP8_E4M3 */
    int32_t page_size;        /* >= 1: 1 is SGLang's token pool, 64 FlashMLA's / vLLM's block */
    int32_t batch;            /* B >= 1 */
    const int32_t *q_indptr;  /* [B+1] host: q_indptr[0] = 0, non-decreasing; q_len[b] =
                                 q_indptr[b+1] - q_indptr[b] >= 0 */
    const int32_t *kv_lens;   /* [B] host: kv_len[b] = prefix_len[b] + q_len[b] >= q_len[b] */
    int32_t max_pages;        /* row stride of page_table; kv_len[b] <= max_pages * page_size
                                 (with a shard: the rank's rows of it, n_r(kv_len[b])) */
    mlav_dtype kv_dtype;      /* dtype of kv_cache: MLAV_DTYPE_FP8_E4M3 (an FP8 cache, with
                                 mlav_tensors.kv_scale), or `dtype` itself. 0 (F32, as a
                                 zero-initialised problem has it) also means `dtype`: an F32
                                 cache under 16-bit q is not a supported mix. Any other value is
                                 MLAV_ERR_INVALID_ARG. */
    /* Context-parallel decode (a KV shard): this rank holds only some KV rows of every request
     * and computes the partial state (out, lse) over them, exact for its shard; merging the
     * ranks' states (mlav_merge_states_stacked) gives the unsharded verify. q, q_indptr,
     * kv_lens, tree_mask and the limits stay GLOBAL (the same on every rank): visibility (the
     * prefix, the mask over the draft nodes) is judged on global KV positions. Zero-initialised
     * (shard_ranks 0 or 1) is no sharding. Global row g of a request lives on rank
     * (g / I) % R at the rank's local row (g / (I R)) I + g % I, with R = shard_ranks and
     * I = shard_stripe: I = 1 is vLLM's token round robin, I a multiple of page_size keeps
     * pages whole, I >= ceil(kv_len / R) is the contiguous-chunk layout (rank r holds rows
     * [r I, (r + 1) I)). Rank r holds n_r(kv_len) = (kv_len / (I R)) I +
     * clamp(kv_len % (I R) - r I, 0, I) rows of a request, and its page_table row addresses
     * them: local row l at page page_table[b][l / page_size], slot l % page_size; so
     * n_r(kv_len) <= max_pages * page_size is the capacity rule (not kv_len). A node that sees
     * none of the rank's rows gets out 0 and lse -inf (an empty state, which the merge skips).
     * shard_ranks < 0, shard_rank outside [0, max(shard_ranks, 1)) or shard_stripe < 0 is
     * MLAV_ERR_INVALID_ARG. */
    int32_t shard_ranks;      /* R: 0 or 1 = this rank holds every KV row (no sharding) */
    int32_t shard_rank;       /* r in [0, R) (0 when not sharded) */
    int32_t shard_stripe;     /* I: KV rows per stripe, >= 1; 0 means 1 */
} mlav_problem;

typedef struct mlav_tensors {
    mlav_memory memory;          /* where q, kv_cache, page_table, tree_mask, out, lse live */
    const void *q;               /* [T, H, Dl+Dr] dtype */
    const void *kv_cache;        /* [num_pages, page_size, Dl+Dr] dtype */
    int64_t num_pages;           /* pages in the pool; every used page id is in [0, num_pages) */
    const int32_t *page_table;   /* [B, max_pages] int32 */
    const uint32_t *tree_mask;   /* [T, words] packed bits, or NULL for a causal chain
                                    (node i sees nodes 0..i: DFlash blocks, top-1 EAGLE) */
    void *out;                   /* [T, H, Dl] dtype, written */
    float *lse;                  /* [T, H] float32, written; may be NULL */
    /* FP8 KV only (ignored for other caches): a KV element's value is e4m3(byte) x kv_scale, one
     * per-tensor scale for c_kv and k_pe alike (SGLang's and vLLM's fp8_e4m3 MLA cache). */
    float kv_scale;              /* the scale as a host value, used when kv_scale_ptr is NULL:
                                    finite and > 0, else MLAV_ERR_INVALID_ARG */
    const float *kv_scale_ptr;   /* [1] float32 in `memory`, or NULL: an engine's per-layer scale
                                    tensor, read by the run itself, so a device scale needs no
                                    host read and a captured graph follows its value. A host
                                    one is checked as kv_scale is. A device one cannot be read
                                    on the host without a synchronization: a value that is not
                                    finite and > 0 makes out and lse NaN in every row that sees
                                    a key (loud, never a silent wrong answer). */
    /* A page table shared by every request, as engines keep one (SGLang's req_to_token, indexed
     * by req_pool_indices): with page_table_rows set, request b's page-table row is
     * page_table_rows[b] instead of b, so a step hands over B indices, not B x max_pages ids. */
    const int32_t *page_table_rows; /* [B] int32 in `memory`, or NULL (row b is request b's) */
    int64_t page_table_num_rows;    /* with page_table_rows: rows of page_table, which is then
                                       [page_table_num_rows, max_pages]; every index must be in
                                       [0, page_table_num_rows). Host indices are checked; a
                                       device index outside that range gives its request's rows
                                       NaN (as a page id outside the pool does). Ignored when
                                       page_table_rows is NULL. */
} mlav_tensors;
/* Aliasing: none between outputs and inputs. out and lse may not share a byte with q, kv_cache,
 * page_table, tree_mask or kv_scale_ptr, nor with each other (the byte ranges their shapes above
 * give); mlav_run refuses an overlap with MLAV_ERR_INVALID_ARG, for host and device pointers
 * alike (checked by address arithmetic, nothing is read). Inputs may alias each other freely. */

/* ------------------------------------------------------------------------------------------- */
/* Contexts and plans                                                                           */

/** Create a context for a backend. AUTO resolves at once (see mlav_backend). MLAV_BACKEND in the
 *  environment overrides `want` only when `want` is AUTO; an unknown value is an error.
 *  Returns MLAV_OK, MLAV_ERR_INVALID_ARG (ctx NULL, bad enum or bad MLAV_BACKEND value),
 *  MLAV_ERR_NO_DEVICE (CUDA asked for, not built in or no cc >= 8.0 device),
 *  MLAV_ERR_OUT_OF_MEMORY. */
MLAV_API mlav_status mlav_context_create(mlav_context **ctx, mlav_backend want);
/** Free a context (NULL is fine). Plans made from it stay valid: a plan does not reference its
 *  context after mlav_plan_create, so it may be run and freed after the context is gone. */
MLAV_API void mlav_context_free(mlav_context *ctx);
/** The backend this context runs: what AUTO picked. */
MLAV_API mlav_backend mlav_context_backend(const mlav_context *ctx);
/** A sentence saying how the backend was chosen ("AUTO: no CUDA device; using cpu", or that
 *  MLAV_BACKEND overrode it); never NULL. */
MLAV_API const char *mlav_context_note(const mlav_context *ctx);

/** Validate a problem and prepare to run it: splits are scheduled from the lengths and, on CUDA,
 *  the device's SM count; the schedule is copied to the device here (plan may allocate and
 *  synchronize, run never does). `p`'s arrays are copied: the caller may free them after.
 *  On an AUTO context whose CUDA backend does not support the problem, the plan falls back to
 *  the CPU backend and mlav_context_note() says so.
 *  Returns MLAV_OK, MLAV_ERR_INVALID_ARG, MLAV_ERR_UNSUPPORTED, MLAV_ERR_OUT_OF_MEMORY,
 *  MLAV_ERR_CUDA. */
MLAV_API mlav_status mlav_plan_create(mlav_context *ctx, const mlav_problem *p, mlav_plan **plan);
/** Free a plan (NULL is fine). */
MLAV_API void mlav_plan_free(mlav_plan *plan);
/** Which backend runs this plan (differs from the context's only after an AUTO fallback). */
MLAV_API mlav_backend mlav_plan_backend(const mlav_plan *plan);
/** Workspace bytes mlav_run needs (may be 0). On CUDA it is device memory, else host memory. */
MLAV_API size_t mlav_plan_workspace_bytes(const mlav_plan *plan);
/** Where the workspace must live (MLAV_MEM_DEVICE for the CUDA backends). */
MLAV_API mlav_memory mlav_plan_workspace_memory(const mlav_plan *plan);

/** Run a plan. A plan for limits runs the schedule of the last mlav_plan_update of this
 *  workspace (see "Engine steps" below). `t`'s outputs may not overlap its inputs or each other
 *  (see mlav_tensors). `workspace` (>= 256-byte aligned, `workspace_bytes` >=
 *  mlav_plan_workspace_bytes,
 *  may be NULL when that is 0) is scratch owned by the caller. `stream` is a cudaStream_t on the
 *  CUDA backends (NULL = the legacy default stream) and ignored on the CPU ones.
 *  With MLAV_MEM_DEVICE tensors on a CUDA plan the call is asynchronous on `stream`, allocates
 *  nothing and can be captured in a CUDA graph. With MLAV_MEM_HOST tensors on a CUDA plan it maps
 *  them to the device, runs, copies out/lse back and synchronizes `stream` (offload style; this
 *  mode allocates). A CPU plan given MLAV_MEM_DEVICE tensors returns MLAV_ERR_UNSUPPORTED.
 *  Only out and lse (and the workspace) are written, and only after every check has passed.
 *  Returns MLAV_OK, MLAV_ERR_INVALID_ARG, MLAV_ERR_UNSUPPORTED, MLAV_ERR_WORKSPACE,
 *  MLAV_ERR_OUT_OF_MEMORY, MLAV_ERR_CUDA. */
MLAV_API mlav_status mlav_run(const mlav_plan *plan, const mlav_tensors *t, void *workspace,
                              size_t workspace_bytes, void *stream);

/** One shot: plan, allocate the workspace, run (synchronously), free. Convenient, not fast. */
MLAV_API mlav_status mlav_verify(mlav_context *ctx, const mlav_problem *p, const mlav_tensors *t);

/* ------------------------------------------------------------------------------------------- */
/* Engine steps: one plan for the engine's lifetime, lengths that change at every step          */
/*
 * An engine captures its verify forward into a CUDA graph once and replays it at every decode
 * step while every request's lengths change. A plan for limits is made once for the most the
 * engine will ever run; each step's lengths reach it through mlav_plan_update, which writes the
 * step's split schedule into the caller's workspace on `stream`; every mlav_run of the plan on
 * that workspace (one per layer) then runs that schedule. Neither call allocates device memory
 * or synchronizes, and the launch shape is fixed by the limits, so both can be captured:
 *
 *   plan  = mlav_plan_create_for_limits(ctx, &shape, &limits)       once
 *   ws    = cudaMalloc(mlav_plan_workspace_bytes(plan))              once
 *   capture (or run directly) per step:
 *     mlav_plan_update(plan, &lengths, ws, bytes, stream)           lengths: device or host
 *     for each layer: mlav_run(plan, &tensors_of_layer, ws, bytes, stream)
 *
 * With device lengths (MLAV_MEM_DEVICE) the schedule is built on the device by a small kernel,
 * so one captured graph serves every step whose lengths fit the limits. With host lengths the
 * schedule is built on the host and copied on `stream` from pinned staging owned by the plan
 * (not capturable: call it before each replay). Both build the same schedule from the same
 * lengths. A workspace holds one step's schedule: streams that run different steps at once need
 * one workspace each. A workspace belongs to the plan whose update wrote it last (its step is
 * laid out for that plan's limits and stamped with that plan): a run of any other plan on it,
 * or of any plan on a workspace no update wrote, runs nothing and writes nothing, with
 * MLAV_ERR_WORKSPACE where the workspace is host memory (cpu, reference) and MLAV_OK on CUDA
 * (which cannot read it without a synchronization; mlav_plan_step_status says so there), and
 * the CUDA kernels never read or write past the running plan's limits whatever it holds.
 *
 * Requests past the step's count, and requests with q_len 0 (padding, as engines pad a graph's
 * batch), are skipped on every backend: their rows are not written, and their kv_len and page
 * ids, whatever they hold, are not read. A request whose lengths break the limits or
 * the rules of mlav_problem (kv_len < q_len) is skipped the same way: host lengths get
 * MLAV_ERR_INVALID_ARG and a sentence at once; device lengths cannot be read on the host without
 * a synchronization, so the step goes on without that request's rows and records it in the
 * workspace, where mlav_plan_step_status reads it. A q_indptr that does not start at 0,
 * decreases, or ends past max_tokens computes nothing for the step (also recorded).
 *
 * Tensors of a plan for limits keep the limits' shapes from step to step: q [max_tokens, H, W],
 * out [max_tokens, H, Dl], lse [max_tokens, H], page_table [max_batch, max_pages], tree_mask
 * [max_tokens, ceil(max_q_len / 32)] (the limits' max_q_len: the row stride does not change
 * with the step); rows past the step's q_indptr[batch] are neither read nor written. A shared
 * page table keeps its own rows ([page_table_num_rows, max_pages]) with page_table_rows
 * [max_batch], of which the step's first `batch` entries are read.
 */

/** The most one step of a plan for limits will run. */
typedef struct mlav_limits {
    int32_t max_batch;   /* most requests in a step, 1 .. mlav_limits_max_batch() */
    int32_t max_tokens;  /* most query tokens in a step (q_indptr[batch]), >= 1 */
    int32_t max_q_len;   /* longest draft of a request (q_len), 1 .. max_tokens */
    int32_t max_kv_len;  /* longest kv_len of a request, >= max_q_len, and at most
                            max_pages * page_size (with a shard: the global kv_len, whose
                            rows on the rank, n_r(max_kv_len), are at most that) */
} mlav_limits;

/** Most requests of a plan for limits (limits.max_batch), 2048 in this version: the device
 *  scheduler keeps a prefix sum per request in shared memory. */
MLAV_API int32_t mlav_limits_max_batch(void);

/** One step's lengths. */
typedef struct mlav_lengths {
    mlav_memory memory;       /* where q_indptr and kv_lens live */
    int32_t batch;            /* requests in this step, 0 .. max_batch (a host value: a captured
                                 graph keeps the one it was captured with; pad with q_len 0) */
    const int32_t *q_indptr;  /* [batch+1] */
    const int32_t *kv_lens;   /* [batch] */
} mlav_lengths;

/** Make a plan for limits. `shape` gives num_heads, d_latent, d_rope, softmax_scale, dtype,
 *  kv_dtype, page_size, max_pages (the page_table row stride) and the shard fields (every step
 *  then takes global lengths and runs the rank's shard); its batch, q_indptr and
 *  kv_lens are ignored. The workspace bound (mlav_plan_workspace_bytes) covers every step
 *  within the limits.
 *  On CUDA the plan's runs take MLAV_MEM_DEVICE tensors only. On an AUTO context whose CUDA
 *  backend cannot run the shape, the plan falls back to the CPU as mlav_plan_create does.
 *  cuda-naive's plan for limits launches one block per query row of max_tokens, and each
 *  block reads its request's lengths from the workspace's step (its score row of max_kv_len
 *  must fit shared memory, else MLAV_ERR_UNSUPPORTED).
 *  Returns MLAV_OK, MLAV_ERR_INVALID_ARG, MLAV_ERR_UNSUPPORTED, MLAV_ERR_OUT_OF_MEMORY,
 *  MLAV_ERR_CUDA. */
MLAV_API mlav_status mlav_plan_create_for_limits(mlav_context *ctx, const mlav_problem *shape,
                                                 const mlav_limits *limits, mlav_plan **plan);

/** The limits of a plan made by mlav_plan_create_for_limits (MLAV_ERR_INVALID_ARG for a plan
 *  made for one problem). */
MLAV_API mlav_status mlav_plan_limits(const mlav_plan *plan, mlav_limits *limits);

/** Give a plan for limits the lengths of the next step: write its schedule into `workspace` on
 *  `stream` (ordered before the runs that follow on it). Device lengths: asynchronous, nothing
 *  read on the host, capturable. Host lengths: checked at once, scheduled on the host, copied
 *  asynchronously; not capturable (MLAV_ERR_UNSUPPORTED while `stream` captures). CPU backends
 *  take host lengths only and ignore the stream.
 *  Returns MLAV_OK, MLAV_ERR_INVALID_ARG (host lengths outside the limits or inconsistent, a
 *  plan made for one problem), MLAV_ERR_UNSUPPORTED, MLAV_ERR_WORKSPACE, MLAV_ERR_CUDA. */
MLAV_API mlav_status mlav_plan_update(const mlav_plan *plan, const mlav_lengths *lengths,
                                      void *workspace, size_t workspace_bytes, void *stream);

/** Whether the last update of `workspace` took every request: MLAV_OK, or MLAV_ERR_INVALID_ARG
 *  with a sentence naming the first refused request (or the broken q_indptr), or
 *  MLAV_ERR_WORKSPACE when this plan's update did not write the workspace last (another plan's
 *  step, or none: its runs run nothing). Reads the workspace: on CUDA it copies the 64-byte step
 *  header on `stream` and synchronizes it (a check for after the step, not for the hot loop).
 *  *bad_request (may be NULL) gets -1 when all were taken (or the workspace is not the plan's),
 *  the index of the first refused request, or batch when q_indptr itself was refused. */
MLAV_API mlav_status mlav_plan_step_status(const mlav_plan *plan, const void *workspace,
                                           size_t workspace_bytes, void *stream,
                                           int32_t *bad_request);

/* ------------------------------------------------------------------------------------------- */
/* Helpers on host memory                                                                       */

/** Merge `num_states` attention states over disjoint KV ranges into one (exact up to rounding).
 *  outs[i]: [rows, dim] float32, lses[i]: [rows] float32 (natural log; -inf = empty state).
 *  Writes out [rows, dim] and lse [rows]; out may alias outs[0] and lse lses[0] (exactly: any
 *  other overlap of an output with an input or the other output is refused).
 *  Rows whose states are all empty get out = 0, lse = -inf.
 *  Returns MLAV_OK or MLAV_ERR_INVALID_ARG. */
MLAV_API mlav_status mlav_merge_states(int32_t num_states, int64_t rows, int32_t dim,
                                       const float *const *outs, const float *const *lses,
                                       float *out, float *lse);

/* Merging attention states on host or device memory, on a stream. A state is (o, lse) over a
 * KV range: o [rows, dim] the softmax-weighted average of V over the range, lse [rows] float32
 * its log-sum-exp (natural log; -inf: nothing visible, an empty state). rows is any flattening,
 * typically tokens x heads ([T, H, Dl] is rows = T * H, dim = Dl). The merge is the one the
 * split-KV combine applies: a NaN lse in any state makes its row's out and lse NaN;
 * a row whose states are all empty gets out 0, lse -inf; an empty state's o is never read.
 * o is accumulated in fp32 and rounded to `dtype` once (nearest even).
 *
 * `memory` says where every pointer of the call lives. MLAV_MEM_HOST: a C loop on the calling
 * thread; `stream` is ignored. MLAV_MEM_DEVICE: a CUDA kernel on the current device, queued on
 * `stream` (a cudaStream_t; NULL = the legacy default stream) and asynchronous: nothing is
 * allocated, synchronized or read back, so the call can be captured in a CUDA graph (a replay
 * reads whatever the same pointers hold then). A library built without CUDA returns
 * MLAV_ERR_UNSUPPORTED for device memory. Pointers must be aligned to their element size.
 * Only out and lse are written, and only after every check has passed.
 * Each returns MLAV_OK, MLAV_ERR_INVALID_ARG (a NULL, a count or size out of range, dtype not
 * F32 / BF16 / F16, a misaligned pointer, an overlap the rules below refuse, a device pointer
 * that is not memory of the current device), MLAV_ERR_UNSUPPORTED, MLAV_ERR_NO_DEVICE or
 * MLAV_ERR_CUDA, with a sentence (mlav_last_error). */

/** Most states one merge takes. */
#define MLAV_MERGE_MAX_STATES 4096

/** Merge `num_states` (1 .. MLAV_MERGE_MAX_STATES) states stacked in one tensor each, as an
 *  all-gather of the ranks' partial states writes them:
 *    outs [num_states, rows, dim] dtype, lses [num_states, rows] float32 (inputs);
 *    out  [rows, dim] dtype, lse [rows] float32 or NULL (not written) (outputs).
 *  out may be exactly outs' first state (out == outs) and lse exactly lses' first (lse ==
 *  lses); any other overlap of an output with an input or with the other output is refused.
 *  (Stacked rather than an array of pointers: a device merge then needs no pointer array in
 *  device memory, so nothing is copied or allocated per call and a graph keeps two pointers.) */
MLAV_API mlav_status mlav_merge_states_stacked(mlav_memory memory, mlav_dtype dtype,
                                               int32_t num_states, int64_t rows, int32_t dim,
                                               const void *outs, const float *lses, void *out,
                                               float *lse, void *stream);

/** Merge state b into state a in place (FlashInfer's merge_state_in_place, SGLang's and vLLM's
 *  two-state merge): out [rows, dim] dtype and lse [rows] float32 hold state a and receive the
 *  merge; other_out [rows, dim] dtype and other_lse [rows] float32 hold state b (read only).
 *  State b may not overlap state a, nor out overlap lse. */
MLAV_API mlav_status mlav_merge_state_in_place(mlav_memory memory, mlav_dtype dtype,
                                               int64_t rows, int32_t dim, void *out, float *lse,
                                               const void *other_out, const float *other_lse,
                                               void *stream);

/* Context-parallel verify across GPUs: each of R ranks verifies the KV rows it holds and gets a
 * partial state per row (out, lse); the exchange below gives every rank the merged state, the
 * verify of the whole cache. */

/** Whether this library was built with NCCL (mlav_cp_merge_states). */
MLAV_API int mlav_nccl_compiled(void);

/** Collective over the R ranks of an NCCL communicator `comm` (an ncclComm_t): every rank passes
 *  its partial state, out_local [rows, dim] dtype and lse_local [rows] float32, and receives the
 *  merged state of all R in out [rows, dim] dtype and lse [rows] float32 (or NULL: not written).
 *  gathered_out [R, rows, dim] dtype and gathered_lse [R, rows] float32 are the caller's
 *  scratch (an all-gather of the states lands there, then the merge of
 *  mlav_merge_states_stacked runs on it, with its NaN and empty-state rules). Every pointer is
 *  device memory of the current device, which must be the communicator's. Asynchronous on
 *  `stream`, allocates nothing, capturable in a CUDA graph as NCCL's collectives are. Every rank
 *  must call it with the same dtype, rows and dim (NCCL cannot check that: a mismatch hangs or
 *  corrupts, as with any collective). out may be exactly out_local and lse exactly lse_local;
 *  any other overlap between the six buffers is refused.
 *  Returns MLAV_OK, MLAV_ERR_INVALID_ARG, MLAV_ERR_UNSUPPORTED (built without NCCL or CUDA),
 *  MLAV_ERR_NO_DEVICE, MLAV_ERR_CUDA (a CUDA or NCCL call failed; the sentence names it). */
MLAV_API mlav_status mlav_cp_merge_states(void *comm, mlav_dtype dtype, int64_t rows,
                                          int32_t dim, const void *out_local,
                                          const float *lse_local, void *gathered_out,
                                          float *gathered_lse, void *out, float *lse,
                                          void *stream);

/** Words per mask row for a request batch whose longest draft has max_q_len nodes. */
MLAV_API int32_t mlav_tree_mask_words(int32_t max_q_len);

/** Build one request's tree mask: row i sees itself and its ancestors.
 *  parents [q_len]: parents[0] = -1, 0 <= parents[i] < i for i > 0.
 *  mask [q_len, words]: words >= mlav_tree_mask_words(q_len); bits past q_len are cleared.
 *  Returns MLAV_OK or MLAV_ERR_INVALID_ARG. */
MLAV_API mlav_status mlav_tree_mask_from_parents(int32_t q_len, const int32_t *parents,
                                                 int32_t words, uint32_t *mask);

/** Greedy acceptance of one request's draft tree. From node 0 (always accepted), at node p the
 *  first child c (lowest index, parents[c] == p) with draft_tokens[c] == target_tokens[p] is
 *  accepted and the walk continues from c; it stops when no child matches.
 *  parents, draft_tokens, target_tokens: [q_len]. accepted [q_len]: the accepted node path,
 *  -1 padded. *num_accepted: its length (>= 1). *bonus_token: target_tokens[last accepted].
 *  Returns MLAV_OK or MLAV_ERR_INVALID_ARG. */
MLAV_API mlav_status mlav_tree_accept_greedy(int32_t q_len, const int32_t *parents,
                                             const int32_t *draft_tokens,
                                             const int32_t *target_tokens, int32_t *accepted,
                                             int32_t *num_accepted, int32_t *bonus_token);

/* ------------------------------------------------------------------------------------------- */
/* Introspection                                                                                */

/** Whether a backend was compiled into this library (AUTO: always 1). */
MLAV_API int mlav_backend_compiled(mlav_backend b);

/** Number of CUDA devices of compute capability >= 8.0 (0 without CUDA or without a device). */
MLAV_API int mlav_cuda_device_count(void);

/** Describe CUDA device `index` in `buf` ("NVIDIA H200, cc 9.0, 132 SMs, 227 KiB smem/block,
 *  driver 13.0"). Returns MLAV_OK, MLAV_ERR_NO_DEVICE or MLAV_ERR_INVALID_ARG. */
MLAV_API mlav_status mlav_cuda_device_describe(int index, char *buf, size_t buf_len);

#ifdef __cplusplus
}
#endif

#endif /* MLAVERIFY_H */
