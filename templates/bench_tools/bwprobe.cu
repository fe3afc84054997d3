// gpuctl-bwprobe: per-GPU host<->device, device-local and peer copy bandwidth.
// Managed by gpuctl (role bench_tools); compiled on the node with the installed nvcc.
// Prints one JSON object, schema "gpuctl-bwprobe" version 1 (gpuctl/parsers/bandwidth.py):
//   {"tool": "gpuctl-bwprobe", "version": 1, "gpus": [{"index": 0, "bus_id": "...",
//     "h2d_gb_s": x, "d2h_gb_s": x, "hbm_copy_gb_s": x, "p2p_gb_s": {"1": x}}]}
// or {"tool": "gpuctl-bwprobe", "version": 1, "gpus": [], "error": "..."} when it cannot run.
// GB/s = 10^9 bytes per second. hbm_copy_gb_s counts read + write bytes (2 x copy size).
// Usage: gpuctl-bwprobe [size_mib (default 256)] [iterations (default 20)]
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

static void fail_json(const std::string &msg) {
    std::string esc;
    for (char c : msg) {
        if (c == '"' || c == '\\') esc += '\\';
        if (c == '\n') { esc += "\\n"; continue; }
        esc += c;
    }
    printf("{\"tool\": \"gpuctl-bwprobe\", \"version\": 1, \"gpus\": [], \"error\": \"%s\"}\n", esc.c_str());
    exit(1);
}

#define CHECK(call)                                                                      \
    do {                                                                                 \
        cudaError_t err_ = (call);                                                       \
        if (err_ != cudaSuccess)                                                         \
            fail_json(std::string(#call) + ": " + cudaGetErrorString(err_));             \
    } while (0)

// Time `iters` async copies on one stream with events; returns GB/s for `bytes_per_copy`
// counted `factor` times (2 for a device-local copy: read + write).
static double time_copies(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, int iters,
                          double factor) {
    cudaStream_t s;
    cudaEvent_t a, b;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    CHECK(cudaMemcpyAsync(dst, src, bytes, kind, s));  // warm-up
    CHECK(cudaEventRecord(a, s));
    for (int i = 0; i < iters; ++i) CHECK(cudaMemcpyAsync(dst, src, bytes, kind, s));
    CHECK(cudaEventRecord(b, s));
    CHECK(cudaEventSynchronize(b));
    float ms = 0.0f;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    CHECK(cudaEventDestroy(a));
    CHECK(cudaEventDestroy(b));
    CHECK(cudaStreamDestroy(s));
    return factor * (double)bytes * iters / (ms / 1e3) / 1e9;
}

static double time_peer(void *dst, int dst_dev, const void *src, int src_dev, size_t bytes, int iters) {
    cudaStream_t s;
    cudaEvent_t a, b;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    CHECK(cudaMemcpyPeerAsync(dst, dst_dev, src, src_dev, bytes, s));
    CHECK(cudaEventRecord(a, s));
    for (int i = 0; i < iters; ++i) CHECK(cudaMemcpyPeerAsync(dst, dst_dev, src, src_dev, bytes, s));
    CHECK(cudaEventRecord(b, s));
    CHECK(cudaEventSynchronize(b));
    float ms = 0.0f;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    CHECK(cudaEventDestroy(a));
    CHECK(cudaEventDestroy(b));
    CHECK(cudaStreamDestroy(s));
    return (double)bytes * iters / (ms / 1e3) / 1e9;
}

int main(int argc, char **argv) {
    size_t mib = argc > 1 ? strtoul(argv[1], nullptr, 10) : 256;
    int iters = argc > 2 ? atoi(argv[2]) : 20;
    if (mib == 0 || iters <= 0) fail_json("usage: gpuctl-bwprobe [size_mib>0] [iterations>0]");
    size_t bytes = mib << 20;
    int n = 0;
    CHECK(cudaGetDeviceCount(&n));
    if (n == 0) fail_json("no CUDA device");

    std::vector<void *> dev(n, nullptr);
    for (int d = 0; d < n; ++d) {
        CHECK(cudaSetDevice(d));
        CHECK(cudaMalloc(&dev[d], bytes));
        CHECK(cudaMemset(dev[d], 1, bytes));
    }
    std::string out = "{\"tool\": \"gpuctl-bwprobe\", \"version\": 1, \"gpus\": [";
    for (int d = 0; d < n; ++d) {
        CHECK(cudaSetDevice(d));
        char bus[32] = {0};
        CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, d));
        void *host = nullptr, *scratch = nullptr;
        CHECK(cudaMallocHost(&host, bytes));
        CHECK(cudaMalloc(&scratch, bytes));
        double h2d = time_copies(dev[d], host, bytes, cudaMemcpyHostToDevice, iters, 1.0);
        double d2h = time_copies(host, dev[d], bytes, cudaMemcpyDeviceToHost, iters, 1.0);
        double hbm = time_copies(scratch, dev[d], bytes, cudaMemcpyDeviceToDevice, iters, 2.0);
        std::string p2p;
        for (int p = 0; p < n; ++p) {
            if (p == d) continue;
            int can = 0;
            CHECK(cudaDeviceCanAccessPeer(&can, d, p));
            if (!can) continue;
            cudaError_t e = cudaDeviceEnablePeerAccess(p, 0);
            if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) CHECK(e);
            (void)cudaGetLastError();
            double bw = time_peer(dev[p], p, dev[d], d, bytes, iters);
            char item[64];
            snprintf(item, sizeof item, "%s\"%d\": %.2f", p2p.empty() ? "" : ", ", p, bw);
            p2p += item;
        }
        CHECK(cudaFreeHost(host));
        CHECK(cudaFree(scratch));
        char gpu[512];
        snprintf(gpu, sizeof gpu,
                 "%s{\"index\": %d, \"bus_id\": \"%s\", \"h2d_gb_s\": %.2f, \"d2h_gb_s\": %.2f, "
                 "\"hbm_copy_gb_s\": %.2f, \"p2p_gb_s\": {%s}}",
                 d ? ", " : "", d, bus, h2d, d2h, hbm, p2p.c_str());
        out += gpu;
    }
    out += "]}";
    printf("%s\n", out.c_str());
    for (int d = 0; d < n; ++d) {
        CHECK(cudaSetDevice(d));
        CHECK(cudaFree(dev[d]));
    }
    return 0;
}
