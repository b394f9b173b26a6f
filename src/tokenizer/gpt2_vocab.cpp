// Loads GPT-2's released vocabulary: DIR/encoder.json (token string -> id) and
// DIR/vocab.bpe ("#version" line, then one merge "A B" per line, highest
// priority first). Token strings spell bytes through GPT-2's bytes_to_unicode
// table: printable Latin-1 bytes stand for themselves, the other 68 bytes for
// the code points 256, 257, ... in byte order.
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "core/check.h"
#include "core/json.h"
#include "tokenizer/bpe.h"

namespace fs = std::filesystem;

namespace gpt {

// byte -> the code point GPT-2 writes it as.
std::array<uint32_t, 256> byte_to_code_point() {
  std::array<uint32_t, 256> cp{};
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    cp[b] = printable ? b : next++;
  }
  return cp;
}

std::string byte_token_string(int b) {
  // The table's code points are below 0x800: one or two UTF-8 bytes.
  const uint32_t cp = byte_to_code_point()[static_cast<size_t>(b)];
  if (cp < 0x80) return std::string(1, static_cast<char>(cp));
  return {static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
}

namespace {

// Decodes one UTF-8 code point at s[i], advancing i; false if malformed.
bool next_code_point(const std::string& s, size_t& i, uint32_t& cp) {
  const auto c = static_cast<unsigned char>(s[i]);
  int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (len == 0 || i + len > s.size()) return false;
  cp = len == 1 ? c : c & (0x7F >> len);
  for (int k = 1; k < len; ++k) {
    const auto d = static_cast<unsigned char>(s[i + k]);
    if ((d >> 6) != 2) return false;
    cp = (cp << 6) | (d & 0x3F);
  }
  i += len;
  return true;
}

}  // namespace

bool token_string_to_bytes(const std::string& s, const std::unordered_map<uint32_t, char>& to_byte, std::string& out) {
  out.clear();
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = 0;
    if (!next_code_point(s, i, cp)) return false;
    const auto it = to_byte.find(cp);
    if (it == to_byte.end()) return false;
    out.push_back(it->second);
  }
  return !out.empty();
}

namespace {

std::string read_file(const fs::path& path, const char* what) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec))
    fail("GPT-2 ", what, " '", path.string(), "': does not exist or is not a regular file");
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  if (!in || in.bad()) fail("GPT-2 ", what, " '", path.string(), "': cannot read");
  return std::move(s).str();
}

}  // namespace

std::unordered_map<uint32_t, char> code_point_to_byte() {
  std::unordered_map<uint32_t, char> to_byte;
  const auto cps = byte_to_code_point();
  for (int b = 0; b < 256; ++b) to_byte[cps[b]] = static_cast<char>(b);
  return to_byte;
}

std::unique_ptr<BpeTokenizer> load_gpt2_tokenizer(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    fail("tokenizer 'gpt2:", dir, "': '", dir, "' is not a folder (it must hold encoder.json and vocab.bpe)");
  const fs::path enc_path = fs::path(dir) / "encoder.json", bpe_path = fs::path(dir) / "vocab.bpe";
  const std::string enc_name = enc_path.string(), bpe_name = bpe_path.string();

  const std::unordered_map<uint32_t, char> to_byte = code_point_to_byte();

  // encoder.json: every id 0..n-1 exactly once.
  const nlohmann::json enc =
      parse_json(read_file(enc_path, "encoder"), "GPT-2 encoder '" + enc_name + "'", {.comments = false});
  if (!enc.is_object() || enc.empty()) fail("GPT-2 encoder '", enc_name, "': must be a non-empty JSON object");
  BpeVocab v;
  const size_t n = enc.size();
  v.tokens.assign(n, std::string());
  std::vector<bool> seen(n, false);
  std::unordered_map<std::string, uint32_t> id_of;  // GPT-2 token string -> id
  id_of.reserve(n);
  bool have_eot = false;
  for (const auto& [str, val] : enc.items()) {
    if (!val.is_number_unsigned() || val.get<uint64_t>() >= n)
      fail("GPT-2 encoder '", enc_name, "': token ", nlohmann::json(str).dump(), " has id ", val.dump(),
           "; ids must be the integers 0..", n - 1);
    const auto id = val.get<uint32_t>();
    if (seen[id]) fail("GPT-2 encoder '", enc_name, "': id ", id, " is given to two tokens");
    seen[id] = true;
    id_of[str] = id;
    if (str == kEndOfTextText) {
      v.end_of_text = id;
      have_eot = true;
    } else if (!token_string_to_bytes(str, to_byte, v.tokens[id])) {
      fail("GPT-2 encoder '", enc_name, "': token ", nlohmann::json(str).dump(), " (id ", id,
           ") is not a byte-level token (a character outside GPT-2's byte table)");
    }
  }
  if (!have_eot) fail("GPT-2 encoder '", enc_name, "': has no \"<|endoftext|>\" token");
  for (int b = 0; b < 256; ++b) {
    const auto it = id_of.find(byte_token_string(b));
    if (it == id_of.end()) fail("GPT-2 encoder '", enc_name, "': byte ", b, " has no single-byte token");
    v.byte_id[b] = it->second;
  }

  // vocab.bpe: merges by rank.
  const std::string bpe = read_file(bpe_path, "merges file");
  std::istringstream lines(bpe);
  std::string line;
  size_t line_no = 0;
  while (std::getline(lines, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (line_no == 1 && line.rfind("#version", 0) == 0)) continue;
    const size_t sp = line.find(' ');
    if (sp == std::string::npos || sp == 0 || sp + 1 == line.size() || line.find(' ', sp + 1) != std::string::npos)
      fail("GPT-2 merges file '", bpe_name, "' line ", line_no, ": expected two tokens separated by one space, got \"",
           line, "\" (truncated?)");
    const std::string a = line.substr(0, sp), b = line.substr(sp + 1);
    BpeMerge m;
    for (auto [str, dst] : {std::pair{&a, &m.left}, {&b, &m.right}}) {
      const auto it = id_of.find(*str);
      if (it == id_of.end())
        fail("GPT-2 merges file '", bpe_name, "' line ", line_no, ": token \"", *str, "\" is not in ", enc_name);
      *dst = it->second;
    }
    const auto it = id_of.find(a + b);
    if (it == id_of.end())
      fail("GPT-2 merges file '", bpe_name, "' line ", line_no, ": the merged token \"", a + b, "\" is not in ",
           enc_name);
    m.result = it->second;
    v.merges.push_back(m);
  }
  if (v.merges.empty()) fail("GPT-2 merges file '", bpe_name, "': holds no merges");
  return std::make_unique<BpeTokenizer>("gpt2:" + dir, std::move(v),
                                        "GPT-2 vocabulary '" + dir + "' (" + bpe_name + ")");
}

}  // namespace gpt
