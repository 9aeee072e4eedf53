/* Device facts read at run time, CUDA errors turned into sentences, the per-kernel shared-memory
 * check, device workspaces, and the public device-introspection functions. */
#include <stdio.h>
#include <string.h>

#include "cuda_device.h"
#include "flash_family.h"

/* __FILE__ is an absolute build path; the sentence only needs the file's name. */
static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

mlav_status mlav_cuda_error(cudaError_t e, const char *what, const char *file, int line)
{
    /* A non-sticky error stays as the runtime's "last error" until read; clear it so that the
     * cudaGetLastError() after our next launch does not blame that launch for it. */
    (void)cudaGetLastError();
    return mlav_set_error(MLAV_ERR_CUDA, "%s failed: %s at %s:%d", what, cudaGetErrorString(e),
                          base_name(file), line);
}

/* Devices the runtime reports, 0 when there is no driver or no device (never an error: a
 * machine without a GPU is a normal place to run the CPU backends). */
static int runtime_device_count(cudaError_t *err)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (err)
        *err = e;
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

static int device_cc_major(int device)
{
    int major = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return major;
}

/* Why cudaGetDeviceCount found nothing, in words a user without a GPU recognises: the
 * runtime's own text for a missing driver ("CUDA driver version is insufficient for CUDA
 * runtime version") reads like a version problem on a machine that has no NVIDIA driver at all. */
static void no_device_reason(cudaError_t e, char *buf, size_t len)
{
    int driver = 0, runtime = 0;
    if (cudaDriverGetVersion(&driver) != cudaSuccess)
        driver = 0;
    (void)cudaRuntimeGetVersion(&runtime);
    (void)cudaGetLastError();
    if (e == cudaErrorInsufficientDriver && driver == 0)
        snprintf(buf, len, "no NVIDIA driver was found, so no GPU can be used");
    else if (e == cudaErrorInsufficientDriver)
        snprintf(buf, len, "the NVIDIA driver (CUDA %d.%d) is older than this library's CUDA "
                 "runtime (%d.%d); update the driver", driver / 1000, (driver % 1000) / 10,
                 runtime / 1000, (runtime % 1000) / 10);
    else if (e == cudaErrorNoDevice || e == cudaSuccess)
        snprintf(buf, len, "no NVIDIA GPU was found (the driver reports no CUDA device)");
    else
        snprintf(buf, len, "%s", cudaGetErrorString(e));
}

mlav_status mlav_cuda_device_query(mlav_cuda_device *dev)
{
    memset(dev, 0, sizeof *dev);
    cudaError_t e = cudaSuccess;
    if (runtime_device_count(&e) == 0) {
        char why[160];
        no_device_reason(e, why, sizeof why);
        return mlav_set_error(MLAV_ERR_NO_DEVICE, "no CUDA device is usable: %s", why);
    }
    MLAV_CUDA_TRY(cudaGetDevice(&dev->device));
    const int d = dev->device;
    int smem_optin = 0, smem_sm = 0, smem_reserved = 0, l2 = 0;
    MLAV_CUDA_TRY(cudaDeviceGetAttribute(&dev->cc_major, cudaDevAttrComputeCapabilityMajor, d));
    MLAV_CUDA_TRY(cudaDeviceGetAttribute(&dev->cc_minor, cudaDevAttrComputeCapabilityMinor, d));
    MLAV_CUDA_TRY(cudaDeviceGetAttribute(&dev->sm_count, cudaDevAttrMultiProcessorCount, d));
    MLAV_CUDA_TRY(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, d));
    MLAV_CUDA_TRY(cudaDeviceGetAttribute(&smem_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, d));
    MLAV_CUDA_TRY(cudaDeviceGetAttribute(&smem_reserved, cudaDevAttrReservedSharedMemoryPerBlock, d));
    MLAV_CUDA_TRY(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, d));
    if (dev->cc_major < 8)
        return mlav_set_error(MLAV_ERR_NO_DEVICE,
                              "CUDA device %d has compute capability %d.%d; the CUDA backends "
                              "need 8.0 or newer (mma.sync bf16, cp.async)",
                              d, dev->cc_major, dev->cc_minor);
    dev->smem_optin = (size_t)smem_optin;
    dev->smem_limit = dev->smem_optin < (size_t)MLAV_SM120_SMEM_LIMIT
                          ? dev->smem_optin
                          : (size_t)MLAV_SM120_SMEM_LIMIT;
    dev->smem_per_sm = (size_t)smem_sm;
    dev->smem_reserved = (size_t)smem_reserved;
    dev->l2_bytes = (size_t)l2;
    return MLAV_OK;
}

mlav_status mlav_cuda_available(void)
{
    mlav_cuda_device dev;
    return mlav_cuda_device_query(&dev);
}

mlav_status mlav_cuda_prepare_kernel(const void *func, size_t dynamic_bytes,
                                     const mlav_cuda_device *dev, const char *name)
{
    cudaFuncAttributes a;
    MLAV_CUDA_TRY(cudaFuncGetAttributes(&a, func));
    const size_t static_bytes = a.sharedSizeBytes;
    if (static_bytes + dynamic_bytes > dev->smem_limit) {
        if (dev->smem_limit == (size_t)MLAV_SM120_SMEM_LIMIT)
            return mlav_set_error(MLAV_ERR_UNSUPPORTED,
                                  "kernel %s needs %zu bytes of shared memory (%zu static + %zu "
                                  "dynamic), more than sm_120's %d-byte limit",
                                  name, static_bytes + dynamic_bytes, static_bytes, dynamic_bytes,
                                  MLAV_SM120_SMEM_LIMIT);
        return mlav_set_error(MLAV_ERR_UNSUPPORTED,
                              "kernel %s needs %zu bytes of shared memory (%zu static + %zu "
                              "dynamic), more than this device's %zu-byte limit per block",
                              name, static_bytes + dynamic_bytes, static_bytes, dynamic_bytes,
                              dev->smem_limit);
    }
    /* Raise the limit to everything our kernels may use rather than to this launch's need:
     * plans of different sizes share the kernel, and threads running them at once must never
     * lower the limit under another thread's pending launch. The attribute is only a ceiling;
     * occupancy follows each launch's actual size. */
    MLAV_CUDA_TRY(cudaFuncSetAttribute(func, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)(dev->smem_limit - static_bytes)));
    return MLAV_OK;
}

void *mlav_cuda_workspace_alloc(size_t bytes)
{
    void *p = NULL;
    /* cudaMalloc returns 256-byte aligned memory, as mlav_run requires of a workspace. */
    if (cudaMalloc(&p, bytes ? bytes : 256) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    return p;
}

void mlav_cuda_workspace_free(void *ptr)
{
    if (ptr && cudaFree(ptr) != cudaSuccess)
        (void)cudaGetLastError();
}

mlav_status mlav_cuda_step_read(const void *workspace, void *stream, void *header, size_t bytes)
{
    cudaStream_t st = static_cast<cudaStream_t>(stream);
    MLAV_CUDA_TRY(cudaMemcpyAsync(header, workspace, bytes, cudaMemcpyDeviceToHost, st));
    MLAV_CUDA_TRY(cudaStreamSynchronize(st));
    return MLAV_OK;
}

/* ---- public introspection (C linkage through mlaverify.h's extern "C") ------------------- */

/* Ordinal of the index-th device of cc >= 8.0, or -1: the public functions number only the
 * devices the CUDA backends can run on, so count and describe agree. */
static int eligible_ordinal(int index)
{
    const int n = runtime_device_count(NULL);
    for (int d = 0, seen = 0; d < n; d++) {
        if (device_cc_major(d) < 8)
            continue;
        if (seen++ == index)
            return d;
    }
    return -1;
}

int mlav_cuda_device_count(void)
{
    const int n = runtime_device_count(NULL);
    int eligible = 0;
    for (int d = 0; d < n; d++)
        eligible += device_cc_major(d) >= 8;
    return eligible;
}

mlav_status mlav_cuda_device_describe(int index, char *buf, size_t buf_len)
{
    if (!buf || buf_len == 0)
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "buf must not be NULL or empty");
    buf[0] = '\0';
    const int count = mlav_cuda_device_count();
    if (count == 0)
        return mlav_set_error(MLAV_ERR_NO_DEVICE, "no CUDA device of compute capability >= 8.0");
    if (index < 0 || index >= count)
        return mlav_set_error(MLAV_ERR_INVALID_ARG,
                              "device index %d is outside [0, %d) (devices of cc >= 8.0)", index,
                              count);
    const int d = eligible_ordinal(index);
    cudaDeviceProp prop;
    MLAV_CUDA_TRY(cudaGetDeviceProperties(&prop, d));
    int smem_optin = 0, driver = 0;
    MLAV_CUDA_TRY(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, d));
    MLAV_CUDA_TRY(cudaDriverGetVersion(&driver));
    int n = snprintf(buf, buf_len, "%s, cc %d.%d, %d SMs, %d KiB smem/block, %d MiB L2, driver "
                     "%d.%d",
                     prop.name, prop.major, prop.minor, prop.multiProcessorCount,
                     smem_optin / 1024, prop.l2CacheSize / (1024 * 1024), driver / 1000,
                     (driver % 1000) / 10);
    if (d != index && n > 0 && (size_t)n < buf_len)
        n += snprintf(buf + n, buf_len - (size_t)n, ", CUDA ordinal %d", d);
    const char *why = "";
    const mlav_flash_family f = mlav_flash_family_of(prop.major, prop.minor, &why);
    if (n > 0 && (size_t)n < buf_len)
        snprintf(buf + n, buf_len - (size_t)n, "; flash kernels: %s (%s)",
                 mlav_flash_family_name(f), why);
    return MLAV_OK;
}
