#include "scheduler/rate_limiter.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <ctime>
#include <iterator>
#include <limits>
#include <string_view>
#include <utility>

#include "common/enum_names.hpp"

namespace arbiter::scheduler {

namespace {

constexpr double ns_per_minute = 60e9;
/// Longest wait a header can express here (about 31 years); longer values are cut to it so
/// that conversions never overflow.
constexpr double max_header_ns = 1e18;

std::string_view trim(std::string_view s) noexcept {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) {
    s.remove_suffix(1);
  }
  return s;
}

bool is_digit(char c) noexcept {
  return c >= '0' && c <= '9';
}

char ascii_lower(char c) noexcept {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

bool iequals(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size()) {
    return false;
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (ascii_lower(a[i]) != ascii_lower(b[i])) {
      return false;
    }
  }
  return true;
}

/// Reads an unsigned decimal number with an optional fraction ("12", "0.5", "3.") from the
/// front of `s`, removing it. Nullopt (and `s` unchanged) when `s` does not start with a
/// digit.
std::optional<double> take_decimal(std::string_view& s) {
  size_t i = 0;
  double value = 0.0;
  for (; i < s.size() && is_digit(s[i]); ++i) {
    value = value * 10.0 + (s[i] - '0');
  }
  if (i == 0) {
    return std::nullopt;
  }
  if (i < s.size() && s[i] == '.') {
    double scale = 0.1;
    for (++i; i < s.size() && is_digit(s[i]); ++i) {
      value += (s[i] - '0') * scale;
      scale /= 10.0;
    }
  }
  s.remove_prefix(i);
  return value;
}

nanoseconds to_ns(double ns) noexcept {
  return nanoseconds{static_cast<nanoseconds::rep>(std::llround(std::min(ns, max_header_ns)))};
}

/// A whole non-negative count; nullopt for "-1", "", "12.5", "abc".
std::optional<uint64_t> parse_count(std::optional<std::string_view> text) {
  if (!text) {
    return std::nullopt;
  }
  auto s = trim(*text);
  uint64_t value = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc{} || end != s.data() + s.size() || s.empty()) {
    return std::nullopt;
  }
  return value;
}

/// The month of a three-letter English name ("Jan" .. "Dec", any case), 1 to 12; 0 otherwise.
unsigned month_of(std::string_view name) noexcept {
  static constexpr std::string_view months[] = {"jan", "feb", "mar", "apr", "may", "jun",
                                                "jul", "aug", "sep", "oct", "nov", "dec"};
  for (unsigned m = 0; m < 12; ++m) {
    if (iequals(name, months[m])) {
      return m + 1;
    }
  }
  return 0;
}

/// Reads exactly `digits` digits (at least one, at most `digits` when `digits` is 0: 1 or 2)
/// from the front of `s`, removing them.
std::optional<int> take_digits(std::string_view& s, size_t digits) {
  size_t n = 0;
  int value = 0;
  const size_t most = digits == 0 ? 2 : digits;
  for (; n < most && n < s.size() && is_digit(s[n]); ++n) {
    value = value * 10 + (s[n] - '0');
  }
  if (n == 0 || (digits != 0 && n != digits)) {
    return std::nullopt;
  }
  s.remove_prefix(n);
  return value;
}

bool take(std::string_view& s, char c) noexcept {
  if (s.empty() || s.front() != c) {
    return false;
  }
  s.remove_prefix(1);
  return true;
}

/// "HH:MM:SS" into seconds of the day.
std::optional<int> take_time_of_day(std::string_view& s) {
  auto h = take_digits(s, 2);
  if (!h || !take(s, ':')) {
    return std::nullopt;
  }
  auto m = take_digits(s, 2);
  if (!m || !take(s, ':')) {
    return std::nullopt;
  }
  auto sec = take_digits(s, 2);
  if (!sec || *h > 23 || *m > 59 || *sec > 60) { // 60: a leap second
    return std::nullopt;
  }
  return *h * 3600 + *m * 60 + *sec;
}

/// A UTC calendar date and second of the day as a time point; nullopt for dates that do not
/// exist (31 November, 29 February 2026).
std::optional<std::chrono::system_clock::time_point> to_time_point(int year, unsigned month,
                                                                   int day, int seconds) {
  std::tm tm{};
  tm.tm_year = year - 1900;
  tm.tm_mon = static_cast<int>(month) - 1;
  tm.tm_mday = day;
  const std::time_t midnight = timegm(&tm);
  // timegm normalizes (31 November is 1 December): a date that moved did not exist.
  if (midnight == static_cast<std::time_t>(-1) || tm.tm_mday != day
      || tm.tm_mon != static_cast<int>(month) - 1) {
    return std::nullopt;
  }
  return std::chrono::system_clock::from_time_t(midnight) + std::chrono::seconds{seconds};
}

std::optional<nanoseconds> parse_reset(std::optional<std::string_view> text) {
  if (!text) {
    return std::nullopt;
  }
  return parse_reset_duration(*text);
}

} // namespace

std::optional<nanoseconds> parse_reset_duration(std::string_view text) {
  auto s = trim(text);
  if (s.empty()) {
    return std::nullopt;
  }
  double total_ns = 0.0;
  bool first = true;
  while (!s.empty()) {
    auto number = take_decimal(s);
    if (!number) {
      return std::nullopt;
    }
    if (first && s.empty()) {
      // A bare number: seconds.
      return to_ns(*number * 1e9);
    }
    first = false;
    // Go's duration units, longest first where one is the start of another ("ms" before "m").
    static constexpr std::pair<std::string_view, double> units[] = {
        {"ns", 1.0}, {"us", 1e3}, {"\xC2\xB5s", 1e3}, {"\xCE\xBCs", 1e3},
        {"ms", 1e6}, {"s", 1e9},  {"m", 60e9},        {"h", 3600e9},
    };
    const auto* unit = std::find_if(std::begin(units), std::end(units), [&s](const auto& u) {
      return s.substr(0, u.first.size()) == u.first;
    });
    if (unit == std::end(units)) {
      return std::nullopt;
    }
    s.remove_prefix(unit->first.size());
    total_ns += *number * unit->second;
  }
  return to_ns(total_ns);
}

rate_limit_headers parse_rate_limit_headers(const header_lookup& lookup) {
  rate_limit_headers h;
  h.limit_requests = parse_count(lookup("x-ratelimit-limit-requests"));
  h.limit_tokens = parse_count(lookup("x-ratelimit-limit-tokens"));
  h.remaining_requests = parse_count(lookup("x-ratelimit-remaining-requests"));
  h.remaining_tokens = parse_count(lookup("x-ratelimit-remaining-tokens"));
  h.reset_requests = parse_reset(lookup("x-ratelimit-reset-requests"));
  h.reset_tokens = parse_reset(lookup("x-ratelimit-reset-tokens"));
  return h;
}

std::optional<std::chrono::system_clock::time_point> parse_http_date(std::string_view text) {
  auto s = trim(text);
  // The day name ends at ',' (IMF-fixdate, RFC 850) or ' ' (asctime); it is not checked
  // against the date, as RFC 9110 lets a recipient ignore it.
  const size_t end = s.find_first_of(", ");
  if (end == std::string_view::npos || end < 3) {
    return std::nullopt;
  }
  const bool asctime = s[end] == ' ';
  s.remove_prefix(end + 1);
  if (asctime) {
    // "Sun Nov  6 08:49:37 1994"
    unsigned month = month_of(s.substr(0, 3));
    s.remove_prefix(std::min<size_t>(3, s.size()));
    if (month == 0 || !take(s, ' ')) {
      return std::nullopt;
    }
    take(s, ' '); // a one-digit day is padded with a space
    auto day = take_digits(s, 0);
    if (!day || !take(s, ' ')) {
      return std::nullopt;
    }
    auto time = take_time_of_day(s);
    if (!time || !take(s, ' ')) {
      return std::nullopt;
    }
    auto year = take_digits(s, 4);
    if (!year || !s.empty()) {
      return std::nullopt;
    }
    return to_time_point(*year, month, *day, *time);
  }
  // "Sun, 06 Nov 1994 08:49:37 GMT" or "Sunday, 06-Nov-94 08:49:37 GMT"
  if (!take(s, ' ')) {
    return std::nullopt;
  }
  auto day = take_digits(s, 2);
  if (!day || s.empty() || (s.front() != ' ' && s.front() != '-')) {
    return std::nullopt;
  }
  const char sep = s.front();
  s.remove_prefix(1);
  unsigned month = month_of(s.substr(0, 3));
  s.remove_prefix(std::min<size_t>(3, s.size()));
  if (month == 0 || !take(s, sep)) {
    return std::nullopt;
  }
  auto year = take_digits(s, sep == ' ' ? 4 : 2);
  if (!year || !take(s, ' ')) {
    return std::nullopt;
  }
  if (sep == '-') {
    // RFC 9110: a two-digit year more than 50 years ahead is in the past century.
    *year += *year >= 70 ? 1900 : 2000;
  }
  auto time = take_time_of_day(s);
  if (!time || !take(s, ' ') || s != "GMT") {
    return std::nullopt;
  }
  return to_time_point(*year, month, *day, *time);
}

std::optional<nanoseconds> parse_retry_after(std::string_view value,
                                             std::string_view header_name) {
  return parse_retry_after(value, header_name, std::chrono::system_clock::now());
}

std::optional<nanoseconds> parse_retry_after(std::string_view value,
                                             std::string_view header_name,
                                             std::chrono::system_clock::time_point now) {
  double unit_ns = 0.0;
  if (iequals(header_name, "retry-after-ms")) {
    unit_ns = 1e6;
  } else if (iequals(header_name, "retry-after")) {
    unit_ns = 1e9;
  } else {
    return std::nullopt;
  }
  auto s = trim(value);
  auto number = take_decimal(s);
  if (number && s.empty()) {
    return to_ns(*number * unit_ns);
  }
  if (!number && unit_ns == 1e9) {
    // RFC 9110: Retry-After = HTTP-date / delay-seconds. A date already past means now.
    if (auto date = parse_http_date(value)) {
      return std::max(std::chrono::duration_cast<nanoseconds>(*date - now), nanoseconds{0});
    }
  }
  return std::nullopt;
}

std::optional<nanoseconds> retry_after_from_headers(const header_lookup& lookup) {
  for (std::string_view name : {"retry-after-ms", "retry-after"}) {
    if (auto value = lookup(name)) {
      if (auto parsed = parse_retry_after(*value, name)) {
        return parsed;
      }
    }
  }
  return std::nullopt;
}

constexpr auto rate_limit_wait_reason_names = names_of<rate_limit_wait_reason::tokens>(
    "none", "backoff", "requests", "tokens");

const char* to_string(rate_limit_wait_reason r) noexcept {
  return rate_limit_wait_reason_names[r];
}

constexpr auto acquire_decision_kind_names = names_of<acquire_decision_kind::reject_too_large>(
    "admit", "wait", "too_large");

const char* to_string(acquire_decision_kind k) noexcept {
  return acquire_decision_kind_names[k];
}

double rate_limiter::bucket::rate_per_ns() const noexcept {
  return per_minute / ns_per_minute;
}

void rate_limiter::bucket::refill(nanoseconds elapsed) noexcept {
  if (!limited()) {
    return;
  }
  level = std::min(capacity, level + static_cast<double>(elapsed.count()) * rate_per_ns());
}

nanoseconds rate_limiter::bucket::time_to(double amount) const noexcept {
  double missing = amount - level;
  // The tolerance absorbs rounding, so that waiting exactly the answer is always enough.
  if (!limited() || missing <= 1e-9 * (capacity + 1.0)) {
    return nanoseconds{0};
  }
  return to_ns(std::ceil(missing / rate_per_ns()));
}

void rate_limiter::bucket::correct(std::optional<uint64_t> limit,
                                   std::optional<uint64_t> remaining,
                                   std::optional<nanoseconds> reset) noexcept {
  if (!limited()) {
    // Not configured: the endpoint's own word is the best limit there is.
    if (!limit || *limit == 0) {
      return;
    }
    configured = static_cast<double>(*limit);
    learned = true;
    set_limit(configured);
    level = remaining ? static_cast<double>(*remaining) : capacity;
  }
  if (limit && *limit > 0) {
    const auto reported = static_cast<double>(*limit);
    if (learned) {
      configured = reported;
    }
    const double in_force = std::min(configured, reported);
    if (in_force != per_minute) {
      // A new limit: the burst the endpoint enforces with it is learned again (below), so a
      // burst learned under a looser limit does not outlive it.
      observed_capacity = 0.0;
    }
    set_limit(in_force);
    level = std::min(level, capacity);
  }
  if (remaining && reset) {
    // A token bucket holds remaining + rate × time-to-full when full: the burst the endpoint
    // enforces, whatever window its per-minute limit is stated over. The provider floors
    // `remaining`, so the largest value seen is the closest.
    auto r = std::min(*reset, nanoseconds{std::chrono::minutes{1}});
    double implied = static_cast<double>(*remaining) + static_cast<double>(r.count()) * rate_per_ns();
    if (implied > observed_capacity) {
      observed_capacity = implied;
      set_limit(per_minute);
      level = std::min(level, capacity);
    }
  }
  if (remaining) {
    level = std::min(level, static_cast<double>(*remaining));
    says_remaining = true;
  }
  if (reset && *reset > nanoseconds{0}) {
    // Full again after `reset` means at most capacity − rate × reset now. A reset beyond one
    // minute (a window longer than ours) empties the bucket.
    auto r = std::min(*reset, nanoseconds{std::chrono::minutes{1}});
    double implied = capacity - static_cast<double>(r.count()) * rate_per_ns();
    level = std::min(level, std::max(0.0, implied));
  }
}

rate_limiter::rate_limiter(const rate_limit_config& cfg, const time_source& clock)
  : clock_(clock),
    max_retry_after_(std::max(cfg.max_retry_after, nanoseconds{0})),
    backoff_(cfg.backoff_base, cfg.backoff_cap),
    last_refill_(clock.now()) {
  auto burst = std::chrono::duration<double>(cfg.burst).count() / 60.0;
  burst = std::clamp(burst, 1e-6, 1.0);
  requests_.configured = static_cast<double>(cfg.requests_per_minute);
  requests_.burst_fraction = burst;
  requests_.floor = 1.0;
  requests_.set_limit(requests_.configured);
  requests_.level = requests_.capacity;
  tokens_.configured = static_cast<double>(cfg.tokens_per_minute);
  tokens_.burst_fraction = burst;
  tokens_.set_limit(tokens_.configured);
  tokens_.level = tokens_.capacity;
}

void rate_limiter::bucket::set_limit(double limit) noexcept {
  per_minute = limit;
  capacity = limit * burst_fraction;
  if (observed_capacity > 0.0) {
    capacity = std::min(capacity, observed_capacity);
  }
  capacity = std::max(capacity, floor);
}

void rate_limiter::refill() {
  auto now = clock_.now();
  if (now > last_refill_) {
    requests_.refill(now - last_refill_);
    tokens_.refill(now - last_refill_);
    last_refill_ = now;
  }
}

acquire_decision rate_limiter::peek(uint64_t tokens) {
  refill();
  return decide(tokens);
}

acquire_decision rate_limiter::peek_paced(uint64_t tokens) {
  refill();
  double cap = tokens_.limited() ? tokens_.capacity : 0.0;
  auto amount = tokens_.limited() && static_cast<double>(tokens) > cap ? static_cast<uint64_t>(cap)
                                                                        : tokens;
  return decide(amount);
}

double rate_limiter::request_capacity() const noexcept {
  return requests_.limited() ? requests_.capacity : std::numeric_limits<double>::infinity();
}

double rate_limiter::token_capacity() const noexcept {
  return tokens_.limited() ? tokens_.capacity : std::numeric_limits<double>::infinity();
}

acquire_decision rate_limiter::try_acquire(uint64_t tokens) {
  refill();
  auto d = decide(tokens);
  if (!d.admitted()) {
    return d;
  }
  if (requests_.limited()) {
    requests_.level = std::max(0.0, requests_.level - 1.0);
  }
  if (tokens_.limited()) {
    tokens_.level = std::max(0.0, tokens_.level - static_cast<double>(tokens));
  }
  return d;
}

void rate_limiter::take(uint64_t tokens) {
  refill();
  if (requests_.limited()) {
    requests_.level -= 1.0;
  }
  if (tokens_.limited()) {
    tokens_.level -= static_cast<double>(tokens);
  }
}

void rate_limiter::give_back(uint64_t tokens) { settle(tokens, 0); }

void rate_limiter::settle(uint64_t charged, uint64_t counted) {
  refill();
  if (tokens_.limited()) {
    auto owed = static_cast<double>(charged) - static_cast<double>(counted);
    tokens_.level = std::min(tokens_.capacity, tokens_.level + owed);
  }
}

acquire_decision rate_limiter::decide(uint64_t tokens) {
  acquire_decision d;
  auto amount = static_cast<double>(tokens);
  if (tokens_.limited() && amount > tokens_.capacity) {
    d.kind = acquire_decision_kind::reject_too_large;
    return d;
  }
  auto now = clock_.now();
  d.until = now;
  auto wait_for = [&](time_point until, rate_limit_wait_reason reason) {
    if (until > d.until) {
      d.until = until;
      d.reason = reason;
    }
  };
  wait_for(blocked_until_, rate_limit_wait_reason::backoff);
  wait_for(now + requests_.time_to(1.0), rate_limit_wait_reason::requests);
  wait_for(now + tokens_.time_to(amount), rate_limit_wait_reason::tokens);
  if (d.reason != rate_limit_wait_reason::none) {
    d.kind = acquire_decision_kind::wait;
  }
  return d;
}

void rate_limiter::on_headers(const rate_limit_headers& headers) {
  refill();
  requests_.correct(headers.limit_requests, headers.remaining_requests, headers.reset_requests);
  tokens_.correct(headers.limit_tokens, headers.remaining_tokens, headers.reset_tokens);
}

void rate_limiter::on_rate_limited(std::optional<nanoseconds> retry_after,
                                   std::optional<time_point> sent) {
  const auto now = clock_.now();
  if (consecutive_rate_limited_ == 0 || !sent || *sent >= last_rate_limited_) {
    // A call sent after the last 429: the endpoint is still over its limit a round later.
    ++consecutive_rate_limited_;
    last_rate_limited_ = now;
  }
  nanoseconds delay{0};
  if (retry_after && *retry_after > nanoseconds{0}) {
    delay = std::min(*retry_after, max_retry_after_);
  } else {
    delay = backoff_.ceiling(consecutive_rate_limited_ - 1);
  }
  blocked_until_ = std::max(blocked_until_, now + delay);
  // The endpoint had less room than a bucket held. One that never says what remains says so
  // only this way, and a bucket settled to its exact counts (`settle`) would otherwise stay
  // the fraction of a token ahead of it that cost one 429 a call. (A refused call's own tokens
  // went back before this.) Where the endpoint says what remains, its headers correct the
  // level, and emptying it too would count the calls in flight twice once they are settled.
  refill();
  for (auto* b : {&requests_, &tokens_}) {
    if (!b->says_remaining) {
      b->level = std::min(b->level, 0.0);
    }
  }
}

void rate_limiter::on_success() noexcept {
  consecutive_rate_limited_ = 0;
}

double rate_limiter::available_requests() {
  refill();
  return requests_.limited() ? requests_.level : std::numeric_limits<double>::infinity();
}

double rate_limiter::available_tokens() {
  refill();
  return tokens_.limited() ? tokens_.level : std::numeric_limits<double>::infinity();
}

} // namespace arbiter::scheduler
