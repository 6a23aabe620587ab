#include "backends/tokenizers/sentencepiece_api.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <stdexcept>

namespace arbiter::backends::tokenizers {

namespace {

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
  // Its own protobuf first (RTLD_DEEPBIND), kept out of the global scope (RTLD_LOCAL). The
  // shim's dependency on it then finds this already-opened copy.
  if (dlopen(ARBITER_SENTENCEPIECE_LIBRARY, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND) == nullptr) {
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
