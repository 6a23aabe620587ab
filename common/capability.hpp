#pragma once

// What a source serves. Everything that decides what a capability means — which sources serve
// which, what a reward kind needs, what a graph's calls ask for, what a configuration may name
// — uses the enum. The scheduler routes by *routing key*: a capability's name, alone or with a
// suffix that narrows the sources ("chat@model:qwen3-8b", "embed@strict_reward"); it matches
// keys and never interprets them, so the key stays a string from the edges to its queues.

#include <optional>
#include <string>
#include <string_view>

#include "common/enum_names.hpp"

namespace arbiter {

enum class capability {
  cpu,      ///< the CPU rewards (a CPU worker)
  chat,     ///< a chat completion (judge prompts; /v1/chat/completions)
  generate, ///< a completion with log-probabilities (ΔIG's samples)
  embed,    ///< embeddings (the embedding reward; /v1/embeddings, TEI /embed)
  nli,      ///< entailment probabilities (ΔIG's pairs; TEI /predict)
  ig,       ///< a whole info_gain item (an IG service, or the local ΔIG graph)
  judge,    ///< a whole judge item (the judge graph)
  em_ig,    ///< a whole em_info_gain item (its graph)
};

inline constexpr auto capability_names = names_of<capability::em_ig>(
  "cpu", "chat", "generate", "embed", "nli", "ig", "judge", "em_ig");

/// What `[[sources]] capabilities` may list: the model calls a remote endpoint can serve.
inline constexpr capability remote_capabilities[] = {capability::chat, capability::generate,
                                                      capability::embed, capability::nli,
                                                      capability::ig};

inline std::string_view name_of(capability c) noexcept {
  return capability_names[c];
}

/// The routing key of `c`, narrowed by `suffix` ("@model:ID", "@REWARD") when given.
inline std::string routing_key(capability c, std::string_view suffix = {}) {
  std::string key{name_of(c)};
  key += suffix;
  return key;
}

/// Whether routing key `key` is `c`'s, alone or narrowed ("chat", "chat@judge").
inline bool keys_capability(std::string_view key, capability c) noexcept {
  const auto name = name_of(c);
  return key.substr(0, name.size()) == name && (key.size() == name.size() || key[name.size()] == '@');
}

} // namespace arbiter
