#pragma once

// The ingress's API keys (`server.api_keys`, `ARBITER_API_KEYS`, `server.api_key_file`):
// a request to a keyed route must send `Authorization: Bearer KEY` with one of them, which is
// what the OpenAI SDK, OpenRLHF's remote reward headers and the Python client send.

#include <array>
#include <string>
#include <string_view>
#include <vector>

namespace arbiter::net {

class api_keys {
public:
  /// No keys: every request is let through.
  api_keys() = default;
  explicit api_keys(const std::vector<std::string>& keys);

  /// Whether any key is configured.
  bool required() const noexcept {
    return !digests_.empty();
  }

  /// Whether `authorization` (the header's value, empty when absent) is `Bearer KEY` for one
  /// of the keys. The keys are compared as SHA-256 digests with `CRYPTO_memcmp`, every one of
  /// them, so the time taken says nothing of how much of a key was right or which one matched.
  bool accepts(std::string_view authorization) const;

private:
  std::vector<std::array<unsigned char, 32>> digests_;
};

} // namespace arbiter::net
