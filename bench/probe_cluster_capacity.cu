// How many thread block clusters of 2-16 blocks the GPU holds at once (cudaOccupancyMaxActiveClusters) for a block
// of the Hopper kv-cache kernel's size (160 threads) with its shared memory (84 KB: two blocks an SM) and with more
// than half an SM's (120 KB: one block an SM). 16-block clusters of split-KV decode read 107 us on one H100 and
// 119 us on another at the same shape (bench/NOTES.md, "kv-cache: splits merged in a cluster"): this prints what a
// board offers.    nvcc -arch=sm_90a -o probe bench/probe_cluster_capacity.cu && ./probe
#include <cstdio>
#include <cuda_runtime.h>
__global__ void k(int* p) {
    extern __shared__ int s[];
    if (p) p[0] = s[0];
}
int main() {
    cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024);
    cudaFuncSetAttribute(k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    int sms; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    printf("SMs %d\n", sms);
    for (int smem : {84 * 1024, 120 * 1024}) {
        printf("smem %d KB:", smem / 1024);
        for (int c = 2; c <= 16; ++c) {
            cudaLaunchConfig_t cfg = {};
            cfg.gridDim = dim3(1, 1, c); cfg.blockDim = dim3(160); cfg.dynamicSmemBytes = smem;
            cudaLaunchAttribute a[1]; a[0].id = cudaLaunchAttributeClusterDimension;
            a[0].val.clusterDim.x = 1; a[0].val.clusterDim.y = 1; a[0].val.clusterDim.z = c;
            cfg.attrs = a; cfg.numAttrs = 1;
            int n = -1; cudaError_t e = cudaOccupancyMaxActiveClusters(&n, k, &cfg);
            printf(" %d:%d%s", c, n, e ? "!" : "");
        }
        printf("\n");
    }
}
