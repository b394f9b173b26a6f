// Hugging Face tokenizer.json (the `tokenizers` library's file) for the
// byte-level BPE models of GPT-2, GPT-NeoX/Pythia, Llama 3, Qwen2/3 and
// SmolLM: docs/hf_models.md §7. What is read:
//   model          {"type": "BPE", "vocab": {token: id}, "merges": ["a b" | ["a", "b"]], "ignore_merges"}
//                  token strings in GPT-2's byte table (bpe.h)
//   pre_tokenizer  ByteLevel (GPT-2's split when use_regex), Split (a regex,
//                  behaviour Isolated), Digits, or a Sequence of them
//   normalizer     none or NFC
//   added_tokens   [{"id", "content", ...}]: tokens matched in the text before BPE
//   post_processor none, ByteLevel, or TemplateProcessing that puts one
//                  special token before the sequence (a BOS)
// plus tokenizer_config.json's bos_token, eos_token and add_bos_token.
// Everything else is refused by name.
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/json.h"
#include "tokenizer/bpe.h"

namespace fs = std::filesystem;

namespace gpt {

namespace {

// Keys of an object that the reader knows; any other is refused.
void only_keys(const nlohmann::json& j, std::initializer_list<const char*> known, const std::string& where) {
  for (const auto& [k, v] : j.items()) {
    bool ok = false;
    for (const char* n : known) ok = ok || k == n;
    GPT_CHECK(ok, where, ": key '", k, "' = ", v.dump(), " is not implemented; refused rather than ignored");
  }
}

bool null_or(const nlohmann::json& j, const char* key, const nlohmann::json& value) {
  return !j.contains(key) || j[key].is_null() || j[key] == value;
}

// One pre-tokenizer of tokenizer.json as split patterns.
void add_splits(const nlohmann::json& p, const std::string& where, std::vector<std::string>& patterns) {
  GPT_CHECK(p.is_object() && p.contains("type") && p["type"].is_string(), where, ": a pre_tokenizer needs a type");
  const std::string type = p["type"];
  const std::string w = where + " (" + type + ")";
  if (type == "Sequence") {
    only_keys(p, {"type", "pretokenizers"}, w);
    GPT_CHECK(p.contains("pretokenizers") && p["pretokenizers"].is_array(), w, ": needs a pretokenizers list");
    for (const auto& q : p["pretokenizers"]) add_splits(q, where, patterns);
  } else if (type == "ByteLevel") {
    only_keys(p, {"type", "add_prefix_space", "trim_offsets", "use_regex"}, w);
    GPT_CHECK(null_or(p, "add_prefix_space", false), w,
              ": add_prefix_space true (a space before the text) is not implemented");
    if (!p.contains("use_regex") || p["use_regex"] == true) patterns.push_back(kGpt2SplitPattern);
  } else if (type == "Split") {
    only_keys(p, {"type", "pattern", "behavior", "invert"}, w);
    GPT_CHECK(null_or(p, "invert", false), w, ": invert true is not implemented");
    GPT_CHECK(p.contains("behavior") && p["behavior"] == "Isolated", w, ": behavior ",
              p.contains("behavior") ? p["behavior"].dump() : "(none)",
              " is not implemented (Isolated: each match its own piece)");
    GPT_CHECK(p.contains("pattern") && p["pattern"].is_object() && p["pattern"].size() == 1, w,
              ": pattern must be {\"Regex\": ...} or {\"String\": ...}");
    const std::string kind = p["pattern"].begin().key();
    const nlohmann::json& value = p["pattern"].begin().value();
    GPT_CHECK(value.is_string(), w, ": the pattern must be a string");
    if (kind == "Regex") {
      patterns.push_back(value.get<std::string>());
    } else if (kind == "String") {
      patterns.push_back("\\Q" + value.get<std::string>() + "\\E");
    } else {
      fail(w, ": pattern kind '", kind, "' is not implemented (Regex or String)");
    }
  } else if (type == "Digits") {
    only_keys(p, {"type", "individual_digits"}, w);
    patterns.push_back(p.value("individual_digits", false) ? "\\p{N}" : "\\p{N}+");
  } else {
    fail(where, ": pre_tokenizer type '", type,
         "' is not implemented (this project reads ByteLevel, Split, Digits and Sequence; Metaspace and "
         "sentencepiece-style tokenizers are not byte-level BPE)");
  }
}

// A token named in tokenizer_config.json: a string or {"content": ...}.
std::string config_token(const nlohmann::json& cfg, const char* key) {
  if (!cfg.contains(key) || cfg[key].is_null()) return "";
  if (cfg[key].is_string()) return cfg[key];
  if (cfg[key].is_object() && cfg[key].contains("content") && cfg[key]["content"].is_string())
    return cfg[key]["content"];
  return "";
}

}  // namespace

std::unique_ptr<BpeTokenizer> load_hf_tokenizer(const std::string& dir) {
  const fs::path path = fs::path(dir) / "tokenizer.json";
  const std::string where = "tokenizer 'hf:" + dir + "' (" + path.string() + ")";
  const nlohmann::json j = parse_json(read_text_file(path.string(), "Hugging Face tokenizer"), where, {.comments = false});
  GPT_CHECK(j.is_object(), where, ": not a JSON object");
  only_keys(j, {"version", "truncation", "padding", "added_tokens", "normalizer", "pre_tokenizer", "post_processor",
                "decoder", "model"},
            where);
  GPT_CHECK(null_or(j, "truncation", nullptr) && null_or(j, "padding", nullptr), where,
            ": truncation and padding settings are not implemented (they change what encode returns)");

  // model
  GPT_CHECK(j.contains("model") && j["model"].is_object(), where, ": has no model object");
  const nlohmann::json& m = j["model"];
  const std::string mw = where + ": model";
  GPT_CHECK(m.value("type", "") == "BPE", mw, ": type ", m.contains("type") ? m["type"].dump() : "(none)",
            " is not implemented; this project reads byte-level BPE (WordPiece, Unigram and WordLevel are not)");
  only_keys(m, {"type", "dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix", "fuse_unk",
                "byte_fallback", "ignore_merges", "vocab", "merges"},
            mw);
  GPT_CHECK(null_or(m, "dropout", nullptr), mw, ": BPE dropout is not implemented");
  GPT_CHECK(null_or(m, "byte_fallback", false), mw,
            ": byte_fallback true (sentencepiece-style BPE, as Llama 2 and TinyLlama) is not implemented");
  GPT_CHECK(null_or(m, "continuing_subword_prefix", "") && null_or(m, "end_of_word_suffix", ""), mw,
            ": subword prefixes and suffixes are not implemented");
  GPT_CHECK(m.contains("vocab") && m["vocab"].is_object() && !m["vocab"].empty(), mw, ": has no vocab");
  GPT_CHECK(m.contains("merges") && m["merges"].is_array(), mw, ": has no merges list");

  BpeOptions opt;
  opt.open_vocabulary = true;
  opt.ignore_merges = m.value("ignore_merges", false);

  // Ids: the vocabulary's, then the added tokens' (which may extend it).
  uint64_t n = 0;
  for (const auto& [tok, id] : m["vocab"].items()) {
    GPT_CHECK(id.is_number_unsigned() && id.get<uint64_t>() < (uint64_t{1} << 31), mw, ": token ",
              nlohmann::json(tok).dump(), " has id ", id.dump(), "; ids must be non-negative integers");
    n = std::max<uint64_t>(n, id.get<uint64_t>() + 1);
  }
  const nlohmann::json added = j.contains("added_tokens") && !j["added_tokens"].is_null()
                                   ? j["added_tokens"]
                                   : nlohmann::json::array();
  GPT_CHECK(added.is_array(), where, ": added_tokens must be a list");
  for (const auto& a : added) {
    GPT_CHECK(a.is_object() && a.contains("id") && a["id"].is_number_unsigned() && a.contains("content") &&
                  a["content"].is_string() && !a["content"].get<std::string>().empty(),
              where, ": every added token needs an id and a non-empty content");
    n = std::max<uint64_t>(n, a["id"].get<uint64_t>() + 1);
  }
  BpeVocab v;
  v.tokens.assign(n, std::string());
  std::vector<bool> has(n, false);
  const auto to_byte = code_point_to_byte();
  std::unordered_map<std::string, uint32_t> id_of;  // token string -> id
  std::vector<uint32_t> spelled_otherwise;           // ids whose string is not in GPT-2's byte table
  for (const auto& [tok, idv] : m["vocab"].items()) {
    const auto id = idv.get<uint32_t>();
    GPT_CHECK(!has[id], mw, ": id ", id, " is given to two tokens");
    has[id] = true;
    id_of[tok] = id;
    if (!token_string_to_bytes(tok, to_byte, v.tokens[id])) {
      v.tokens[id] = tok;
      spelled_otherwise.push_back(id);  // refused below unless it is an added token
    }
  }
  std::set<uint32_t> added_ids;
  for (const auto& a : added) {
    const std::string aw = where + ": added token " + a["content"].dump();
    only_keys(a, {"id", "content", "single_word", "lstrip", "rstrip", "normalized", "special"}, aw);
    GPT_CHECK(null_or(a, "single_word", false) && null_or(a, "lstrip", false) && null_or(a, "rstrip", false), aw,
              ": single_word, lstrip and rstrip matching are not implemented");
    // An added token may take an id of the vocabulary (GPT-2's <|endoftext|>
    // is both); its text is then the content, as the library decodes it.
    const auto id = a["id"].get<uint32_t>();
    const std::string content = a["content"];
    v.tokens[id] = content;
    has[id] = true;
    added_ids.insert(id);
    opt.specials.emplace_back(content, id);
  }
  for (uint32_t id = 0; id < n; ++id)
    GPT_CHECK(has[id], where, ": id ", id, " belongs to no token (ids must run from 0 without gaps)");
  for (uint32_t id : spelled_otherwise)
    GPT_CHECK(added_ids.count(id), mw, ": token ", nlohmann::json(v.tokens[id]).dump(), " (id ", id,
              ") is not spelled in GPT-2's byte table; this is not a byte-level BPE");
  for (int b = 0; b < 256; ++b) {
    const auto it = id_of.find(byte_token_string(b));
    GPT_CHECK(it != id_of.end(), mw, ": byte ", b, " has no single-byte token (a byte-level BPE has all 256)");
    v.byte_id[b] = it->second;
  }
  size_t rank = 0;
  for (const auto& e : m["merges"]) {
    std::string a, b;
    if (e.is_string()) {
      const std::string line = e;
      const size_t sp = line.find(' ');
      GPT_CHECK(sp != std::string::npos && line.find(' ', sp + 1) == std::string::npos, mw, ": merge ", rank, " ",
                e.dump(), " is not two tokens separated by one space");
      a = line.substr(0, sp), b = line.substr(sp + 1);
    } else {
      GPT_CHECK(e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string(), mw, ": merge ", rank, " ",
                e.dump(), " is not a pair of tokens");
      a = e[0], b = e[1];
    }
    BpeMerge mg;
    for (auto [str, dst] : {std::pair{&a, &mg.left}, {&b, &mg.right}}) {
      const auto it = id_of.find(*str);
      GPT_CHECK(it != id_of.end(), mw, ": merge ", rank, " names \"", *str, "\", which is not in the vocabulary");
      *dst = it->second;
    }
    const auto it = id_of.find(a + b);
    GPT_CHECK(it != id_of.end(), mw, ": merge ", rank, " makes \"", a + b, "\", which is not in the vocabulary");
    mg.result = it->second;
    v.merges.push_back(mg);
    ++rank;
  }

  // normalizer, pre_tokenizer, post_processor
  if (j.contains("normalizer") && !j["normalizer"].is_null()) {
    const std::string t = j["normalizer"].value("type", "");
    GPT_CHECK(t == "NFC", where, ": normalizer ", j["normalizer"].dump(), " is not implemented (none or NFC)");
    only_keys(j["normalizer"], {"type"}, where + ": normalizer");
    opt.nfc = true;
  }
  GPT_CHECK(j.contains("pre_tokenizer") && !j["pre_tokenizer"].is_null(), where,
            ": has no pre_tokenizer (a byte-level BPE splits its text first)");
  add_splits(j["pre_tokenizer"], where + ": pre_tokenizer", opt.split_patterns);
  GPT_CHECK(!opt.split_patterns.empty(), where,
            ": the pre_tokenizer never splits the text (ByteLevel with use_regex false and nothing else)");
  std::string template_bos;
  if (j.contains("post_processor") && !j["post_processor"].is_null()) {
    const nlohmann::json& pp = j["post_processor"];
    const std::string t = pp.value("type", "");
    const std::string pw = where + ": post_processor (" + t + ")";
    if (t == "TemplateProcessing") {
      // Accepted: `single` = [SpecialToken X, Sequence A], X being a BOS put
      // before every text.
      const nlohmann::json& single = pp["single"];
      GPT_CHECK(single.is_array() && single.size() == 2 && single[0].contains("SpecialToken") &&
                    single[1].contains("Sequence"),
                pw, ": the single-sequence template ", single.dump(),
                " is not implemented (one special token, then the text)");
      template_bos = single[0]["SpecialToken"].value("id", "");
    } else {
      GPT_CHECK(t == "ByteLevel", pw, ": is not implemented (none, ByteLevel or TemplateProcessing)");
    }
  }

  // tokenizer_config.json: which token starts a document.
  nlohmann::json cfg = nlohmann::json::object();
  const fs::path cfg_path = fs::path(dir) / "tokenizer_config.json";
  std::error_code ec;
  if (fs::exists(cfg_path, ec))
    cfg = parse_json(read_text_file(cfg_path.string(), "Hugging Face tokenizer config"), "'" + cfg_path.string() + "'",
                     {.comments = false});
  std::string bos = config_token(cfg, "bos_token"), eos = config_token(cfg, "eos_token");
  const bool add_bos = cfg.value("add_bos_token", false) || !template_bos.empty();
  if (!template_bos.empty()) bos = template_bos;
  GPT_CHECK(!cfg.value("add_eos_token", false), "'", cfg_path.string(),
            "': add_eos_token true (an EOS after every text) is not implemented");
  auto id_of_token = [&](const std::string& t) -> int64_t {
    for (const auto& [content, id] : opt.specials)
      if (content == t) return id;
    const auto it = id_of.find(t);
    return it == id_of.end() ? -1 : it->second;
  };
  // The document-start token: BOS where the tokenizer puts one before every
  // text (Llama 3), else EOS, else "<|endoftext|>" (GPT-2, Pythia).
  const std::string start = add_bos ? bos : !eos.empty() ? eos : std::string(kEndOfTextText);
  const int64_t start_id = id_of_token(start);
  GPT_CHECK(!start.empty() && start_id >= 0, where, ": the document-start token \"", start,
            "\" (", add_bos ? "BOS" : "EOS", ") is not a token of the vocabulary; tokenizer_config.json's bos_token "
            "and eos_token name it");
  v.end_of_text = static_cast<uint32_t>(start_id);
  return std::make_unique<BpeTokenizer>("hf:" + dir, std::move(v), where, std::move(opt));
}

}  // namespace gpt
