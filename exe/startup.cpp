#include "exe/startup.hpp"

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <thread>

#include <caf/actor_system.hpp>
#include <nlohmann/json.hpp>

#include "actors/cpu_worker_actor.hpp"
#include "actors/remote_source_actor.hpp"
#include "actors/source_capabilities.hpp"
#include "backends/http_client.hpp"
#include "backends/models/devices.hpp"
#include "backends/models/text_classifier.hpp"
#include "backends/models/text_embedder.hpp"
#include "backends/models/text_generator.hpp"
#include "backends/rewards/reward_kinds.hpp"
#include "backends/rewards/reward_options.hpp"
#include "common/log.hpp"
#include "config/config_fields.hpp"

namespace arbiter::exe {

std::optional<std::string> getenv_string(const std::string& name) {
  if (const char* v = std::getenv(name.c_str())) {
    return std::string{v};
  }
  return std::nullopt;
}

/// The ARBITER_* variable that set `field` ("server.port", "sources[2].url"), when it is
/// set and not empty; nullopt for a field no variable set.
std::optional<std::string> setting_variable(const config::arbiter_config& cfg,
                                            const std::string& field) {
  std::string variable;
  auto element = [&](const char* list, const char* prefix, auto const& elements) {
    const std::string head = std::string{list} + "[";
    if (field.rfind(head, 0) != 0) {
      return false;
    }
    auto close = field.find("].", head.size());
    if (close == std::string::npos || field.find_first_of(".[", close + 2) != std::string::npos) {
      return true;  // a list field's member (capabilities[1]): no variable sets it
    }
    auto index = std::strtoul(field.c_str() + head.size(), nullptr, 10);
    if (index < elements.size()) {
      variable = std::string{prefix} + "_" + config::detail::env_token(elements[index].name) + "_"
                 + config::detail::env_token(field.substr(close + 2));
    }
    return true;
  };
  if (!element("sources", "ARBITER_SOURCES", cfg.sources)
      && !element("models", "ARBITER_MODELS", cfg.models)
      && !element("scheduler.priorities", "ARBITER_SCHEDULER_PRIORITIES", cfg.scheduler.priorities)
      && field.find('[') == std::string::npos && field.rfind("rewards", 0) != 0
      && field.rfind("data_sources", 0) != 0) {
    variable = config::detail::env_name(field);
  }
  auto value = variable.empty() ? std::nullopt : getenv_string(variable);
  if (value && !value->empty()) {
    return variable;
  }
  // A source the judge's, embedder's or IG service's URL variable made (LLM_JUDGE_SERVER_URL):
  // the operator's file has no sources[i] of it.
  const std::string head = "sources[";
  if (field.rfind(head, 0) == 0 && field.size() > 5
      && field.compare(field.size() - 5, 5, "].url") == 0) {
    auto index = std::strtoul(field.c_str() + head.size(), nullptr, 10);
    if (index < cfg.sources.size()) {
      const auto& src = cfg.sources[index];
      if (const char* shorthand = config::shorthand_url_variable(src.name)) {
        if (auto url = getenv_string(shorthand); url && *url == src.url) {
          return std::string{shorthand};
        }
      }
    }
  }
  return std::nullopt;
}

std::string url_host(const std::string& host) {
  if (host.find(':') != std::string::npos && host.front() != '[') {
    return "[" + host + "]";
  }
  return host;
}

std::string signal_name(int signo) {
  switch (signo) {
  case SIGINT:
    return "SIGINT";
  case SIGTERM:
    return "SIGTERM";
  case SIGHUP:
    return "SIGHUP";
  default:
    return "signal " + std::to_string(signo);
  }
}

uint32_t or_cores(uint32_t n) {
  if (n > 0) {
    return n;
  }
  auto cores = std::thread::hardware_concurrency();
  return cores == 0 ? 2 : cores;
}

uint32_t or_share_of_cores(uint32_t n, uint32_t divisor) {
  if (n > 0) {
    return n;
  }
  const uint32_t cores = or_cores(0);
  return std::min(cores, std::max(2u, cores / std::max(divisor, 1u)));
}

server_threads threads_of(const config::arbiter_config& cfg) {
  server_threads t;
  t.io = or_share_of_cores(cfg.server.io_threads, 2);
  const uint32_t cores = or_cores(0);
  t.caf = cfg.scheduler.threads > 0 ? cfg.scheduler.threads
                                    : std::max(2u, cores > t.io ? cores - t.io : 0u);
  return t;
}

uint32_t scheduler_shards(const config::arbiter_config& cfg, uint32_t cpu_workers) {
  if (!cfg.cpu.enabled || cpu_workers < 2) {
    return 1;
  }
  const uint32_t wanted = cfg.scheduler.shards > 0 ? cfg.scheduler.shards
                                                   : std::max(1u, or_cores(0) / 8);
  return std::min(wanted, cpu_workers);
}

void check_reward_options(const config::arbiter_config& cfg,
                          std::vector<config::config_problem>& problems,
                          const std::function<bool(const std::string&)>& reported) {
  for (const auto& [name, reward] : cfg.rewards) {
    const auto where = "rewards." + name;
    if (reward.options.empty() || reported(where + ".kind") || reported(where + ".options")) {
      continue;
    }
    auto options = backends::merged_options(reward.options, "");
    if (auto problem = backends::check_options(reward.kind, options)) {
      problems.push_back({where + ".options." + problem->key, problem->reason});
    }
    // A misspelt key would keep its default without a word (an item's extra_info may carry
    // anything; a configured table names options only).
    if (backends::find_reward_kind(reward.kind) == nullptr) {
      continue;  // named as an unknown kind by the configuration's own check
    }
    const auto& known = backends::option_keys(reward.kind);
    for (auto it = options.begin(); it != options.end(); ++it) {
      if (std::find(known.begin(), known.end(), it.key()) != known.end()) {
        continue;
      }
      std::string reason = "unknown option for a " + reward.kind + " reward";
      if (known.empty()) {
        reason += " (it takes none)";
      } else {
        reason += " (known: ";
        for (size_t k = 0; k < known.size(); ++k) {
          reason += (k > 0 ? ", " : "") + known[k];
        }
        reason += ")";
      }
      problems.push_back({where + ".options." + it.key(), reason});
    }
  }
}

void check_reward_sources(const config::arbiter_config& cfg,
                          std::vector<config::config_problem>& problems,
                          const std::function<bool(const std::string&)>& reported) {
  // A source or model whose own table is wrong (a misspelt kind) may seem to serve nothing.
  auto faulty = [&](const std::string& name) {
    for (size_t i = 0; i < cfg.sources.size(); ++i) {
      if (cfg.sources[i].name == name && reported("sources[" + std::to_string(i) + "]")) {
        return true;
      }
    }
    for (size_t i = 0; i < cfg.models.size(); ++i) {
      if (cfg.models[i].name == name && reported("models[" + std::to_string(i) + "]")) {
        return true;
      }
    }
    return false;
  };
  // Whether the source or model called `name` serves `c`.
  auto serves = [&cfg](const std::string& name, capability c) {
    for (const auto& src : cfg.sources) {
      if (src.name == name) {
        return actors::serves(src, c);
      }
    }
    for (const auto& m : cfg.models) {
      if (m.name == name) {
        auto caps = actors::model_capabilities(m);
        return std::find(caps.begin(), caps.end(), c) != caps.end();
      }
    }
    return false;  // named as unknown by the configuration's own check
  };
  for (const auto& entry : cfg.rewards) {
    // Not a structured binding: a lambda below uses it (clang before 16 refuses that).
    const auto& name = entry.first;
    const auto& reward = entry.second;
    const auto* kind = backends::find_reward_kind(reward.kind);
    if (reward.sources.empty() || kind == nullptr || kind->needs == capability::cpu
        || kind->needs == capability::em_ig) {
      continue;  // em_info_gain's call is its nested info_gain reward's, checked there
    }
    if (reported("rewards." + name + ".sources")
        || std::any_of(reward.sources.begin(), reward.sources.end(), faulty)) {
      continue;
    }
    auto any_serves = [&](capability c) {
      return std::any_of(reward.sources.begin(), reward.sources.end(),
                         [&](const std::string& s) { return serves(s, c); });
    };
    if (any_serves(kind->needs)) {
      continue;  // a source that takes the whole item (an IG service for info_gain)
    }
    // Otherwise its model calls go to these sources only: each call's capability needs one.
    std::string missing;
    for (auto c : kind->calls.empty() ? std::vector<capability>{kind->needs} : kind->calls) {
      if (!any_serves(c)) {
        missing += (missing.empty() ? "" : ", ") + std::string{name_of(c)};
      }
    }
    if (!missing.empty()) {
      // Every item would fail no_eligible_source at its first call.
      problems.push_back({"rewards." + name + ".sources",
                          "none of its sources serves " + missing + ", which its " + reward.kind
                            + " calls need; name one that does, or none (any source)"});
    }
  }
}

bool apply_port_flag(const std::optional<int>& value, const char* flag, uint16_t& out,
                     std::vector<config::config_problem>& problems) {
  if (!value) {
    return false;
  }
  if (*value < 0 || *value > 65535) {
    problems.push_back({flag, "must be between 0 and 65535 (got " + std::to_string(*value) + ")"});
    return false;
  }
  out = static_cast<uint16_t>(*value);
  return true;
}

std::vector<config::config_problem> read_configuration(const std::optional<std::string>& file,
                                                       const config_overrides& flags,
                                                       config::arbiter_config& cfg,
                                                       config_use use) {
  std::vector<config::config_problem> problems;
  // The cross-field rules run on the file with the environment and flags over it, so that a
  // variable can supply what the file leaves to each machine (docs/configuration.md).
  cfg = file ? config::load_file(*file, problems, config::load_checks::fields)
             : config::embedded_default();
  config::apply_environment(cfg, getenv_string, problems);
  if (flags) {
    flags(cfg, problems);
  }
  // After the problems found so far, so that what they make moot is left out (a missing name
  // is not also an empty one); then apart from them, to be named by their variables.
  std::vector<config::config_problem> cross = problems;
  config::validate_loaded(cfg, cross);
  cross.erase(cross.begin(), cross.begin() + static_cast<std::ptrdiff_t>(problems.size()));
  // The checks that look past the fields (a reward's options and sources, a model folder, a
  // URL as its client reads it) run whatever else is wrong, so that one run reports every
  // problem; but not on a field already reported, nor on what a reported field makes moot.
  auto reported = [&](const std::string& field) {
    auto under = [&field](const std::string& f) { return config::covered_by(f, field); };
    return std::any_of(problems.begin(), problems.end(),
                       [&](const config::config_problem& p) { return under(p.field); })
           || std::any_of(cross.begin(), cross.end(),
                          [&](const config::config_problem& p) { return under(p.field); });
  };
  check_reward_options(cfg, cross, reported);
  check_reward_sources(cfg, cross, reported);
  if (use == config_use::serve) {
    // A model folder start-up cannot read: check-config said ok, and serve then exited 2.
    for (size_t i = 0; i < cfg.models.size(); ++i) {
      const auto field = "models[" + std::to_string(i) + "].path";
      const auto file_in = cfg.models[i].path + "/config.json";
      std::ifstream in{file_in};
      if (reported(field)) {
        continue;
      }
      if (!in) {
        cross.push_back({field, "cannot read " + file_in + " (a model folder holds its "
                                  "config.json, weights and tokenizer)"});
      } else if (auto doc = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
                 !doc.is_object()) {
        // What each model's loader reads first: serve exited 2 on it after check-config's ok.
        cross.push_back({field, file_in + " is not a JSON object"});
      }
    }
    // As the source's HTTP client will read it, so that check-config and start-up refuse what
    // would fail every call (and a URL with credentials is refused, not logged). A URL with
    // no http(s) scheme is named by the configuration's own check.
    for (size_t i = 0; i < cfg.sources.size(); ++i) {
      const auto& url = cfg.sources[i].url;
      if (!config::has_http_scheme(url)) {
        continue;
      }
      auto parsed = backends::parse_url(actors::base_url(cfg.sources[i]));
      const auto field = "sources[" + std::to_string(i) + "].url";
      if (!parsed.endpoint && !reported(field)) {
        cross.push_back({field, parsed.error});
      }
    }
  }
  for (auto& problem : cross) {
    if (auto variable = setting_variable(cfg, problem.field)) {
      // The value came from the environment, which wins over the file: name the variable,
      // since the operator may have no file with that field in it.
      problem.reason += " (" + problem.field + ")";
      problem.field = *variable;
    }
    // `arbiter replay` reads the rewards alone: a served file's certificates, key files and
    // listening rules belong to the machine that served it.
    const auto& f = problem.field;
    if (use == config_use::serve || f.rfind("rewards", 0) == 0
        || f.rfind("data_sources", 0) == 0 || f.rfind("cpu", 0) == 0) {
      problems.push_back(std::move(problem));
    }
  }
  return problems;
}

stop_deadline::~stop_deadline() {
  std::thread([limit = limit_, rc = rc_] {
    std::this_thread::sleep_for(limit);
    log::warn("the actor system did not stop within ", limit.count(),
              " s (a cluster connection stuck in its TLS handshake, or a model "
              "worker busy with a long batch?); exiting");
    std::_Exit(rc);
  }).detach();
}

bool load_configuration(const std::optional<std::string>& config_file,
                        const config_overrides& flags, config::arbiter_config& cfg,
                        config_use use) {
  auto file = config_file ? config_file : getenv_string("ARBITER_CONFIG");
  if (!config_file && file && file->empty()) {
    file.reset();  // ARBITER_CONFIG= is unset, as every empty ARBITER_* variable is
  }
  auto problems = read_configuration(file, flags, cfg, use);
  if (!problems.empty()) {
    std::cerr << "arbiter: invalid configuration"
              << (file ? " in " + *file : std::string{" (embedded default + environment)"})
              << ":\n"
              << config::describe(problems);
    return false;
  }
  return true;
}

void spawn_cpu_workers(caf::actor_system& sys, const config::arbiter_config& cfg, uint32_t n,
                       std::vector<actors::spawned_source>& out) {
  for (uint32_t i = 0; i < n; ++i) {
    actors::spawned_source s;
    s.spec.name = "cpu";
    s.spec.capabilities = {"cpu"};
    s.spec.max_batch_items = cfg.scheduler.dispatch_batch_items;
    s.spec.max_inflight = cfg.scheduler.max_inflight_batches_per_source;
    s.worker = actors::spawn_cpu_worker(sys, cfg.cpu);
    out.push_back(std::move(s));
  }
}

void spawn_remote_sources(caf::actor_system& sys, boost::asio::io_context& ioc,
                          const config::arbiter_config& cfg,
                          std::vector<actors::spawned_source>& out) {
  for (const auto& src : cfg.sources) {
    if (!src.api_key_env.empty() && actors::resolve_api_key(src).empty()) {
      log::warn("source '", src.name, "': ", src.api_key_env,
                " is not set; calling it without an API key");
    }
    actors::spawned_source s;
    s.spec = actors::remote_source_spec(src, cfg.routing);
    s.spec.capabilities = actors::routed_capabilities(src, cfg);
    s.worker = actors::spawn_remote_source(sys, ioc, src);
    out.push_back(std::move(s));
    if (auto base = actors::base_url(src); base != src.url) {
      log::info("source '", src.name, "': ", src.kind, " at ", base, " (the url's final /v1 is "
                "dropped: the API's paths begin with it)");
    } else {
      log::info("source '", src.name, "': ", src.kind, " at ", src.url);
    }
  }
}

bool start_local_models(caf::actor_system& sys, const config::arbiter_config& cfg,
                        actors::local_model_metrics& metrics,
                        std::vector<net::local_model_info>& loaded,
                        std::vector<actors::spawned_source>& out) {
  for (const auto& m : cfg.models) {
    auto devices = actors::model_devices(m);
    if (devices.empty()) {
      log::error("model '", m.name, "': device \"cuda\" but no GPU is visible");
      return false;
    }
    if (m.device.rfind("cuda:", 0) == 0) {
      const int visible = backends::models::cuda_device_count();
      if (std::atoi(m.device.c_str() + 5) >= visible) {
        log::error("model '", m.name, "': device \"", m.device, "\" but ", visible,
                   visible == 1 ? " GPU is" : " GPUs are", " visible");
        return false;
      }
    }
    for (const auto& device : devices) {
      caf::actor worker;
      net::local_model_info shown;
      auto describe = [&](const auto& info) {
        shown.device = info.device;
        shown.architecture = info.architecture;
        shown.dtype = info.dtype;
        shown.max_tokens = info.max_tokens;
        shown.weight_bytes = info.weight_bytes;
        log::info("model '", m.name, "': ", info.architecture, " ", info.layers, "x",
                  info.hidden, " on ", info.device, " (", info.dtype, ", ",
                  info.weight_bytes >> 20, " MiB)");
      };
      try {
        backends::models::model_options options;
        options.device = device;
        options.dtype = m.dtype;
        options.pass_overhead_tokens = m.pass_overhead_tokens;
        options.decode_graphs = m.cuda_graphs ? -1 : 0;
        if (m.kind == "generator") {
          auto generator = backends::models::text_generator::load(m.path, options);
          describe(generator->info());
          worker = actors::spawn_generator_worker(sys, generator, m.max_batch_tokens,
                                                  m.batch_calls, metrics, m.name);
        } else if (m.kind == "nli") {
          auto classifier = backends::models::text_classifier::load(m.path, options);
          describe(classifier->info());
          worker = actors::spawn_nli_worker(sys, classifier, m.max_batch_tokens, metrics, m.name);
        } else {
          auto embedder = backends::models::text_embedder::load(m.path, options);
          describe(embedder->info());
          worker = actors::spawn_embedding_worker(sys, embedder, m.path, m.max_batch_tokens,
                                                  metrics, m.name);
        }
      } catch (const std::exception& e) {
        log::error("model '", m.name, "' on ", device, ": ",
                   backends::models::without_backtrace(e.what()));
        return false;
      }
      shown.name = m.name;
      shown.path = m.path;
      loaded.push_back(std::move(shown));
      out.push_back({actors::local_model_spec(m, cfg, shown.max_tokens), worker});
    }
  }
  return true;
}

} // namespace arbiter::exe
