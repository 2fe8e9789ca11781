// Device facts for metacog_fast.backends(); plain C ABI so module.cpp needs no CUDA headers.
#include <cuda_runtime.h>

#include <cstring>

extern "C" int metacog_cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

extern "C" int metacog_cuda_runtime_version() {
  int v = 0;
  cudaRuntimeGetVersion(&v);
  return v;
}

extern "C" int metacog_cuda_device_name(int device, char* buf, int len) {
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) return -1;
  std::strncpy(buf, prop.name, len - 1);
  return 0;
}
