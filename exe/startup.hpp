#pragma once

// Start-up shared by `arbiter serve` and `arbiter worker`: loading the configuration, and
// spawning the worker actors a configuration asks for (CPU workers, local model workers,
// remote-API clients) together with the specs they are registered under.

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <caf/fwd.hpp>

#include "actors/cluster.hpp"
#include "actors/local_model_actor.hpp"
#include "config/config.hpp"
#include "net/routes.hpp"

namespace arbiter::exe {

/// Bounds how long the actor system may take to stop once everything was drained and written.
/// CAF's middleman joins its I/O thread on stop, and a cluster peer stuck in its TLS handshake
/// (a port scanner, a frozen coordinator) keeps that thread busy until the peer gives up, so a
/// SIGTERM would hang. Declared after the actor system, so that it is destroyed first: its
/// destructor starts a watch that ends the process with `exit_code` after `limit`.
class stop_deadline {
public:
  explicit stop_deadline(std::chrono::seconds limit) : limit_(limit) {}
  stop_deadline(const stop_deadline&) = delete;
  stop_deadline& operator=(const stop_deadline&) = delete;
  ~stop_deadline();

  /// What the process exits with if the watch ends it (1 until set).
  void exit_code(int rc) noexcept {
    rc_ = rc;
  }

private:
  std::chrono::seconds limit_;
  int rc_ = 1;
};

std::optional<std::string> getenv_string(const std::string& name);

/// `host` as it goes in a URL: an IPv6 address in brackets (`[::1]`), anything else as it is.
std::string url_host(const std::string& host);

/// "SIGINT", "SIGTERM", "SIGHUP", or "signal N".
std::string signal_name(int signo);

/// `n`, or the number of cores when 0.
uint32_t or_cores(uint32_t n);

/// `n`, or when 0 a `1/divisor` share of the cores: at least 2 threads, at most all.
uint32_t or_share_of_cores(uint32_t n, uint32_t divisor);

/// The server's threads: `server.io_threads`, by default half the cores (at least 2), and
/// `scheduler.threads` (CAF's), by default the cores the I/O threads leave (at least 2). The
/// I/O threads parse and encode every item: on 16 cores with two scheduler shards, 8 of them
/// served verl's rule rewards 1.5x faster than 4 (bench/README.md, "verl's rule rewards").
struct server_threads {
  uint32_t io = 0;
  uint32_t caf = 0;
};
server_threads threads_of(const config::arbiter_config& cfg);

/// How many scheduler shards to run (`scheduler.shards`, or one per 8 cores when 0): at most
/// one per CPU worker, and one when the CPU rewards are off. Each scheduler actor runs on one
/// thread at a time; on many cores, cheap CPU rewards arrive faster than one can route them.
uint32_t scheduler_shards(const config::arbiter_config& cfg, uint32_t cpu_workers);

using config_overrides =
  std::function<void(config::arbiter_config&, std::vector<config::config_problem>&)>;

/// Applies a port flag (`--port`, `--cluster-port`, ...) to `out` when given; a value outside
/// 0..65535 is a problem naming the flag. Returns whether the flag was given and applied.
bool apply_port_flag(const std::optional<int>& value, const char* flag, uint16_t& out,
                     std::vector<config::config_problem>& problems);

/// What a configuration is read for: `serve` (and `check-config`) checks all of it;
/// `replay` uses the rewards alone, so the cross-field rules of the rest (a listening address's
/// keys, certificates) are not its concern.
enum class config_use { serve, replay };

/// The configuration `file` (or, when unset, the embedded default) with the environment and
/// `flags` over it, and every problem found in it: each value's own, then the cross-field
/// rules and the rewards' options on the result (so a variable may complete the file).
std::vector<config::config_problem> read_configuration(const std::optional<std::string>& file,
                                                       const config_overrides& flags,
                                                       config::arbiter_config& cfg,
                                                       config_use use = config_use::serve);

/// Loads the file (or $ARBITER_CONFIG, or the embedded default), then the environment, then
/// `flags`, and validates. Prints every problem to stderr and returns false when there is one.
bool load_configuration(const std::optional<std::string>& file, const config_overrides& flags,
                        config::arbiter_config& cfg, config_use use = config_use::serve);

/// Checks each configured reward's options as the ingress checks an item's extra_info, but
/// not a reward whose kind or options are `reported` (a field already found wrong).
void check_reward_options(const config::arbiter_config& cfg,
                          std::vector<config::config_problem>& problems,
                          const std::function<bool(const std::string&)>& reported);

/// Checks that a reward that names its `sources` names one for each model call its kind
/// makes (a judge's chat, an embedding's embed, ΔIG's generate and nli, or a source taking
/// the whole item): else every item would fail no_eligible_source. A reward naming a source
/// or model with a `reported` problem is left out: it may only seem to serve nothing.
void check_reward_sources(const config::arbiter_config& cfg,
                          std::vector<config::config_problem>& problems,
                          const std::function<bool(const std::string&)>& reported);

/// Spawns `n` CPU workers (source "cpu").
void spawn_cpu_workers(caf::actor_system& sys, const config::arbiter_config& cfg, uint32_t n,
                       std::vector<actors::spawned_source>& out);

/// Spawns a client actor for every `[[sources]]` entry (their HTTP runs on `ioc`).
void spawn_remote_sources(caf::actor_system& sys, boost::asio::io_context& ioc,
                          const config::arbiter_config& cfg,
                          std::vector<actors::spawned_source>& out);

/// Loads every `[[models]]` entry on its devices and spawns one worker per device. Returns
/// false, having logged which model and why, when one cannot be loaded.
bool start_local_models(caf::actor_system& sys, const config::arbiter_config& cfg,
                        actors::local_model_metrics& metrics,
                        std::vector<net::local_model_info>& loaded,
                        std::vector<actors::spawned_source>& out);

} // namespace arbiter::exe
