// A stand-in for the NVIDIA driver's libnvidia-ml.so.1 with two GPUs, for the tests of the GPU
// metrics on machines without a GPU: the server loads it through ARBITER_NVML_LIBRARY exactly
// as it loads NVML. Memory in use grows by 1 MiB each time a GPU is read, so a test can see
// the gauges refresh.

#include <cstring>

// NVML's own types (nvml.h), which gpu_monitor.cpp declares too: the functions below must
// have the types it calls them through. The device handle points at one of `devices`.
struct nvmlDevice_st {
  const char* name;
  unsigned long long total;
  unsigned long long used;
  unsigned utilization;
};

struct nvmlMemory_st {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

struct nvmlUtilization_st {
  unsigned int gpu;
  unsigned int memory;
};

namespace {

nvmlDevice_st devices[2] = {
  {"Fake GPU 0", 80ULL << 30, 1ULL << 30, 37},
  {"Fake GPU 1", 80ULL << 30, 2ULL << 30, 0},
};

} // namespace

extern "C" {

int nvmlInit_v2() {
  return 0;
}

int nvmlShutdown() {
  return 0;
}

int nvmlDeviceGetCount_v2(unsigned* count) {
  *count = 2;
  return 0;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_st** device) {
  if (index >= 2) {
    return 2; // NVML_ERROR_INVALID_ARGUMENT
  }
  *device = &devices[index];
  return 0;
}

int nvmlDeviceGetName(nvmlDevice_st* device, char* name, unsigned length) {
  std::strncpy(name, device->name, length - 1);
  name[length - 1] = '\0';
  return 0;
}

int nvmlDeviceGetMemoryInfo(nvmlDevice_st* device, nvmlMemory_st* out) {
  auto* d = device;
  d->used += 1ULL << 20;
  out->total = d->total;
  out->used = d->used;
  out->free = d->total - d->used;
  return 0;
}

int nvmlDeviceGetUtilizationRates(nvmlDevice_st* device, nvmlUtilization_st* out) {
  out->gpu = device->utilization;
  out->memory = 0;
  return 0;
}

} // extern "C"
