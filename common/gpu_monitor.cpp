#include "common/gpu_monitor.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

// The few NVML declarations used, as nvml.h gives them (a stable C ABI), under nvml.h's own
// type names: a function must be called through a pointer of the type it was defined with,
// which UBSan checks (-fsanitize=function) against tests/support/fake_nvml.cpp.
struct nvmlDevice_st;
struct nvmlMemory_st {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
struct nvmlUtilization_st {
  unsigned int gpu;
  unsigned int memory;
};

namespace arbiter {

namespace {

using nvml_return = int;
using nvml_device = nvmlDevice_st*;
using nvml_memory = nvmlMemory_st;
using nvml_utilization = nvmlUtilization_st;
constexpr nvml_return nvml_success = 0;
constexpr unsigned nvml_name_size = 96;

template <class F>
F symbol(void* lib, const char* name) {
  return reinterpret_cast<F>(dlsym(lib, name));
}

} // namespace

struct gpu_monitor::impl {
  void* lib = nullptr;
  nvml_return (*shutdown)() = nullptr;
  nvml_return (*handle_by_index)(unsigned, nvml_device*) = nullptr;
  nvml_return (*name)(nvml_device, char*, unsigned) = nullptr;
  nvml_return (*memory)(nvml_device, nvml_memory*) = nullptr;
  nvml_return (*utilization)(nvml_device, nvml_utilization*) = nullptr;
  std::mutex mutex;
  std::vector<gpu_status> last;
  prometheus::Family<prometheus::Gauge>* used = nullptr;
  prometheus::Family<prometheus::Gauge>* total = nullptr;
  prometheus::Family<prometheus::Gauge>* busy = nullptr;
  prometheus::Family<prometheus::Gauge>* workers = nullptr;

  ~impl() {
    if (shutdown != nullptr) {
      shutdown();
    }
    if (lib != nullptr) {
      dlclose(lib);
    }
  }
};

std::unique_ptr<gpu_monitor> gpu_monitor::open(metrics_registry& registry,
                                               const std::string& library) {
  std::string path = library;
  if (path.empty()) {
    const char* env = std::getenv("ARBITER_NVML_LIBRARY");
    path = env != nullptr && *env != '\0' ? env : "libnvidia-ml.so.1";
  }
  auto p = std::make_unique<impl>();
  p->lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (p->lib == nullptr) {
    return nullptr;
  }
  auto init = symbol<nvml_return (*)()>(p->lib, "nvmlInit_v2");
  auto count = symbol<nvml_return (*)(unsigned*)>(p->lib, "nvmlDeviceGetCount_v2");
  p->handle_by_index =
    symbol<decltype(p->handle_by_index)>(p->lib, "nvmlDeviceGetHandleByIndex_v2");
  p->name = symbol<decltype(p->name)>(p->lib, "nvmlDeviceGetName");
  p->memory = symbol<decltype(p->memory)>(p->lib, "nvmlDeviceGetMemoryInfo");
  p->utilization = symbol<decltype(p->utilization)>(p->lib, "nvmlDeviceGetUtilizationRates");
  auto shutdown = symbol<nvml_return (*)()>(p->lib, "nvmlShutdown");
  if (init == nullptr || count == nullptr || p->handle_by_index == nullptr || p->name == nullptr
      || p->memory == nullptr || p->utilization == nullptr || shutdown == nullptr
      || init() != nvml_success) {
    return nullptr;
  }
  p->shutdown = shutdown;
  unsigned devices = 0;
  if (count(&devices) != nvml_success || devices == 0) {
    return nullptr;
  }
  for (unsigned i = 0; i < devices; ++i) {
    gpu_status s;
    s.index = i;
    nvml_device d = nullptr;
    char text[nvml_name_size] = {};
    if (p->handle_by_index(i, &d) == nvml_success && p->name(d, text, nvml_name_size) == nvml_success) {
      s.name = text;
    }
    p->last.push_back(std::move(s));
  }
  p->used = &registry.gauge("arbiter_gpu_memory_used_bytes",
                            "GPU memory in use (all processes), by GPU");
  p->total = &registry.gauge("arbiter_gpu_memory_total_bytes", "GPU memory, by GPU");
  p->busy = &registry.gauge("arbiter_gpu_utilization_ratio",
                            "Share of the last sample period a kernel ran, by GPU");
  p->workers = &registry.gauge("arbiter_gpu_model_workers",
                               "Model workers running on each GPU, by GPU and model");
  std::unique_ptr<gpu_monitor> out{new gpu_monitor{std::move(p)}};
  out->read();
  return out;
}

gpu_monitor::gpu_monitor(std::unique_ptr<impl> p) : impl_(std::move(p)) {
}

gpu_monitor::~gpu_monitor() = default;

size_t gpu_monitor::count() const noexcept {
  return impl_->last.size();
}

std::vector<gpu_status> gpu_monitor::read() {
  auto& p = *impl_;
  std::lock_guard lock{p.mutex};
  for (auto& s : p.last) {
    nvml_device d = nullptr;
    if (p.handle_by_index(s.index, &d) != nvml_success) {
      continue;
    }
    nvml_memory m{};
    if (p.memory(d, &m) == nvml_success) {
      s.memory_used = m.used;
      s.memory_total = m.total;
    }
    nvml_utilization u{};
    if (p.utilization(d, &u) == nvml_success) {
      s.utilization = static_cast<double>(u.gpu) / 100.0;
    }
    const std::map<std::string, std::string> labels{{"gpu", std::to_string(s.index)},
                                                    {"name", s.name}};
    p.used->Add(labels).Set(static_cast<double>(s.memory_used));
    p.total->Add(labels).Set(static_cast<double>(s.memory_total));
    p.busy->Add(labels).Set(s.utilization);
  }
  return p.last;
}

void gpu_monitor::set_workers(const std::multimap<std::string, std::string>& model_devices) {
  std::map<std::pair<std::string, std::string>, double> counts;
  for (const auto& [model, device] : model_devices) {
    if (device.rfind("cuda:", 0) == 0) {
      counts[{device.substr(5), model}] += 1.0;
    }
  }
  std::lock_guard lock{impl_->mutex};
  for (const auto& [key, n] : counts) {
    impl_->workers->Add({{"gpu", key.first}, {"model", key.second}}).Set(n);
  }
}

} // namespace arbiter
