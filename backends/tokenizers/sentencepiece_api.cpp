#include "backends/tokenizers/sentencepiece_api.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <stdexcept>

namespace arbiter::backends::tokenizers {

namespace {

// The sanitizer runtimes end a process that dlopens with RTLD_DEEPBIND (google/sanitizers#611:
// a deep-bound library would bypass their malloc and pthread interceptors), so the sanitizer
// builds (docs/testing.md) open libsentencepiece without it. Its protobuf symbols may then
// bind to the copy libtorch exports; the DeBERTa tokenizer tests beside libtorch pass that way
// under ASan, but the shipped build keeps the isolation.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr int deep_bind = 0;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr int deep_bind = 0;
#else
constexpr int deep_bind = RTLD_DEEPBIND;
#endif
#else
constexpr int deep_bind = RTLD_DEEPBIND;
#endif

std::string dl_error() {
  const char* e = dlerror();
  return e != nullptr ? e : "unknown error";
}

std::vector<std::string> shim_candidates() {
  std::vector<std::string> out;
  if (const char* env = std::getenv("ARBITER_SENTENCEPIECE_SHIM"); env != nullptr && *env) {
    out.emplace_back(env);
  }
  out.emplace_back(ARBITER_SENTENCEPIECE_SHIM);
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    out.push_back((exe.parent_path() / "libarbiter_sentencepiece.so").string());
  }
  return out;
}

const sentencepiece_api* open_api() {
  // Its own protobuf first (RTLD_DEEPBIND, but see `deep_bind`), kept out of the global scope
  // (RTLD_LOCAL). The shim's dependency on it then finds this already-opened copy.
  if (dlopen(ARBITER_SENTENCEPIECE_LIBRARY, RTLD_NOW | RTLD_LOCAL | deep_bind) == nullptr) {
    throw std::runtime_error("cannot open libsentencepiece (" ARBITER_SENTENCEPIECE_LIBRARY
                             "): " + dl_error());
  }
  std::string tried;
  for (const auto& path : shim_candidates()) {
    if (!std::filesystem::exists(path)) {
      tried += (tried.empty() ? "" : ", ") + path;
      continue;
    }
    void* shim = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (shim == nullptr) {
      throw std::runtime_error("cannot open " + path + ": " + dl_error());
    }
    auto* get = reinterpret_cast<const sentencepiece_api* (*)()>(
      dlsym(shim, sentencepiece_api_symbol));
    if (get == nullptr) {
      throw std::runtime_error(path + " has no " + sentencepiece_api_symbol);
    }
    const sentencepiece_api* api = get();
    if (api->version != sentencepiece_api_version) {
      throw std::runtime_error(path + " is another version of the sentencepiece shim");
    }
    return api;
  }
  throw std::runtime_error("the sentencepiece shim libarbiter_sentencepiece.so is not built "
                           "(looked at " + tried + "; set ARBITER_SENTENCEPIECE_SHIM)");
}

} // namespace

const sentencepiece_api& load_sentencepiece_api() {
  static std::once_flag once;
  static const sentencepiece_api* api = nullptr;
  static std::string failure;
  std::call_once(once, [] {
    try {
      api = open_api();
    } catch (const std::exception& e) {
      failure = e.what();
    }
  });
  if (api == nullptr) {
    throw std::runtime_error(failure);
  }
  return *api;
}

} // namespace arbiter::backends::tokenizers
