// The config schema: one entry per key (path, where it lives in Config, what
// values are allowed, help text) and the cross-field rules. config.cpp derives
// parsing, validation, defaults, overrides and the reference table from it.
// Defaults are not repeated here: they are whatever a default-constructed
// Config holds (config.h).
#pragma once
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "config/config.h"

namespace gpt::config_schema {

// The field a key reads and writes; its C++ type is the key's type
// (nlohmann::json: a JSON object, checked where it is used).
using FieldRef = std::variant<int*, int64_t*, uint64_t*, double*, std::optional<double>*, std::string*,
                              std::vector<int>*, nlohmann::json*>;

// What a value may be. Numeric bounds apply to numbers and to list elements;
// integer bounds are small enough to be exact in a double.
struct Allowed {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool lo_open = false;                  // lo itself is excluded
  bool hi_open = false;                  // hi itself is excluded
  std::vector<std::string_view> values;  // non-empty: the key is an enum
  bool nonempty = false;                 // strings and lists
  bool increasing = false;               // lists: strictly increasing
};

struct Key {
  std::string_view section;
  std::string_view name;
  FieldRef (*field)(Config&);
  Allowed allowed;
  std::string_view help;

  std::string path() const { return std::string(section) + "." + std::string(name); }
  bool is_enum() const { return !allowed.values.empty(); }
};

// A constraint between keys; `keys` are shown with their values on failure.
struct Rule {
  std::string_view text;
  std::vector<std::string_view> keys;  // full paths
  std::function<bool(const Config&)> holds;
};

const std::vector<Key>& keys();  // in section order, then declaration order
const std::vector<Rule>& rules();
const std::vector<std::string_view>& sections();

const Key* find_key(std::string_view section, std::string_view name);  // null if unknown
const Key* find_key(std::string_view path);                            // "section.name"

// "model, data, ..." and "n_layer, n_head, ..." for error messages.
std::string section_list();
std::string key_list(std::string_view section);

}  // namespace gpt::config_schema
