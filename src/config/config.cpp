// Parsing, validation, overrides and the reference table, all driven by the
// schema in schema.cpp: no key is named here.
#include "config/config.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <type_traits>
#include <utility>

#include "config/block_presets.h"
#include "config/layer_plan.h"
#include "config/schema.h"
#include "core/check.h"
#include "core/json.h"

namespace gpt {
namespace {

using config_schema::Allowed;
using config_schema::Key;
using nlohmann::json;

template <typename P>
using Pointee = std::remove_pointer_t<P>;

// ---- describing values and ranges for messages ----------------------------------

// "string \"abc\"", "number 3.5", "boolean true", "null": what the user wrote.
std::string describe(const json& v) {
  if (v.is_null()) return "null";
  std::string text = v.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return std::string(v.type_name()) + " " + text;
}

// Bounds are whole numbers or short decimals; show 16777216, not 1.6777216e7.
std::string number_text(double x) {
  if (x == std::floor(x) && std::fabs(x) < 1e15) return std::to_string(static_cast<long long>(x));
  return json(x).dump();
}

bool has_bounds(const Allowed& a) { return std::isfinite(a.lo) || std::isfinite(a.hi); }

std::string range_text(const Allowed& a) {
  bool lo = std::isfinite(a.lo), hi = std::isfinite(a.hi);
  if (lo && hi && !a.lo_open && !a.hi_open) return number_text(a.lo) + ".." + number_text(a.hi);
  std::string lo_part = lo ? (a.lo_open ? "> " : ">= ") + number_text(a.lo) : "";
  std::string hi_part = hi ? (a.hi_open ? "< " : "<= ") + number_text(a.hi) : "";
  if (lo && hi) return lo_part + " and " + hi_part;
  return lo ? lo_part : hi ? hi_part : "any";
}

bool within(const Allowed& a, double x) {  // false for NaN
  bool above_lo = a.lo_open ? x > a.lo : x >= a.lo;
  bool below_hi = a.hi_open ? x < a.hi : x <= a.hi;
  return above_lo && below_hi;
}

template <typename S>
std::string join(const std::vector<S>& parts) {
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : ", ") + std::string(p);
  return out;
}

// The field of a throwaway Config: for questions about a key's C++ type.
config_schema::FieldRef probe_field(const Key& k) {
  static Config probe;
  return k.field(probe);
}

// The "allowed" column and the tail of every range error.
std::string allowed_text(const Key& k) {
  const Allowed& a = k.allowed;
  if (k.is_enum()) return join(a.values);
  return std::visit(
      [&](auto* p) -> std::string {
        using T = Pointee<decltype(p)>;
        if constexpr (std::is_same_v<T, std::string>) {
          return a.nonempty ? "non-empty" : "any";
        } else if constexpr (std::is_same_v<T, std::vector<int>>) {
          std::vector<std::string> parts;
          if (a.nonempty) parts.push_back("non-empty");
          if (a.increasing) parts.push_back("strictly increasing");
          if (has_bounds(a)) parts.push_back("each " + range_text(a));
          return parts.empty() ? "any" : join(parts);
        } else if constexpr (std::is_same_v<T, uint64_t>) {
          return has_bounds(a) ? range_text(a) : "0..2^64-1";
        } else if constexpr (std::is_same_v<T, json>) {
          return "a JSON object";
        } else if constexpr (std::is_same_v<T, std::optional<double>>) {
          return range_text(a) + ", or null";
        } else {
          return range_text(a);
        }
      },
      probe_field(k));
}

const char* type_name(const Key& k) {
  return std::visit(
      [](auto* p) -> const char* {
        using T = Pointee<decltype(p)>;
        if constexpr (std::is_same_v<T, int>)
          return "int";
        else if constexpr (std::is_same_v<T, int64_t>)
          return "int64";
        else if constexpr (std::is_same_v<T, uint64_t>)
          return "uint64";
        else if constexpr (std::is_same_v<T, double>)
          return "float";
        else if constexpr (std::is_same_v<T, std::optional<double>>)
          return "float or null";
        else if constexpr (std::is_same_v<T, std::string>)
          return "string";
        else if constexpr (std::is_same_v<T, json>)
          return "object";
        else
          return "list of int";
      },
      probe_field(k));
}

[[noreturn]] void wrong_type(const std::string& where, const char* expected, const json& v) {
  fail("config: \"", where, "\" must be ", expected, ", got ", describe(v));
}

[[noreturn]] void out_of_range(const std::string& where, const std::string& value, const std::string& allowed) {
  fail("config: \"", where, "\" = ", value, " is out of range; allowed: ", allowed);
}

[[noreturn]] void unknown_section(const std::string& section) {
  fail("config: unknown section \"", section, "\"; valid sections: ", config_schema::section_list());
}

[[noreturn]] void unknown_key(const std::string& section, const std::string& name) {
  fail("config: unknown key \"", section, ".", name, "\"; valid keys in \"", section,
       "\": ", config_schema::key_list(section));
}

bool is_section(const std::string& s) {
  for (auto name : config_schema::sections())
    if (name == s) return true;
  return false;
}

// ---- reading JSON values into fields -----------------------------------------------

// The exact integer in v, as T. Whole-valued floats (3.0, 2e4) are accepted so
// that `--set train.steps=2e4` works; a fraction is a type error.
template <typename T>
T read_integer(const json& v, const std::string& where, const Key& k) {
  if (!v.is_number()) wrong_type(where, "an integer", v);
  bool fits = false;
  T out{};
  if (v.is_number_unsigned()) {
    auto u = v.get<uint64_t>();
    fits = std::in_range<T>(u);
    out = static_cast<T>(u);
  } else if (v.is_number_integer()) {
    auto s = v.get<int64_t>();
    fits = std::in_range<T>(s);
    out = static_cast<T>(s);
  } else {
    double d = v.get<double>();
    if (!std::isfinite(d) || d != std::floor(d)) wrong_type(where, "an integer", v);
    // [min(T), 2^digits) is T's range exactly, and both ends are exact doubles.
    fits =
        d >= static_cast<double>(std::numeric_limits<T>::min()) && d < std::ldexp(1.0, std::numeric_limits<T>::digits);
    if (fits) out = static_cast<T>(d);
  }
  if (!fits) {
    // The declared range may not mention the C++ type's own limit; say it.
    std::string allowed = allowed_text(k);
    double d = v.get<double>();
    if (!k.is_enum() && within(k.allowed, d) && !std::is_same_v<T, uint64_t>)
      allowed += d < 0 ? " (as " + std::string(type_name(k)) + ": at least " +
                             std::to_string(std::numeric_limits<T>::min()) + ")"
                       : " (as " + std::string(type_name(k)) + ": at most " +
                             std::to_string(std::numeric_limits<T>::max()) + ")";
    out_of_range(where, v.dump(), allowed);
  }
  return out;
}

void set_value(const Key& k, Config& c, const json& v) {
  const std::string where = k.path();
  std::visit(
      [&](auto* p) {
        using T = Pointee<decltype(p)>;
        if constexpr (std::is_same_v<T, double>) {
          if (!v.is_number()) wrong_type(where, "a number", v);
          *p = v.get<double>();
        } else if constexpr (std::is_same_v<T, std::optional<double>>) {
          if (v.is_null())
            *p = std::nullopt;
          else if (v.is_number())
            *p = v.get<double>();
          else
            wrong_type(where, "a number or null", v);
        } else if constexpr (std::is_same_v<T, std::string>) {
          if (!v.is_string()) wrong_type(where, "a string", v);
          *p = v.get<std::string>();
        } else if constexpr (std::is_same_v<T, std::vector<int>>) {
          if (!v.is_array()) wrong_type(where, "a list of integers", v);
          p->clear();
          for (size_t i = 0; i < v.size(); ++i)
            p->push_back(read_integer<int>(v[i], where + "[" + std::to_string(i) + "]", k));
        } else if constexpr (std::is_same_v<T, json>) {
          if (!v.is_object()) wrong_type(where, "a JSON object", v);
          *p = v;
        } else {
          *p = read_integer<T>(v, where, k);
        }
      },
      k.field(c));
}

json get_value(const Key& k, Config& c) {
  return std::visit(
      [](auto* p) {
        using T = Pointee<decltype(p)>;
        if constexpr (std::is_same_v<T, std::optional<double>>)
          return p->has_value() ? json(**p) : json(nullptr);
        else
          return json(*p);
      },
      k.field(c));
}

// ---- validation -----------------------------------------------------------------------

void check_enum(const Key& k, const std::string& value, const std::string& shown) {
  for (auto allowed : k.allowed.values)
    if (allowed == value) return;
  fail("config: \"", k.path(), "\" = ", shown, " is not valid; allowed: ", allowed_text(k));
}

void check_list(const Key& k, const std::vector<int>& list) {
  const Allowed& a = k.allowed;
  const std::string where = k.path();
  if (a.nonempty && list.empty()) fail("config: \"", where, "\" = [] is empty; allowed: ", allowed_text(k));
  for (size_t i = 0; i < list.size(); ++i)
    if (!within(a, list[i]))
      out_of_range(where + "[" + std::to_string(i) + "]", std::to_string(list[i]), range_text(a));
  for (size_t i = 1; a.increasing && i < list.size(); ++i)
    if (list[i] <= list[i - 1])
      fail("config: \"", where, "\" = ", json(list).dump(), " is not strictly increasing; allowed: ", allowed_text(k));
}

void check_value(const Key& k, Config& c) {
  std::visit(
      [&](auto* p) {
        using T = Pointee<decltype(p)>;
        if constexpr (std::is_same_v<T, std::string>) {
          if (k.is_enum())
            check_enum(k, *p, json(*p).dump());
          else if (k.allowed.nonempty && p->empty())
            fail("config: \"", k.path(), "\" = \"\" is empty; allowed: ", allowed_text(k));
        } else if constexpr (std::is_same_v<T, std::vector<int>>) {
          check_list(k, *p);
        } else if constexpr (std::is_same_v<T, json>) {
          if (!p->is_object()) wrong_type(k.path(), "a JSON object", *p);
        } else if constexpr (std::is_same_v<T, std::optional<double>>) {
          if (p->has_value() && !within(k.allowed, **p)) out_of_range(k.path(), json(**p).dump(), allowed_text(k));
        } else {
          if constexpr (std::is_integral_v<T>) {
            if (k.is_enum()) return check_enum(k, std::to_string(*p), std::to_string(*p));
          }
          if (!within(k.allowed, static_cast<double>(*p))) out_of_range(k.path(), json(*p).dump(), allowed_text(k));
        }
      },
      k.field(c));
}

void check_rules(const Config& c) {
  Config copy = c;  // the key accessors take a mutable Config; nothing is written
  for (const auto& rule : config_schema::rules()) {
    if (rule.holds(c)) continue;
    std::string got;
    for (auto path : rule.keys) {
      const Key* k = config_schema::find_key(path);
      got += (got.empty() ? "" : ", ") + std::string(path) + " = " + get_value(*k, copy).dump();
    }
    fail("config: ", rule.text, "; got ", got);
  }
}

// ---- files and overrides --------------------------------------------------------------

// A string key takes the text as written (`run.dir=2024` is "2024"), unless
// it is a quoted JSON string; other keys take the JSON value when it parses.
json override_value(const Key& k, const std::string& text) {
  json parsed = json::parse(text, nullptr, /*allow_exceptions=*/false);
  bool string_key = std::holds_alternative<std::string*>(probe_field(k));
  if (parsed.is_discarded() || (string_key && !parsed.is_string())) return json(text);
  return parsed;
}

// The attention section accepts the stages' spelling of docs/attention.md:
// "sharpen": {"p": P, "offset_rows": K}, or "none" / null / false for no
// re-weighting; it stands for the keys "p" and "offset_rows".
json expand_attention_shorthand(const json& body) {
  if (!body.contains("sharpen")) return body;
  json out = body;
  const json sharpen = out["sharpen"];
  out.erase("sharpen");
  auto set_once = [&](const std::string& key, const json& v) {
    if (out.contains(key))
      fail("config: \"attention.sharpen\" and \"attention.", key, "\" both set the re-weighting; use one");
    out[key] = v;
  };
  if (sharpen.is_null() || sharpen == json(false) || sharpen == json("none")) {
    set_once("p", 0);
  } else if (sharpen.is_object()) {
    for (const auto& [k, v] : sharpen.items()) {
      if (k != "p" && k != "offset_rows")
        fail("config: unknown key \"attention.sharpen.", k, "\"; valid keys in \"attention.sharpen\": p, offset_rows");
      set_once(k, v);
    }
  } else {
    fail("config: \"attention.sharpen\" must be {\"p\": P, \"offset_rows\": K} or \"none\", got ", describe(sharpen));
  }
  return out;
}

}  // namespace

void validate_config(const Config& c) {
  Config copy = c;
  for (const Key& k : config_schema::keys()) check_value(k, copy);
  check_rules(c);
  check_layer_plan(c);
}

void check_config_rules(const Config& c) { check_rules(c); }

AttentionConfig attention_config_from_json(const json& body, const std::string& where) {
  if (!body.is_object())
    fail("config: \"", where, "\" must be an attention section (a JSON object), got ", describe(body));
  Config c;
  try {
    const json expanded = expand_attention_shorthand(body);
    for (const auto& [name, value] : expanded.items()) {
      const Key* k = config_schema::find_key("attention", name);
      if (!k) fail("config: unknown key \"", name, "\"; valid keys: ", config_schema::key_list("attention"));
      set_value(*k, c, value);
    }
    for (const Key& k : config_schema::keys())
      if (k.section == "attention") check_value(k, c);
  } catch (const Error& e) {
    throw Error("\"" + where + "\": " + e.what());
  }
  return c.attention;
}

Config config_from_json(const json& j) {
  if (!j.is_object()) fail("config: the top level must be a JSON object, got ", describe(j));
  Config c;
  for (const auto& [section, body] : j.items()) {
    if (!is_section(section)) unknown_section(section);
    if (!body.is_object()) fail("config: section \"", section, "\" must be an object, got ", describe(body));
    const json expanded = section == "attention" ? expand_attention_shorthand(body)
                          : section == "model"   ? expand_block_preset(body)
                                                 : body;
    for (const auto& [name, value] : expanded.items()) {
      const Key* k = config_schema::find_key(section, name);
      if (!k) unknown_key(section, name);
      set_value(*k, c, value);
    }
  }
  validate_config(c);
  return c;
}

void apply_override(json& j, const std::string& assignment) {
  auto eq = assignment.find('=');
  if (eq == std::string::npos) fail("config: override \"", assignment, "\" has no '='; expected section.key=value");
  const std::string path = assignment.substr(0, eq);
  auto dot = path.find('.');
  if (dot == std::string::npos || path.find('.', dot + 1) != std::string::npos)
    fail("config: override path \"", path, "\" is not section.key; valid sections: ", config_schema::section_list());
  const std::string section = path.substr(0, dot), name = path.substr(dot + 1);
  if (!is_section(section)) unknown_section(section);
  const Key* k = config_schema::find_key(section, name);
  if (!k) unknown_key(section, name);

  if (j.is_null()) j = json::object();
  if (!j.is_object()) fail("config: the top level must be a JSON object, got ", describe(j));
  json& body = j[section];
  if (body.is_null()) body = json::object();
  if (!body.is_object()) fail("config: section \"", section, "\" must be an object, got ", describe(body));
  body[name] = override_value(*k, assignment.substr(eq + 1));
}

namespace {

// A config file may start from another: "extends": "PATH" (relative to the
// file's folder) is read first, itself perhaps extending another (at most
// kMaxExtends files deep), and the file's own sections are laid over it key
// by key (a key's value, an object such as model.layer_kinds included,
// replaces the base's whole).
constexpr int kMaxExtends = 8;
json read_config_file(const std::string& path, int depth) {
  json j = read_json_file(path, "config");
  if (!j.is_object() || !j.contains("extends")) return j;
  const json ext = j["extends"];
  GPT_CHECK(ext.is_string() && !ext.get<std::string>().empty(), "config: \"extends\" in \"", path,
            "\" must name another config file (a path relative to this one), got ", ext.dump());
  GPT_CHECK(depth < kMaxExtends, "config: \"extends\" in \"", path, "\" goes more than ", kMaxExtends,
            " files deep; a file that extends itself (through others) never ends");
  const std::string base_path =
      (std::filesystem::path(path).parent_path() / ext.get<std::string>()).lexically_normal().string();
  json merged = read_config_file(base_path, depth + 1);
  GPT_CHECK(merged.is_object(), "config: \"", base_path, "\" (extended by \"", path, "\") is not a JSON object");
  j.erase("extends");
  for (const auto& [section, body] : j.items()) {
    if (body.is_object() && merged.contains(section) && merged[section].is_object()) {
      for (const auto& [key, value] : body.items()) merged[section][key] = value;
    } else {
      merged[section] = body;  // a new section, or a non-object the validation will name
    }
  }
  return merged;
}

}  // namespace

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  json j = path.empty() ? json::object() : read_config_file(path, 0);
  for (const auto& o : overrides) apply_override(j, o);
  if (path.empty()) return config_from_json(j);
  try {
    return config_from_json(j);
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + " (in config file \"" + path + "\"" +
                (overrides.empty() ? "" : " with overrides") + ")");
  }
}

json config_to_json(const Config& c) {
  Config copy = c;  // the key accessors take a mutable Config; nothing is written
  json j = json::object();
  for (const Key& k : config_schema::keys()) j[std::string(k.section)][std::string(k.name)] = get_value(k, copy);
  return j;
}

std::string config_reference_markdown() {
  auto cell = [](std::string s) {  // a '|' would end the table cell
    std::string out;
    for (char ch : s) out += ch == '|' ? std::string("\\|") : std::string(1, ch);
    return out;
  };
  Config defaults;
  std::ostringstream md;
  md << "| key | type | default | allowed | description |\n";
  md << "|---|---|---|---|---|\n";
  for (const Key& k : config_schema::keys()) {
    md << "| `" << k.path() << "` | " << type_name(k) << " | `" << cell(get_value(k, defaults).dump()) << "` | "
       << cell(allowed_text(k)) << " | " << cell(std::string(k.help)) << " |\n";
  }
  md << "\nCross-field rules:\n\n";
  for (const auto& rule : config_schema::rules()) md << "- " << cell(std::string(rule.text)) << "\n";
  return md.str();
}

}  // namespace gpt
