// A stand-in for the NVIDIA driver's libnvidia-ml.so.1 with two GPUs, for the tests of the GPU
// metrics on machines without a GPU: the server loads it through ARBITER_NVML_LIBRARY exactly
// as it loads NVML. Memory in use grows by 1 MiB each time a GPU is read, so a test can see
// the gauges refresh.

#include <cstring>

namespace {

struct fake_device {
  const char* name;
  unsigned long long total;
  unsigned long long used;
  unsigned utilization;
};

fake_device devices[2] = {
  {"Fake GPU 0", 80ULL << 30, 1ULL << 30, 37},
  {"Fake GPU 1", 80ULL << 30, 2ULL << 30, 0},
};

struct memory {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

struct utilization {
  unsigned gpu;
  unsigned memory;
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

int nvmlDeviceGetHandleByIndex_v2(unsigned index, void** device) {
  if (index >= 2) {
    return 2; // NVML_ERROR_INVALID_ARGUMENT
  }
  *device = &devices[index];
  return 0;
}

int nvmlDeviceGetName(void* device, char* name, unsigned length) {
  std::strncpy(name, static_cast<fake_device*>(device)->name, length - 1);
  name[length - 1] = '\0';
  return 0;
}

int nvmlDeviceGetMemoryInfo(void* device, memory* out) {
  auto* d = static_cast<fake_device*>(device);
  d->used += 1ULL << 20;
  out->total = d->total;
  out->used = d->used;
  out->free = d->total - d->used;
  return 0;
}

int nvmlDeviceGetUtilizationRates(void* device, utilization* out) {
  out->gpu = static_cast<fake_device*>(device)->utilization;
  out->memory = 0;
  return 0;
}

} // extern "C"
