// The `arbiter` command: `serve` runs the reward-serving scheduler, `worker` a worker node,
// `check-config` validates a configuration file, `replay` recomputes rewards from a replay log.
#include <algorithm>
#include <csignal>
#include <iostream>

#include <CLI/CLI.hpp>

#include "arbiter/version.hpp"
#include "common/log.hpp"
#include "exe/serve.hpp"

int main(int argc, char** argv) {
  // A log reader that went away (`| tee` ended by the same Ctrl-C, a supervisor's pipe) must
  // not kill a draining server with SIGPIPE, nor a file-size limit (`ulimit -f`, systemd's
  // LimitFSIZE=) kill it with SIGXFSZ at the replay log: the write fails with EPIPE or EFBIG
  // instead, and the log line is lost or the replay record counted as failed.
  std::signal(SIGPIPE, SIG_IGN);
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{"Arbiter: a reward-serving scheduler for RL post-training.\n"
               "Trainers POST items to /v1/score; Arbiter queues them by priority and "
               "deadline and scores them on its workers.",
               "arbiter"};
  app.set_version_flag("--version", std::string{"arbiter "} + arbiter::version);
  app.require_subcommand(1);
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "debug, info, warn or error (stderr)")
    ->capture_default_str();

  // A port given as "" read as 0 (any port); -1, the value of a flag not given, as none.
  const auto not_empty = [](const std::string& text) {
    return text.empty() ? std::string{"expected a number, got nothing"} : std::string{};
  };
  arbiter::exe::serve_options options;
  auto* serve = app.add_subcommand(
    "serve", "Run the server until SIGINT/SIGTERM/SIGHUP, then drain and exit 0 (a second "
             "signal during the drain exits at once, with 128 + its number).\n"
             "Without --config it runs on the embedded default configuration "
             "(127.0.0.1:8080, CPU rewards lexical and exact_match). Precedence: flags > "
             "ARBITER_* environment variables > --config file (or $ARBITER_CONFIG) > "
             "embedded default. The first line on stdout is 'listening on http://HOST:PORT'. "
             "See docs/configuration.md.");
  std::string config_file;
  serve->add_option("--config", config_file, "TOML configuration file")
    ->check(CLI::ExistingFile);
  std::string host;
  serve->add_option("--host", host, "address to bind (overrides server.host)");
  int port = -1;
  auto* port_flag =
    serve->add_option("--port", port, "port to bind, 0 picks a free one (overrides server.port)")
      ->check(not_empty);
  serve->add_option("--log-level", log_level, "debug, info, warn or error (stderr)");
  int cluster_port = -1;
  auto* cluster_port_flag =
    serve->add_option("--cluster-port", cluster_port,
                      "turn the cluster on: worker nodes join on this port, 0 picks one "
                      "(overrides cluster.port)")
      ->check(not_empty);
  std::string cluster_host;
  serve->add_option("--cluster-host", cluster_host,
                    "address the cluster port binds (overrides cluster.host; a non-loopback "
                    "address needs cluster.certificate, key and ca)");

  arbiter::exe::worker_options node;
  std::string join;
  std::string node_config;
  int cpu_workers = -1;
  auto* worker = app.add_subcommand(
    "worker", "Run a worker node: join the coordinator (`arbiter serve` with the cluster on) "
              "and serve with the workers its configuration asks for ([cpu], [[models]], "
              "[[sources]]) until SIGINT/SIGTERM/SIGHUP; when the coordinator cannot be reached or "
              "goes away, join again with backoff (250 ms doubling to 8 s). Certificates and "
              "heartbeat come from [cluster]. See docs/deployment.md.");
  worker->add_option("--join", join, "the coordinator's cluster address, HOST:PORT")->required();
  worker->add_option("--config", node_config, "TOML configuration file")
    ->check(CLI::ExistingFile);
  worker->add_option("--name", node.name,
                     "node name, prefix of its source names (default HOSTNAME-PID)");
  worker->add_option("--cpu-workers", cpu_workers,
                     "CPU workers, 0 for one per core (overrides cpu.workers)")
    ->check(CLI::Range(0, 65536));
  int status_port = -1;
  auto* status_port_flag =
    worker->add_option("--status-port", status_port,
                       "serve GET /health (200 while joined, 503 while not) and GET /metrics on "
                       "this port, 0 picks one (logged); default none")
      ->check(not_empty);
  std::string status_host;
  worker->add_option("--status-host", status_host,
                     "address the status port binds (overrides server.host, 127.0.0.1)");
  worker->add_option("--log-level", log_level, "debug, info, warn or error (stderr)");

  auto* check = app.add_subcommand(
    "check-config", "Validate a TOML configuration file: prints 'FIELD: REASON' for every "
                    "problem and exits 1, or prints 'ok: FILE' and exits 0.");
  std::string check_file;
  check->add_option("FILE", check_file, "the file to check")->required();

  arbiter::exe::replay_options replay_opts;
  auto* replay = app.add_subcommand(
    "replay", "Recompute every reward item of replay logs ([replay] path; docs/replay.md) from "
              "the model answers and vectors they recorded, with no provider or model, and "
              "print each item whose score differs from the one returned at the time, then a "
              "table per reward kind. Exits 0 when every replayed score is identical, 1 when "
              "one differs or a line cannot be read, 2 when a file cannot be opened.");
  replay->add_option("LOG", replay_opts.files, "replay log files (rotated ones too, any order)")
    ->required()
    ->check(CLI::ExistingFile);
  std::string replay_config;
  replay->add_option("--config", replay_config,
                     "the server's configuration file (its rewards and [cpu] limits)")
    ->check(CLI::ExistingFile);
  std::string replay_step;
  replay->add_option("--step", replay_step, "only the items of this training step");
  replay->add_flag("--json", replay_opts.json, "print a JSON summary instead of the table");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help prints and exits 0; any usage mistake (an unknown flag, a missing file) exits 2,
    // as a bad configuration does, not with CLI11's own codes (105, 106, ...).
    const int printed = app.exit(e);
    return printed == 0 ? 0 : 2;
  }

  arbiter::log::level level;
  if (!arbiter::log::parse_level(log_level, level)) {
    std::cerr << "arbiter: --log-level: expected debug, info, warn or error, got '"
              << log_level << "'\n";
    return 2;
  }
  arbiter::log::set_level(level);

  if (*check) {
    return arbiter::exe::check_config(check_file);
  }
  if (*replay) {
    if (!replay_config.empty()) {
      replay_opts.config_file = replay_config;
    }
    if (replay->count("--step") > 0) {
      replay_opts.step = replay_step;
    }
    return arbiter::exe::replay_logs(replay_opts);
  }
  if (*worker) {
    auto colon = join.rfind(':');
    int join_port = -1;
    if (colon != std::string::npos) {
      // Digits only: std::stoi took "7abc" as 7 and "7710/" as 7710.
      auto digits = join.substr(colon + 1);
      if (!digits.empty() && digits.size() <= 5
          && std::all_of(digits.begin(), digits.end(),
                         [](char c) { return c >= '0' && c <= '9'; })) {
        join_port = std::stoi(digits);
      }
    }
    if (colon == std::string::npos || colon == 0 || join_port <= 0 || join_port > 65535) {
      std::cerr << "arbiter: --join: expected HOST:PORT, got '" << join << "'\n";
      return 2;
    }
    node.host = join.substr(0, colon);
    node.port = static_cast<uint16_t>(join_port);
    if (node.name.find('/') != std::string::npos) {
      std::cerr << "arbiter: --name: must not contain '/', got '" << node.name << "'\n";
      return 2;
    }
    if (cpu_workers >= 0) {
      node.cpu_workers = static_cast<uint32_t>(cpu_workers);
    }
    if (status_port_flag->count() > 0) {
      node.status_port = status_port;
    }
    if (!status_host.empty()) {
      node.status_host = status_host;
    }
    if (!node_config.empty()) {
      node.config_file = node_config;
    }
    return arbiter::exe::worker(node);
  }
  if (cluster_port_flag->count() > 0) {
    options.cluster_port = cluster_port;
  }
  if (!cluster_host.empty()) {
    options.cluster_host = cluster_host;
  }
  if (!config_file.empty()) {
    options.config_file = config_file;
  }
  if (!host.empty()) {
    options.host = host;
  }
  if (port_flag->count() > 0) {
    options.port = port;
  }
  return arbiter::exe::serve(options);
}
