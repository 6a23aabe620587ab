// What spans fields or is built in code: bounds again (for configurations changed after
// loading), priority classes, rewards and data sources, sources and models, keys and
// certificates. Also the helpers the server reads keys with.
#include "common/capability.hpp"
#include "config/config.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>
#include <string_view>
#include <utility>

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backends/rewards/reward_kinds.hpp"
#include "config/config_fields.hpp"

namespace arbiter::config {

using namespace detail;

std::vector<double> class_weights(const std::vector<priority_class>& classes) {
  std::vector<double> out(classes.size(), 1.0);
  double by_rank = 1.0;
  for (size_t i = classes.size(); i-- > 0;) {
    out[i] = classes[i].weight > 0.0 ? classes[i].weight : by_rank;
    by_rank *= 4.0;
  }
  return out;
}

bool is_loopback_host(const std::string& host) {
  // An address, not a name that starts like one: "127.corp.example.com" resolves to whatever
  // its DNS says, and passed for loopback (no API key, no cluster TLS asked for).
  in_addr v4{};
  return host == "localhost" || host == "::1"
         || (inet_pton(AF_INET, host.c_str(), &v4) == 1
             && (ntohl(v4.s_addr) >> 24) == 127);
}

bool has_http_scheme(std::string_view url) {
  auto starts = [url](std::string_view scheme) {
    return url.size() >= scheme.size()
           && std::equal(scheme.begin(), scheme.end(), url.begin(), [](char a, char b) {
                return a == std::tolower(static_cast<unsigned char>(b));
              });
  };
  return starts("http://") || starts("https://");
}

std::string http_scheme_problem(std::string_view url) {
  std::string problem = "must start with http:// or https://";
  if (url.find_first_of("@?") == std::string_view::npos) {
    return problem + " (got " + detail::quoted(url) + ")"; // no user info, no query: no key
  }
  auto end = url.find("://");
  // A scheme is a letter and then letters, digits, '+', '-' or '.' (RFC 3986 §3.1): anything
  // else before "://" ("admin:s3cret@vllm/?next=http://x") may be a credential.
  auto scheme = end == std::string_view::npos ? std::string_view{} : url.substr(0, end);
  const bool named = !scheme.empty() && scheme.size() <= 16
                     && std::isalpha(static_cast<unsigned char>(scheme.front()))
                     && std::all_of(scheme.begin(), scheme.end(), [](char c) {
                          return std::isalnum(static_cast<unsigned char>(c)) || c == '+'
                                 || c == '-' || c == '.';
                        });
  if (!named) {
    return problem + " (it has no scheme)";
  }
  return problem + " (its scheme is " + detail::quoted(scheme) + ")";
}

bool is_valid_api_key(const std::string& key) {
  return !key.empty() && std::all_of(key.begin(), key.end(), [](char ch) {
    return ch > ' ' && ch < 0x7f && ch != ',';
  });
}

std::vector<std::string> split_api_keys(const std::string& keys) {
  std::vector<std::string> out;
  size_t begin = 0;
  while (begin <= keys.size()) {
    // Commas and line breaks part keys: a Secret file may hold one key a line, and one made
    // with --from-file ends in a line break.
    size_t end = keys.find_first_of(",\n", begin);
    if (end == std::string::npos) {
      end = keys.size();
    }
    std::string key = keys.substr(begin, end - begin);
    const auto first = key.find_first_not_of(" \t\r\n");
    const auto last = key.find_last_not_of(" \t\r\n");
    if (first != std::string::npos) {
      out.push_back(key.substr(first, last - first + 1));
    }
    begin = end + 1;
  }
  return out;
}

bool read_api_key_file(const std::string& path, std::vector<std::string>& keys,
                       std::string& error) {
  std::ifstream in{path};
  if (!in) {
    error = "cannot read " + detail::quoted(path) + ": " + std::strerror(errno);
    return false;
  }
  std::string line;
  size_t line_number = 0;
  size_t found = 0;
  while (std::getline(in, line)) {
    ++line_number;
    const auto first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#') {
      continue;
    }
    const auto last = line.find_last_not_of(" \t\r");
    std::string key = line.substr(first, last - first + 1);
    if (!is_valid_api_key(key)) {
      error = detail::quoted(path) + " line " + std::to_string(line_number) +
              ": a key is one token of visible ASCII with no comma";
      return false;
    }
    keys.push_back(std::move(key));
    ++found;
  }
  if (found == 0) {
    error = detail::quoted(path) + " holds no key";
    return false;
  }
  return true;
}

namespace {

bool is_class_name_char(char ch) {
  return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_' || ch == '-';
}

/// What a remote source of `kind` can serve (remote::supports): empty for an unknown kind.
std::vector<std::string> kind_serves(const std::string& kind) {
  if (kind == "openai") {
    return {"chat", "generate", "embed"};
  }
  if (kind == "tei") {
    return {"embed", "nli"};
  }
  if (kind == "ig_service") {
    return {"ig"};
  }
  return {};
}

bool is_reward_name_char(char ch) {
  return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
         ch == '_' || ch == '.' || ch == '-';
}

bool is_builtin_kind(const std::string& kind) {
  return backends::find_reward_kind(kind) != nullptr;
}

size_t problems_about(std::string_view prefix, const std::vector<config_problem>& problems) {
  return static_cast<size_t>(
    std::count_if(problems.begin(), problems.end(), [prefix](const config_problem& p) {
      return p.field.compare(0, prefix.size(), prefix) == 0;
    }));
}

/// "2021-01-01 00:00:00 UTC" for an ASN.1 time.
std::string time_text(const ASN1_TIME* t) {
  std::tm tm{};
  if (ASN1_TIME_to_tm(t, &tm) != 1) {
    return "an unreadable date";
  }
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

/// The cluster's certificate and key, as the TLS layer will load them at the first
/// connection (where a mistake aborts the process, or fails every handshake): each must be
/// PEM, the key must be the certificate's, and the certificate must be valid now.
void check_certificate_and_key(const std::string& certificate, const std::string& key,
                               std::vector<config_problem>& problems) {
  std::unique_ptr<BIO, decltype(&BIO_free)> cert_file{BIO_new_file(certificate.c_str(), "r"),
                                                      &BIO_free};
  std::unique_ptr<X509, decltype(&X509_free)> cert{
    cert_file ? PEM_read_bio_X509(cert_file.get(), nullptr, nullptr, nullptr) : nullptr,
    &X509_free};
  if (!cert) {
    problems.push_back({"cluster.certificate",
                        "not a PEM certificate: " + detail::quoted(certificate)});
  }
  std::unique_ptr<BIO, decltype(&BIO_free)> key_file{BIO_new_file(key.c_str(), "r"), &BIO_free};
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> pkey{
    key_file ? PEM_read_bio_PrivateKey(key_file.get(), nullptr, nullptr, nullptr) : nullptr,
    &EVP_PKEY_free};
  if (!pkey) {
    problems.push_back({"cluster.key", "not a PEM private key (or one with a passphrase): "
                                         + detail::quoted(key)});
  }
  if (!cert || !pkey) {
    return;
  }
  if (X509_check_private_key(cert.get(), pkey.get()) != 1) {
    problems.push_back({"cluster.key", "does not match cluster.certificate ("
                                         + detail::quoted(key) + " is another certificate's key)"});
  }
  if (X509_cmp_current_time(X509_get0_notAfter(cert.get())) <= 0) {
    problems.push_back({"cluster.certificate",
                        "expired on " + time_text(X509_get0_notAfter(cert.get()))
                          + ": every handshake would fail"});
  } else if (X509_cmp_current_time(X509_get0_notBefore(cert.get())) >= 0) {
    problems.push_back({"cluster.certificate",
                        "not valid before " + time_text(X509_get0_notBefore(cert.get()))
                          + ": every handshake would fail until then"});
  }
}

/// Why the server could not append to `path` (creating it when missing), or "" when it could:
/// checked without creating or opening the file, so `check-config` changes nothing.
std::string why_not_appendable(const std::string& path) {
  struct stat st{};
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) {
      return "is a folder";
    }
    return ::access(path.c_str(), W_OK) == 0 ? "" : std::strerror(errno);
  }
  if (errno != ENOENT) {
    return std::strerror(errno);
  }
  const auto slash = path.rfind('/');
  const std::string folder = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  if (::stat(folder.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return "its folder " + detail::quoted(folder) + " does not exist";
  }
  if (::access(folder.c_str(), W_OK | X_OK) != 0) {
    return "cannot create it in " + detail::quoted(folder) + ": " + std::strerror(errno);
  }
  return "";
}

} // namespace

void validate(const arbiter_config& cfg, std::vector<config_problem>& problems) {
  // Field-level bounds, for configurations built in code or changed after loading.
  for (const auto& field : scalar_fields()) {
    const std::string where(field.path);
    if (field.type == field_type::number || field.type == field_type::boolean) {
      const double value = field.get_num(cfg);
      if (!(value >= field.min_num && value <= field.max_num)) {
        problems.push_back({where, "out of range (got " + std::to_string(value) + ")"});
      }
    } else if (field.type == field_type::integer) {
      const int64_t value = field.get_int(cfg);
      if (value < field.min || value > field.max) {
        problems.push_back({where, range_reason(field.min, field.max, std::to_string(value))});
      }
    } else if (static_cast<int64_t>(field.get_str(cfg).size()) < field.min) {
      problems.push_back({where, "must not be empty"});
    }
  }

  const auto& sched = cfg.scheduler;
  if (sched.policy != "sharing" && sched.policy != "stealing") {
    problems.push_back({"scheduler.policy", "must be \"sharing\" or \"stealing\" (got " +
                                                detail::quoted(sched.policy) + ")"});
  }
  if (sched.default_deadline > sched.max_deadline) {
    problems.push_back({"scheduler.default_deadline_ms",
                        "must not exceed scheduler.max_deadline_ms (" +
                            std::to_string(sched.default_deadline.count()) + " > " +
                            std::to_string(sched.max_deadline.count()) + ")"});
  }

  // Routing.
  if (cfg.routing.breaker_max_ejection < cfg.routing.breaker_ejection) {
    // The first ejection would already pass the cap the operator set.
    problems.push_back({"routing.breaker_max_ejection_ms",
                        "must be at least routing.breaker_ejection_ms ("
                          + std::to_string(cfg.routing.breaker_max_ejection.count()) + " < "
                          + std::to_string(cfg.routing.breaker_ejection.count()) + ")"});
  }

  // The cluster.
  const auto& cl = cfg.cluster;
  if (cl.timeout <= cl.heartbeat) {
    problems.push_back({"cluster.timeout_ms", "must exceed cluster.heartbeat_ms (" +
                                                std::to_string(cl.timeout.count()) + " <= " +
                                                std::to_string(cl.heartbeat.count()) + ")"});
  }
  const bool any_tls = !cl.certificate.empty() || !cl.key.empty() || !cl.ca.empty();
  for (const auto& [field, path] : {std::pair{"cluster.certificate", &cl.certificate},
                                    std::pair{"cluster.key", &cl.key},
                                    std::pair{"cluster.ca", &cl.ca}}) {
    if (any_tls && path->empty()) {
      problems.push_back({field, "required with the other TLS settings (certificate, key and "
                                 "ca go together)"});
    } else if (!path->empty() && !std::ifstream{*path}.good()) {
      problems.push_back({field, "cannot read " + detail::quoted(*path)});
    }
  }
  if (any_tls && problems_about("cluster.", problems) == 0) {
    check_certificate_and_key(cl.certificate, cl.key, problems);
  }
  if (cl.enabled && !any_tls && !is_loopback_host(cl.host)) {
    problems.push_back({"cluster.certificate",
                        "required when cluster.host is not a loopback address (got " +
                            detail::quoted(cl.host) +
                            "): without certificates anyone who reaches the port could join"});
  }

  // The replay log: the server refuses to start when it cannot append to it.
  if (!cfg.replay.path.empty()) {
    if (auto why = why_not_appendable(cfg.replay.path); !why.empty()) {
      problems.push_back({"replay.path", "cannot append to " + detail::quoted(cfg.replay.path)
                                           + ": " + why});
    }
  }

  // The ingress's keys.
  const auto& server = cfg.server;
  for (const auto& key : split_api_keys(server.api_keys)) {
    if (!is_valid_api_key(key)) {
      problems.push_back({"server.api_keys",
                          "a key is one token of visible ASCII (no spaces or commas)"});
      break;
    }
  }
  if (!server.api_key_file.empty()) {
    std::vector<std::string> from_file;
    std::string error;
    if (!read_api_key_file(server.api_key_file, from_file, error)) {
      problems.push_back({"server.api_key_file", error});
    }
  }
  const bool keyed = !split_api_keys(server.api_keys).empty() || !server.api_key_file.empty();
  if (!keyed && !server.allow_unauthenticated && !is_loopback_host(server.host)) {
    problems.push_back({"server.api_keys",
                        "required when server.host is not a loopback address (got " +
                            detail::quoted(server.host) +
                            "): without keys anyone who reaches the port spends the provider "
                            "keys; set server.api_keys, ARBITER_API_KEYS or server.api_key_file, "
                            "or server.allow_unauthenticated = true"});
  }

  // Priority classes.
  std::vector<std::string> class_names;
  if (sched.priorities.empty()) {
    problems.push_back({"scheduler.priorities", "at least one priority class is required"});
  }
  for (size_t i = 0; i < sched.priorities.size(); ++i) {
    const auto& cls = sched.priorities[i];
    const std::string where = "scheduler.priorities[" + std::to_string(i) + "]";
    if (cls.name.empty()) {
      problems.push_back({where + ".name", "must not be empty"});
    } else if (!std::all_of(cls.name.begin(), cls.name.end(), is_class_name_char)) {
      problems.push_back(
          {where + ".name", "must match [a-z0-9_-]+ (got " + detail::quoted(cls.name) + ")"});
    } else {
      const auto earlier = std::find(class_names.begin(), class_names.end(), cls.name);
      if (earlier != class_names.end()) {
        problems.push_back(
            {where + ".name", "duplicate class name " + detail::quoted(cls.name) +
                                  " (also scheduler.priorities[" +
                                  std::to_string(earlier - class_names.begin()) + "])"});
      }
    }
    class_names.push_back(cls.name);
    if (cls.capacity < 1) {
      problems.push_back({where + ".capacity", range_reason(1, max_u32, "0")});
    }
    if (cls.order != queue_order::fifo && cls.order != queue_order::edf) {
      problems.push_back({where + ".order", "must be \"fifo\" or \"edf\""});
    }
  }
  if (!sched.priorities.empty() &&
      std::find(class_names.begin(), class_names.end(), sched.default_priority) ==
          class_names.end()) {
    std::vector<std::string> listed;
    for (const auto& name : class_names) {
      if (!name.empty()) {
        listed.push_back(detail::quoted(name));
      }
    }
    problems.push_back({"scheduler.default_priority",
                        detail::quoted(sched.default_priority) +
                            " is not one of the priority classes (" + join(listed) + ")"});
  }

  // Rewards.
  for (const auto& [name, reward] : cfg.rewards) {
    const std::string where = "rewards." + key_name(name);
    if (name.empty() || !std::all_of(name.begin(), name.end(), is_reward_name_char)) {
      problems.push_back(
          {where, "reward name must match [A-Za-z0-9_.-]+ (got " + detail::quoted(name) + ")"});
    }
    if (!is_builtin_kind(reward.kind)) {
      problems.push_back({where + ".kind", "unknown kind " + detail::quoted(reward.kind) +
                                               "; expected one of " +
                                               join(backends::reward_kind_names())});
    }
    static const std::vector<std::string> fallbacks = backends::fallback_names();
    if (reward.fallback
        && std::find(fallbacks.begin(), fallbacks.end(), *reward.fallback) == fallbacks.end()) {
      problems.push_back({where + ".fallback", "unknown fallback " + detail::quoted(*reward.fallback)
                                                 + "; expected one of " + join(fallbacks)});
    }
    for (size_t i = 0; i < reward.sources.size(); ++i) {
      const auto& wanted = reward.sources[i];
      bool known = std::any_of(cfg.sources.begin(), cfg.sources.end(),
                               [&wanted](const source_config& s) { return s.name == wanted; })
                   || std::any_of(cfg.models.begin(), cfg.models.end(),
                                  [&wanted](const model_config& m) { return m.name == wanted; });
      if (!known) {
        problems.push_back({where + ".sources[" + std::to_string(i) + "]",
                            "no source is named " + detail::quoted(wanted)});
      }
    }
  }

  // Remote sources.
  std::vector<std::string> source_names;
  for (size_t i = 0; i < cfg.sources.size(); ++i) {
    const auto& src = cfg.sources[i];
    const std::string where = "sources[" + std::to_string(i) + "]";
    if (src.name.empty()) {
      problems.push_back({where + ".name", "missing required field"});
    } else if (std::find(source_names.begin(), source_names.end(), src.name)
               != source_names.end()) {
      problems.push_back({where + ".name", "duplicate source name " + detail::quoted(src.name)});
    } else if (!std::all_of(src.name.begin(), src.name.end(), is_reward_name_char)) {
      // As a model's: the name is a metric label, an environment variable's part, a model id.
      problems.push_back({where + ".name", "must be letters, digits, '_', '.' or '-' (got "
                                             + detail::quoted(src.name) + ")"});
    } else if (src.name == "cpu" || src.name == "cache" || src.name == "reward-graph") {
      problems.push_back({where + ".name", detail::quoted(src.name) + " is reserved"});
    } else if (auto twin = std::find_if(
                 source_names.begin(), source_names.end(),
                 [&](const std::string& o) { return env_token(o) == env_token(src.name); });
               twin != source_names.end()) {
      // ARBITER_SOURCES_A_B_... would set both.
      problems.push_back({where + ".name",
                          detail::quoted(src.name) + " and " + detail::quoted(*twin)
                            + " name the same environment variables (ARBITER_SOURCES_"
                            + env_token(src.name) + "_...); rename one"});
    }
    source_names.push_back(src.name);
    static const std::vector<std::string> kinds = {"openai", "tei", "ig_service"};
    if (std::find(kinds.begin(), kinds.end(), src.kind) == kinds.end()) {
      problems.push_back({where + ".kind", "unknown kind " + detail::quoted(src.kind)
                                             + "; expected one of " + join(kinds)});
    }
    if (!has_http_scheme(src.url)) {
      problems.push_back({where + ".url", http_scheme_problem(src.url)});
    }
    static const std::vector<std::string> capabilities = [] {
      std::vector<std::string> names;
      for (auto c : remote_capabilities) {
        names.emplace_back(name_of(c));
      }
      return names;
    }();
    for (size_t c = 0; c < src.capabilities.size(); ++c) {
      if (std::find(capabilities.begin(), capabilities.end(), src.capabilities[c])
          == capabilities.end()) {
        problems.push_back({where + ".capabilities[" + std::to_string(c) + "]",
                            "unknown capability " + detail::quoted(src.capabilities[c])
                              + "; expected one of " + join(capabilities)});
      } else if (auto served = kind_serves(src.kind);
                 !served.empty()
                 && std::find(served.begin(), served.end(), src.capabilities[c])
                      == served.end()) {
        // Its calls would fail every item routed there (the scheduler takes the source at its
        // word), and not as a fault that sends them elsewhere.
        problems.push_back({where + ".capabilities[" + std::to_string(c) + "]",
                            "a source of kind " + src.kind + " cannot serve "
                              + detail::quoted(src.capabilities[c]) + "; it serves "
                              + join(served)});
      }
    }
    if (src.initial_concurrency > src.max_concurrency) {
      problems.push_back({where + ".initial_concurrency",
                          "must not exceed max_concurrency ("
                            + std::to_string(src.initial_concurrency) + " > "
                            + std::to_string(src.max_concurrency) + ")"});
    }
  }

  // Models.
  for (size_t i = 0; i < cfg.models.size(); ++i) {
    const auto& m = cfg.models[i];
    const std::string where = "models[" + std::to_string(i) + "]";
    bool taken = std::any_of(cfg.sources.begin(), cfg.sources.end(),
                             [&](const source_config& s) { return s.name == m.name; })
                 || std::any_of(cfg.models.begin(), cfg.models.begin() + static_cast<long>(i),
                                [&](const model_config& o) { return o.name == m.name; });
    if (m.name.empty() || !std::all_of(m.name.begin(), m.name.end(), is_reward_name_char)) {
      problems.push_back({where + ".name", "must be letters, digits, '_', '.' or '-' (got "
                                             + detail::quoted(m.name) + ")"});
    } else if (taken) {
      problems.push_back({where + ".name", "duplicate source name " + detail::quoted(m.name)});
    } else if (m.name == "cpu" || m.name == "cache" || m.name == "reward-graph") {
      problems.push_back({where + ".name", detail::quoted(m.name) + " is reserved"});
    }
    if (m.kind != "embedding" && m.kind != "generator" && m.kind != "nli") {
      problems.push_back({where + ".kind",
                          "unknown kind " + detail::quoted(m.kind)
                            + "; expected \"embedding\", \"generator\" or \"nli\""});
    }
    if (m.path.empty()) {
      problems.push_back({where + ".path", "must not be empty"});
    }
    bool device_ok = m.device == "cpu" || m.device == "cuda"
                     || (m.device.rfind("cuda:", 0) == 0 && m.device.size() > 5
                         && std::all_of(m.device.begin() + 5, m.device.end(),
                                        [](char c) { return c >= '0' && c <= '9'; }));
    if (!device_ok) {
      problems.push_back({where + ".device", "must be \"cpu\", \"cuda\" or \"cuda:N\" (got "
                                               + detail::quoted(m.device) + ")"});
    }
    static const std::vector<std::string> dtypes = {"auto", "f32", "f16", "bf16"};
    if (std::find(dtypes.begin(), dtypes.end(), m.dtype) == dtypes.end()) {
      problems.push_back({where + ".dtype", "unknown dtype " + detail::quoted(m.dtype) + "; expected one of "
                                              + join(dtypes)});
    }
  }

  // Protocols.
  if (cfg.protocols.on_failure != "error" && cfg.protocols.on_failure != "score") {
    problems.push_back({"protocols.on_failure", "must be \"error\" or \"score\" (got "
                                                  + detail::quoted(cfg.protocols.on_failure) + ")"});
  }
  if (!cfg.protocols.reward.empty() && !is_builtin_kind(cfg.protocols.reward)
      && cfg.rewards.count(cfg.protocols.reward) == 0) {
    problems.push_back({"protocols.reward", detail::quoted(cfg.protocols.reward)
                                              + " is neither a configured reward nor a "
                                                "built-in kind ("
                                              + join(backends::reward_kind_names()) + ")"});
  }

  // Data sources.
  for (const auto& [prefix, reward] : cfg.data_sources) {
    if (prefix.empty()) {
      problems.push_back({"data_sources", "a name must not be empty (\"*\" matches every name)"});
    }
    if (!is_builtin_kind(reward) && cfg.rewards.count(reward) == 0) {
      problems.push_back({"data_sources." + prefix,
                          detail::quoted(reward) +
                              " is neither a configured reward nor a built-in kind (" +
                              join(backends::reward_kind_names()) + ")"});
    }
  }
}

std::string describe(const std::vector<config_problem>& problems) {
  std::string out;
  for (const auto& problem : problems) {
    out += problem.field;
    out += ": ";
    out += problem.reason;
    out += '\n';
  }
  return out;
}

} // namespace arbiter::config
