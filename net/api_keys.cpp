#include "net/api_keys.hpp"

#include <openssl/crypto.h>
#include <openssl/sha.h>

namespace arbiter::net {
namespace {

std::array<unsigned char, 32> digest_of(std::string_view text) {
  std::array<unsigned char, 32> out{};
  SHA256(reinterpret_cast<const unsigned char*>(text.data()), text.size(), out.data());
  return out;
}

bool iequals_ascii(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) {
    return false;
  }
  for (size_t i = 0; i < a.size(); ++i) {
    const auto lower = [](char ch) {
      return ch >= 'A' && ch <= 'Z' ? static_cast<char>(ch - 'A' + 'a') : ch;
    };
    if (lower(a[i]) != lower(b[i])) {
      return false;
    }
  }
  return true;
}

} // namespace

api_keys::api_keys(const std::vector<std::string>& keys) {
  digests_.reserve(keys.size());
  for (const auto& key : keys) {
    digests_.push_back(digest_of(key));
  }
}

bool api_keys::accepts(std::string_view authorization) const {
  if (digests_.empty()) {
    return true;
  }
  // RFC 6750: "Bearer" (any case), one or more spaces, the token.
  constexpr std::string_view scheme = "bearer";
  if (authorization.size() <= scheme.size()
      || !iequals_ascii(authorization.substr(0, scheme.size()), scheme)
      || authorization[scheme.size()] != ' ') {
    return false;
  }
  std::string_view token = authorization.substr(scheme.size());
  while (!token.empty() && token.front() == ' ') {
    token.remove_prefix(1);
  }
  while (!token.empty() && (token.back() == ' ' || token.back() == '\t')) {
    token.remove_suffix(1);
  }
  const auto given = digest_of(token);
  int matched = 0;
  for (const auto& digest : digests_) {
    matched |= static_cast<int>(CRYPTO_memcmp(given.data(), digest.data(), digest.size()) == 0);
  }
  return matched != 0 && !token.empty();
}

} // namespace arbiter::net
