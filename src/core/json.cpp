#include "core/json.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "core/check.h"
#include "core/files.h"

namespace gpt {
namespace {

using nlohmann::json;

// Builds the document like nlohmann's own DOM parser, keeping the path of
// the value being read (for messages) and refusing nesting past max_depth.
class BoundedDom : public nlohmann::json_sax<json> {
 public:
  BoundedDom(json& root, std::string source, int max_depth)
      : root_(root), source_(std::move(source)), max_depth_(max_depth) {}

  bool null() override { return put(nullptr); }
  bool boolean(bool v) override { return put(v); }
  bool number_integer(number_integer_t v) override { return put(v); }
  bool number_unsigned(number_unsigned_t v) override { return put(v); }
  bool number_float(number_float_t v, const string_t&) override { return put(v); }
  bool string(string_t& v) override { return put(std::move(v)); }
  bool binary(binary_t& v) override { return put(json::binary(std::move(v))); }

  bool start_object(std::size_t) override { return open(json::object()); }
  bool key(string_t& k) override {
    key_.back() = k;
    return true;
  }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override { return open(json::array()); }
  bool end_array() override { return close(); }

  bool parse_error(std::size_t position, const std::string& token, const nlohmann::detail::exception& e) override {
    std::string what = e.what();
    // "[json.exception.parse_error.101] parse error at line 1, column 5: ..." -> the text after the tag.
    const auto tag_end = what.find("] ");
    if (what.rfind("[json.exception", 0) == 0 && tag_end != std::string::npos) what = what.substr(tag_end + 2);
    const std::string at = path();
    if (e.id == 406)  // a number that does not fit a double: the lexer has no line, the path says where
      fail(source_, ": ", at.empty() ? "the value" : at, ": number overflow (", token, "); numbers must fit a double");
    fail(source_, " is not valid JSON: ", what, at.empty() ? "" : " (in " + at + ")", " at byte ", position);
  }

 private:
  // The slot the next value goes to: the root, a new array element or the
  // object member named by the last key.
  bool put(json&& v) {
    if (stack_.empty()) {
      root_ = std::move(v);
      return true;
    }
    json& top = *stack_.back();
    if (top.is_array()) {
      top.push_back(std::move(v));
      ++index_.back();
    } else {
      top[key_.back()] = std::move(v);
    }
    return true;
  }
  bool open(json&& container) {
    if (static_cast<int>(stack_.size()) >= max_depth_) {
      std::string at = path();
      if (at.size() > 60) at = at.substr(0, 60) + "...";
      fail(source_, ": nested deeper than ", max_depth_, " levels", at.empty() ? "" : " (at " + at + ")",
           "; no file this program reads needs that");
    }
    json* slot;
    if (stack_.empty()) {
      root_ = std::move(container);
      slot = &root_;
    } else {
      json& top = *stack_.back();
      if (top.is_array()) {
        top.push_back(std::move(container));
        slot = &top.back();
      } else {
        slot = &(top[key_.back()] = std::move(container));
      }
    }
    stack_.push_back(slot);
    key_.emplace_back();
    index_.push_back(0);
    return true;
  }
  bool close() {
    stack_.pop_back();
    key_.pop_back();
    index_.pop_back();
    if (!index_.empty() && stack_.back()->is_array()) ++index_.back();
    return true;
  }
  // "model.n_embd" or "runs[2].name" for the value being read.
  std::string path() const {
    std::string p;
    for (size_t d = 0; d < stack_.size(); ++d) {
      if (stack_[d]->is_array()) {
        p += "[" + std::to_string(index_[d]) + "]";
      } else if (!key_[d].empty()) {
        p += (p.empty() ? "" : ".") + key_[d];
      }
    }
    return p;
  }

  json& root_;
  std::string source_;
  int max_depth_;
  std::vector<json*> stack_;
  std::vector<std::string> key_;
  std::vector<size_t> index_;
};

}  // namespace

json parse_json(std::string_view text, const std::string& source, const JsonReadOptions& opt) {
  json root;
  BoundedDom dom(root, source, opt.max_depth);
  const bool ok =
      json::sax_parse(text.begin(), text.end(), &dom, json::input_format_t::json, /*strict=*/true, opt.comments);
  GPT_CHECK(ok, source, " is not valid JSON");
  return root;
}

std::string read_text_file(const std::string& path, const std::string& what) {
  if (const char* why = not_a_regular_file(path)) fail(what, ": file \"", path, "\" ", why);
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(what, ": cannot read file \"", path, "\": ", std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) fail(what, ": cannot read file \"", path, "\": ", std::strerror(errno));
  return ss.str();
}

json read_json_file(const std::string& path, const std::string& what, const JsonReadOptions& opt) {
  const std::string text = read_text_file(path, what);
  return parse_json(text, what + ": file \"" + path + "\"", opt);
}

}  // namespace gpt
