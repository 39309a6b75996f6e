// Feeding JSON instances (tests, benchmarks) to grammars that fix the property order. JSON objects are unordered,
// while a compiled schema writes object keys in one order (declared properties first). An
// instance is accepted when SOME order of its keys (at every nesting level) is a sentence of
// the grammar: the search below pushes the compact serialization through the Earley parser,
// trying the remaining keys of an object one by one and backtracking (parser pops) on failure.
// This is exact for both sides: a valid instance must be accepted in the grammar's order, an
// invalid one must be refused in every order.
#pragma once

#include "runtime/grammar/earley_parser.hpp"

#include <nlohmann/json.hpp>

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace di::grammar {

using ojson = nlohmann::ordered_json;

namespace instance_detail {

inline std::string scalar_text(const ojson& v) {
  return v.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

class order_search {
 public:
  explicit order_search(earley_parser& p) : p_(p) {}
  /// The bytes pushed so far (the accepted serialization once value() succeeded).
  const std::string& text() const { return text_; }

  /// Pushes `v` then calls `then`; on failure restores the parser. True if some order worked.
  bool value(const ojson& v, const std::function<bool()>& then) {
    if (++steps_ > k_max_steps) return false;
    if (v.is_object()) {
      std::vector<std::string> keys;
      for (const auto& [k, x] : v.items()) keys.push_back(k);
      return text("{", [&] { return members(v, keys, true, then); });
    }
    if (v.is_array()) return text("[", [&] { return elements(v, 0, then); });
    return text(scalar_text(v), then);
  }

 private:
  static constexpr std::size_t k_max_steps = 200'000;

  bool text(const std::string& s, const std::function<bool()>& then) {
    // `then` leaves its bytes in place on success and restores the parser on failure.
    std::size_t n = p_.push_all(s);
    text_.append(s, 0, n);
    if (n == s.size() && then()) return true;
    p_.pop(n);
    text_.resize(text_.size() - n);
    return false;
  }

  bool members(const ojson& v, std::vector<std::string>& left, bool first, const std::function<bool()>& then) {
    if (left.empty()) return text("}", then);
    for (std::size_t i = 0; i < left.size(); ++i) {
      std::string key = left[i];
      left.erase(left.begin() + std::ptrdiff_t(i));
      std::string head = std::string(first ? "" : ",") + scalar_text(ojson(key)) + ":";
      bool ok = text(head, [&] { return value(v[key], [&] { return members(v, left, false, then); }); });
      left.insert(left.begin() + std::ptrdiff_t(i), key);
      if (ok) return true;
    }
    return false;
  }

  bool elements(const ojson& v, std::size_t i, const std::function<bool()>& then) {
    if (i == v.size()) return text("]", then);
    return text(i ? "," : "", [&] { return value(v[i], [&] { return elements(v, i + 1, then); }); });
  }

  earley_parser& p_;
  std::string text_;
  std::size_t steps_ = 0;
};

}  // namespace instance_detail

/// Whether some key order of `instance` (compact JSON) is a complete sentence of `g`.
inline bool accepts_instance(const compiled_grammar& g, const ojson& instance) {
  earley_parser p(g);
  instance_detail::order_search s(p);
  return s.value(instance, [&] { return p.is_accepting(); });
}

/// The compact serialization of `instance` in a key order `g` accepts, if there is one.
inline std::optional<std::string> grammar_serialization(const compiled_grammar& g, const ojson& instance) {
  earley_parser p(g);
  instance_detail::order_search s(p);
  if (!s.value(instance, [&] { return p.is_accepting(); })) return std::nullopt;
  return s.text();
}

/// The instance in its own key order (for messages).
inline std::string instance_text(const ojson& instance) { return instance_detail::scalar_text(instance); }

}  // namespace di::grammar
