#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string_view>

namespace arbiter {

/// An enum's spellings, one per value in the order of the values (which run 0, 1, 2, ...): one
/// table read both ways instead of a switch and a parser per enum. Made by `names_of`, which
/// names the enum's last value, so a table missing a spelling does not build.
template <class E, std::size_t N>
struct enum_names {
  std::array<const char*, N> names;

  /// The spelling of `e`; "unknown" for a value outside the enum (a corrupt byte).
  constexpr const char* operator[](E e) const noexcept {
    auto i = static_cast<std::size_t>(e);
    return i < N ? names[i] : "unknown";
  }

  /// The value spelled `text`, if any.
  constexpr std::optional<E> parse(std::string_view text) const noexcept {
    for (std::size_t i = 0; i < N; ++i) {
      if (text == names[i]) {
        return static_cast<E>(i);
      }
    }
    return std::nullopt;
  }
};

/// `constexpr auto color_names = names_of<color::green>("red", "green");`: the spellings of
/// every value of `color`, whose last value is `color::green`.
template <auto Last, class... Names>
constexpr enum_names<decltype(Last), sizeof...(Names)> names_of(Names... names) noexcept {
  static_assert(static_cast<std::size_t>(Last) + 1 == sizeof...(Names),
                "one spelling for each value, in order, through the last");
  return {{names...}};
}

} // namespace arbiter
