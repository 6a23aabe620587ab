// The `arbiter` command: `serve` runs the reward-serving scheduler, `check-config` validates a
// configuration file.
#include <iostream>

#include <CLI/CLI.hpp>

#include "arbiter/version.hpp"
#include "common/log.hpp"
#include "exe/serve.hpp"

int main(int argc, char** argv) {
  CLI::App app{"Arbiter: a reward-serving scheduler for RL post-training.\n"
               "Trainers POST items to /v1/score; Arbiter queues them by priority and "
               "deadline and scores them on its workers.",
               "arbiter"};
  app.set_version_flag("--version", std::string{"arbiter "} + arbiter::version);
  app.require_subcommand(1);
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "debug, info, warn or error (stderr)")
    ->capture_default_str();

  arbiter::exe::serve_options options;
  auto* serve = app.add_subcommand(
    "serve", "Run the server until SIGINT/SIGTERM, then drain and exit 0.\n"
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
  serve->add_option("--port", port, "port to bind, 0 picks a free one (overrides server.port)");
  serve->add_option("--log-level", log_level, "debug, info, warn or error (stderr)");

  auto* check = app.add_subcommand(
    "check-config", "Validate a TOML configuration file: prints 'FIELD: REASON' for every "
                    "problem and exits 1, or prints 'ok: FILE' and exits 0.");
  std::string check_file;
  check->add_option("FILE", check_file, "the file to check")->required();

  CLI11_PARSE(app, argc, argv);

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
  if (!config_file.empty()) {
    options.config_file = config_file;
  }
  if (!host.empty()) {
    options.host = host;
  }
  if (port != -1) {
    options.port = port;
  }
  return arbiter::exe::serve(options);
}
