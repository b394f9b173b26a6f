#include "eval/extrapolation.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>

#include <spdlog/spdlog.h>

#include "core/check.h"
#include "eval/longppl.h"
#include "model/block_parts.h"

namespace gpt {

void check_eval_contexts(const ModelConfig& model, const EvalConfig& eval, int trained_context) {
  if (model.position != "learned") return;
  for (int m : eval.multiples) {
    const int64_t ctx = static_cast<int64_t>(m) * trained_context;
    GPT_CHECK(ctx <= model.position_rows(), "evaluation at ", m, "x the training context (", ctx,
              " tokens) is impossible with learned positions: the position table has ", model.position_rows(),
              " rows. Use position \"rope\" or \"none\", raise model.max_position, or drop that multiple from "
              "eval.multiples");
  }
}

void check_eval_feasible(uint64_t val_tokens, const EvalConfig& eval, int trained_context) {
  const int64_t span = eval_span(eval, trained_context);
  if (!eval.multiples.empty()) {
    const int max_m = eval.multiples.back();
    const int64_t longest = static_cast<int64_t>(max_m) * trained_context;
    GPT_CHECK(longest <= span, "eval: ", max_m, "x the context of ", trained_context, " (", longest,
              " tokens) does not fit in the scored window eval.span = ", span,
              "; raise eval.span (gpt eval --span) to at least ", longest);
  }
  GPT_CHECK(eval.tokens >= span, "eval.tokens = ", eval.tokens, " is less than one scored window (eval.span = ", span,
            " tokens); raise eval.tokens or lower eval.span");
  GPT_CHECK(static_cast<int64_t>(val_tokens) >= span + 1, "the validation data has ", val_tokens,
            " tokens; one scored window of eval.span = ", span, " tokens needs at least ", span + 1,
            " (its inputs plus its last target); lower eval.span (gpt eval --span) or use more validation data");
}

nlohmann::json EvalLayout::to_json() const {
  nlohmann::json j = {{"protocol", protocol},
                      {"span", span},
                      {"windows", starts.size()},
                      {"validation_tokens", validation_tokens},
                      {"starts", starts}};
  if (protocol == "sliding") j["stride"] = stride;
  if (documents >= 0) j["documents_found"] = documents;
  return j;
}

EvalText eval_text(const Tokenizer& tok) {
  EvalText t;
  t.tokenizer = tok.spec();
  t.separator = static_cast<int32_t>(tok.end_of_text());
  t.bytes.resize(tok.vocab_size());
  for (uint32_t id = 0; id < tok.vocab_size(); ++id)
    t.bytes[id] = id == tok.end_of_text() ? 0 : static_cast<uint32_t>(tok.token_bytes(id).size());
  return t;
}

EvalText eval_text(const std::string& tokenizer_spec, int vocab_size, bool above_text) {
  const auto tok = make_tokenizer(tokenizer_spec);
  const int64_t n = tok->vocab_size();
  if (above_text)
    GPT_CHECK(n <= vocab_size, "tokenizer \"", tokenizer_spec, "\" has ", n,
              " ids, more than the model's vocabulary (model.vocab_size) of ", vocab_size);
  else
    GPT_CHECK(n == vocab_size, "tokenizer \"", tokenizer_spec, "\" has ", n,
              " ids but the model's vocabulary (model.vocab_size) is ", vocab_size,
              ": it is not the tokenizer of these shards");
  EvalText t = eval_text(*tok);
  t.bytes.resize(static_cast<size_t>(vocab_size), 0);  // a mixed task's ids: no bytes
  return t;
}

std::optional<EvalText> load_eval_text(const std::string& tokenizer_spec, int vocab_size, const EvalConfig& eval,
                                       bool above_text) {
  try {
    return eval_text(tokenizer_spec, vocab_size, above_text);
  } catch (const Error& e) {
    GPT_CHECK(eval.protocol != "documents",
              "eval.protocol \"documents\" needs the tokenizer of the shards to find "
              "their document separator: ",
              e.what());
    spdlog::warn("eval: bits per byte left out: {}", e.what());
    return std::nullopt;
  }
}

EvalLayout eval_layout(const TokenStream& val, const EvalConfig& eval, int trained_context, int32_t separator) {
  check_eval_feasible(val.size(), eval, trained_context);
  EvalLayout lay;
  lay.protocol = eval.protocol;
  lay.span = eval_span(eval, trained_context);
  lay.stride = eval.protocol == "sliding" ? eval_stride(eval, trained_context) : 0;
  lay.validation_tokens = val.size();
  const int64_t wanted = eval.tokens / lay.span;
  const int64_t available = static_cast<int64_t>(val.size()) - 1;  // the last token is a target only
  if (eval.protocol != "documents") {
    // Windows spread evenly over the stream (its text need not be
    // homogeneous: a contiguous prefix would measure only its first part).
    // With loss masks the windows start at multiples of T, where the
    // examples of gpt data synthetic begin (so each 1x sequence is one).
    const int64_t T = trained_context;
    const int64_t unit = val.has_masks() ? (lay.span + T - 1) / T * T : lay.span;
    const int64_t windows = std::max<int64_t>(1, std::min(wanted, available / unit));  // one fits (checked)
    int64_t stride = available / windows;  // >= unit, so windows do not overlap
    if (val.has_masks()) stride = stride / T * T;
    for (int64_t k = 0; k < windows; ++k) lay.starts.push_back(static_cast<uint64_t>(k * stride));
    if (windows < wanted)
      spdlog::warn(
          "eval: the validation data ({} tokens) holds {} windows of eval.span = {} tokens, not the {} "
          "eval.tokens = {} asks for; scoring {} tokens per multiple",
          val.size(), windows, lay.span, wanted, eval.tokens, windows * lay.span);
    return lay;
  }
  GPT_CHECK(separator >= 0,
            "eval.protocol \"documents\" needs the end-of-text id that separates documents: give "
            "the tokenizer of the shards (data.tokenizer)");
  // Every separator opens a document; one that holds a whole span (span
  // tokens before the next separator or the stream's end) qualifies.
  std::vector<uint64_t> found;
  const uint64_t n = val.size();
  std::vector<int32_t> buf;
  int64_t open = -1;                // position of the separator opening the current document
  auto close = [&](uint64_t end) {  // the document [open + 1, end)
    if (open >= 0 && static_cast<int64_t>(end) - open - 1 >= lay.span) found.push_back(static_cast<uint64_t>(open));
  };
  constexpr uint64_t kChunk = 1 << 20;
  for (uint64_t pos = 0; pos < n; pos += kChunk) {
    const uint64_t len = std::min(kChunk, n - pos);
    buf.resize(len);
    val.read(pos, len, buf.data());
    for (uint64_t i = 0; i < len; ++i)
      if (buf[i] == separator) {
        close(pos + i);
        open = static_cast<int64_t>(pos + i);
      }
  }
  close(n);
  lay.documents = static_cast<int64_t>(found.size());
  GPT_CHECK(lay.documents >= wanted, "eval.protocol \"documents\": the validation data (", n, " tokens) has ",
            lay.documents, " document(s) of at least eval.span = ", lay.span, " tokens (each opened by end-of-text id ",
            separator, "); eval.tokens = ", eval.tokens, " asks for ", wanted, ". Lower eval.tokens to at most ",
            lay.documents * lay.span, lay.documents > 0 ? "" : " (no document qualifies: lower eval.span)",
            ", lower eval.span, or use a corpus of longer documents (scripts/prepare_vimdoc.sh)");
  for (int64_t k = 0; k < wanted; ++k) lay.starts.push_back(found[static_cast<size_t>(k * lay.documents / wanted)]);
  return lay;
}

std::vector<EvalPiece> eval_pieces(const EvalLayout& layout, int L) {
  std::vector<EvalPiece> out;
  const int64_t W = layout.span;
  GPT_CHECK(L >= 1 && L <= W, "eval: context ", L, " does not fit in the span ", W);
  for (size_t k = 0; k < layout.starts.size(); ++k) {
    const int64_t p = static_cast<int64_t>(layout.starts[k]);
    if (layout.protocol == "llamacpp") {
      // llama.cpp's perplexity: each chunk scores its second half's predictions
      // of tokens inside the chunk (logits first .. L − 2, first = L/2).
      GPT_CHECK(L >= 4, "eval: protocol llamacpp needs a context of at least 4 tokens (half of it scored), got ", L);
      for (int64_t j = 0; j + L <= W; j += L)
        out.push_back({static_cast<uint64_t>(p + j), L / 2, L - 1, static_cast<int>(k)});
      continue;
    }
    if (layout.protocol != "sliding") {
      for (int64_t j = 0; j + L <= W; j += L) out.push_back({static_cast<uint64_t>(p + j), 0, L, static_cast<int>(k)});
      continue;
    }
    const int64_t S = std::min<int64_t>(layout.stride, L);
    int64_t prev = p;  // scored so far: [p, prev)
    while (prev < p + W) {
      int64_t e = std::min(prev + S, p + W);
      int64_t ws = e - L;
      if (ws < 0) ws = 0, e = L;  // the stream's first tokens: one sequence from 0, scored from prev
      out.push_back(
          {static_cast<uint64_t>(ws), static_cast<int>(prev - ws), static_cast<int>(e - ws), static_cast<int>(k)});
      prev = e;
    }
  }
  return out;
}

double ratio_standard_error(const std::vector<double>& num, const std::vector<double>& den) {
  double sn = 0, sd = 0;
  int n = 0;
  for (size_t k = 0; k < num.size(); ++k)
    if (den[k] > 0) sn += num[k], sd += den[k], ++n;
  if (n < 2) return std::numeric_limits<double>::quiet_NaN();
  const double r = sn / sd, mean_den = sd / n;
  double ss = 0;
  for (size_t k = 0; k < num.size(); ++k)
    if (den[k] > 0) ss += (num[k] - r * den[k]) * (num[k] - r * den[k]);
  return std::sqrt(ss / (static_cast<double>(n) * (n - 1))) / mean_den;
}

ExtrapolationResult evaluate_extrapolation(Model<float>& model, const TokenStream& val, const EvalConfig& eval,
                                           int trained_context, int64_t batch_tokens, const EvalText* text,
                                           const KeyTokens* key) {
  check_eval_contexts(model.config(), eval, trained_context);
  const int T = trained_context;
  ExtrapolationResult res;
  res.layout = eval_layout(val, eval, T, text ? text->separator : -1);
  const EvalLayout& lay = res.layout;
  GPT_CHECK(!key || (key->span == lay.span && key->mask.size() == lay.starts.size() * static_cast<size_t>(lay.span)),
            "eval: LongPPL's key tokens were judged on another layout than this evaluation's");
  res.longppl = key != nullptr;
  const int K = static_cast<int>(lay.starts.size());
  res.trained_context = T;
  res.tokens_per_multiple = lay.span * K;
  res.n_layer = model.config().n_layer;
  res.n_head = model.config().n_head;
  res.layer_plan = layer_plan_to_json(model.per_layer_attention());
  res.block = block_to_json(model.config());
  for (const LayerAttention& la : model.per_layer_attention()) res.layer_kinds.push_back(la.kind);
  const bool bytes_known = text && !text->bytes.empty();
  const double ln2 = std::log(2.0);
  std::vector<float> losses;
  for (int m : eval.multiples) {
    const auto t0 = std::chrono::steady_clock::now();
    const int L = m * T;
    if (lay.span % L != 0 && lay.protocol != "sliding")
      spdlog::warn("eval: {}x ({} tokens) does not divide eval.span = {}, so it scores {} of every {} tokens", m, L,
                   lay.span, lay.span / L * L, lay.span);
    const std::vector<EvalPiece> pieces = eval_pieces(lay, L);
    const int64_t npieces = static_cast<int64_t>(pieces.size());
    const int B = static_cast<int>(std::clamp<int64_t>(batch_tokens / L, 1, npieces));
    const int nb = std::min(eval.profile_buckets, L);
    // Sums per window (and per bucket and window): the mean is their ratio,
    // the standard error that of a ratio estimator over the windows.
    std::vector<double> w_sum(K, 0.0), w_n(K, 0.0), w_bytes(K, 0.0), w_key(K, 0.0), w_nkey(K, 0.0);
    std::vector<double> b_sum(static_cast<size_t>(nb) * K, 0.0), b_n(b_sum.size(), 0.0);
    double sum_past = 0;
    int64_t n_past = 0;
    std::vector<int32_t> inputs, targets;
    std::vector<double> diag;
    model.collect_attention_diagnostics(&diag);
    for (int64_t s0 = 0; s0 < npieces; s0 += B) {
      const int b = static_cast<int>(std::min<int64_t>(B, npieces - s0));
      inputs.resize(static_cast<size_t>(b) * L);
      targets.resize(inputs.size());
      for (int i = 0; i < b; ++i)  // targets a loss mask does not score are kIgnoreTarget, and skipped
        val.read_example(pieces[s0 + i].start, L, inputs.data() + static_cast<size_t>(i) * L,
                         targets.data() + static_cast<size_t>(i) * L);
      model.forward_losses(inputs.data(), targets.data(), b, L, losses);
      for (int i = 0; i < b; ++i) {
        const EvalPiece& pc = pieces[s0 + i];
        const int k = pc.window;
        for (int t = pc.lo; t < pc.hi; ++t) {
          const size_t at = static_cast<size_t>(i) * L + t;
          if (targets[at] == kIgnoreTarget) continue;
          const double l = losses[at];
          w_sum[k] += l;
          w_n[k] += 1;
          if (bytes_known) w_bytes[k] += text->bytes[static_cast<size_t>(targets[at])];
          if (t >= T) sum_past += l, ++n_past;
          if (key && key->is_key(k, static_cast<int64_t>(pc.start + t) - static_cast<int64_t>(lay.starts[k])))
            w_key[k] += l, w_nkey[k] += 1;
          const size_t bk = static_cast<size_t>(static_cast<int64_t>(t) * nb / L) * K + k;
          b_sum[bk] += l;
          b_n[bk] += 1;
        }
      }
    }
    model.collect_attention_diagnostics(nullptr);
    MultipleResult r;
    r.attention_diag = std::move(diag);
    r.multiple = m;
    r.context = L;
    r.sequences = npieces;
    double sum = 0, n = 0, bytes = 0;
    for (int k = 0; k < K; ++k) {
      sum += w_sum[k], n += w_n[k], bytes += w_bytes[k];
      r.window_losses.push_back(w_sum[k] / w_n[k]);
    }
    r.tokens = static_cast<int64_t>(n);
    r.loss = sum / n;
    r.loss_se = ratio_standard_error(w_sum, w_n);
    if (key) {
      double ks = 0, kn = 0;
      for (int k = 0; k < K; ++k) ks += w_key[k], kn += w_nkey[k];
      r.key_tokens = static_cast<int64_t>(kn);
      r.key_loss = kn > 0 ? ks / kn : std::numeric_limits<double>::quiet_NaN();
      r.key_loss_se = ratio_standard_error(w_key, w_nkey);
    }
    r.loss_past_train = n_past ? sum_past / n_past : std::numeric_limits<double>::quiet_NaN();
    r.bytes = static_cast<int64_t>(bytes);
    const double nan = std::numeric_limits<double>::quiet_NaN();
    r.bits_per_byte = bytes > 0 ? sum / (ln2 * bytes) : nan;
    r.bits_per_byte_se = bytes > 0 ? ratio_standard_error(w_sum, w_bytes) / ln2 : nan;
    for (int q = 0; q < nb; ++q) {
      const std::vector<double> s(b_sum.begin() + static_cast<size_t>(q) * K,
                                  b_sum.begin() + static_cast<size_t>(q + 1) * K);
      const std::vector<double> c(b_n.begin() + static_cast<size_t>(q) * K,
                                  b_n.begin() + static_cast<size_t>(q + 1) * K);
      double ss = 0, cc = 0;
      for (int k = 0; k < K; ++k) ss += s[k], cc += c[k];
      r.profile.push_back(cc > 0 ? ss / cc : nan);
      r.profile_se.push_back(ratio_standard_error(s, c));
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const std::string se = std::isfinite(r.loss_se) ? fmt::format(" ± {:.4f}", r.loss_se) : "";
    if (lay.protocol == "sliding")
      spdlog::info(
          "eval {:>2}x (context {:>6}): loss {:.4f}{}  [{} sequences, {:.1f}x the scored tokens forward, "
          "{:.1f}s]",
          m, L, r.loss, se, npieces, static_cast<double>(npieces) * L / n, secs);
    else
      spdlog::info("eval {:>2}x (context {:>6}): loss {:.4f}{}  [{} sequences, {:.1f}s]", m, L, r.loss, se, npieces,
                   secs);
    res.rows.push_back(std::move(r));
  }
  return res;
}

namespace {

nlohmann::json finite_or_null(double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); }

// The diagnostics' names, in the order of kAttentionDiagStats after the
// entropy: shares of the sink and of the most recent N keys, total weight.
constexpr const char* kDiagNames[] = {"entropy", "sink", "recent", "mass"};
constexpr int kDiagMeans = 4;  // the fifth stat is the row count

// Mean of stat k over the rows of (layer l, head h); over all heads when h < 0.
double diag_mean(const std::vector<double>& d, int n_head, int l, int h, int k) {
  double sum = 0, rows = 0;
  for (int hh = h < 0 ? 0 : h; hh < (h < 0 ? n_head : h + 1); ++hh) {
    const double* s = d.data() + (static_cast<size_t>(l) * n_head + hh) * kAttentionDiagStats;
    sum += s[k];
    rows += s[kDiagRows];
  }
  return rows > 0 ? sum / rows : 0.0;
}

// The largest |σ| (stage 1's score) of (layer l, head h); over all heads when h < 0.
double diag_max_score(const std::vector<double>& d, int n_head, int l, int h) {
  double most = 0;
  for (int hh = h < 0 ? 0 : h; hh < (h < 0 ? n_head : h + 1); ++hh)
    most = std::max(most, d[(static_cast<size_t>(l) * n_head + hh) * kAttentionDiagStats + kDiagMaxScore]);
  return most;
}

nlohmann::json diagnostics_json(const std::vector<double>& d, int n_layer, int n_head,
                                const std::vector<std::string>& kinds) {
  nlohmann::json layers = nlohmann::json::array();
  if (d.size() != static_cast<size_t>(n_layer) * n_head * kAttentionDiagStats) return layers;
  for (int l = 0; l < n_layer; ++l) {
    nlohmann::json layer = {{"layer", l}};
    if (l < static_cast<int>(kinds.size()) && !kinds[l].empty()) layer["kind"] = kinds[l];
    for (int k = 0; k < kDiagMeans; ++k) {
      nlohmann::json per_head = nlohmann::json::array();
      for (int h = 0; h < n_head; ++h) per_head.push_back(diag_mean(d, n_head, l, h, k));
      layer[kDiagNames[k]] = diag_mean(d, n_head, l, -1, k);
      layer[std::string(kDiagNames[k]) + "_per_head"] = per_head;
    }
    nlohmann::json per_head = nlohmann::json::array();
    for (int h = 0; h < n_head; ++h) per_head.push_back(diag_max_score(d, n_head, l, h));
    layer["max_score"] = diag_max_score(d, n_head, l, -1);
    layer["max_score_per_head"] = per_head;
    layers.push_back(layer);
  }
  return layers;
}

}  // namespace

nlohmann::json ExtrapolationResult::to_json() const {
  nlohmann::json rows_json = nlohmann::json::array();
  for (const auto& r : rows) {
    nlohmann::json profile = nlohmann::json::array();
    const int nb = static_cast<int>(r.profile.size());
    for (int k = 0; k < nb; ++k)
      profile.push_back({{"start", static_cast<int64_t>(k) * r.context / nb},
                         {"end", static_cast<int64_t>(k + 1) * r.context / nb},
                         {"loss", finite_or_null(r.profile[k])},
                         {"se", k < static_cast<int>(r.profile_se.size()) ? finite_or_null(r.profile_se[k])
                                                                          : nlohmann::json(nullptr)}});
    rows_json.push_back({{"multiple", r.multiple},
                         {"context", r.context},
                         {"sequences", r.sequences},
                         {"forward_tokens", r.sequences * r.context},
                         {"tokens", r.tokens},
                         {"loss", r.loss},
                         {"loss_se", finite_or_null(r.loss_se)},
                         {"loss_past_train", finite_or_null(r.loss_past_train)},
                         {"bytes", r.bytes},
                         {"bits_per_byte", finite_or_null(r.bits_per_byte)},
                         {"bits_per_byte_se", finite_or_null(r.bits_per_byte_se)},
                         {"window_losses", r.window_losses},
                         {"longppl", longppl ? nlohmann::json({{"key_tokens", r.key_tokens},
                                                               {"key_loss", finite_or_null(r.key_loss)},
                                                               {"key_loss_se", finite_or_null(r.key_loss_se)},
                                                               {"longppl", finite_or_null(std::exp(r.key_loss))}})
                                             : nlohmann::json(nullptr)},
                         {"profile", profile},
                         {"attention_diagnostics", diagnostics_json(r.attention_diag, n_layer, n_head, layer_kinds)}});
  }
  return {{"trained_context", trained_context},
          {"tokens_per_multiple", tokens_per_multiple},
          {"scored", layout.to_json()},
          {"attention", attention},
          {"layer_plan", layer_plan},
          {"block", block},
          {"multiples", rows_json}};
}

std::string ExtrapolationResult::diagnostics_table() const {
  std::string out;
  char cell[64];
  const char* titles[] = {"entropy (nats)", "sink share", "recent-N share", "largest |score| (max over heads)"};
  const bool planned =
      std::any_of(layer_kinds.begin(), layer_kinds.end(), [](const std::string& k) { return !k.empty(); });
  for (int k = 0; k < 4; ++k) {
    out += std::string(titles[k]) + " by layer:\n";
    if (planned) {  // the per-layer plan's kinds above their columns
      std::snprintf(cell, sizeof cell, "  %-5s", "kind");
      out += cell;
      for (int l = 0; l < n_layer && l < static_cast<int>(layer_kinds.size()); ++l) {
        std::snprintf(cell, sizeof cell, " %7s", layer_kinds[l].c_str());
        out += cell;
      }
      out += "\n";
    }
    for (const auto& r : rows) {
      std::snprintf(cell, sizeof cell, "  %-5s", (std::to_string(r.multiple) + "x").c_str());
      out += cell;
      if (r.attention_diag.size() == static_cast<size_t>(n_layer) * n_head * kAttentionDiagStats)
        for (int l = 0; l < n_layer; ++l) {
          std::snprintf(cell, sizeof cell, " %7.3f",
                        k == 3 ? diag_max_score(r.attention_diag, n_head, l, -1)
                               : diag_mean(r.attention_diag, n_head, l, -1, k));
          out += cell;
        }
      out += "\n";
    }
  }
  return out;
}

std::string ExtrapolationResult::longppl_table() const {
  std::string out = "LongPPL (loss over the key tokens; perplexity exp of it):\n";
  char line[160];
  std::snprintf(line, sizeof line, "%-9s %8s %10s %10s %8s %12s\n", "multiple", "context", "key tokens", "key loss",
                "± se", "LongPPL");
  out += line;
  for (const auto& r : rows) {
    char se[32] = "-";
    if (std::isfinite(r.key_loss_se)) std::snprintf(se, sizeof se, "%.4f", r.key_loss_se);
    std::snprintf(line, sizeof line, "%-9s %8d %10lld %10.4f %8s %12.3f\n", (std::to_string(r.multiple) + "x").c_str(),
                  r.context, static_cast<long long>(r.key_tokens), r.key_loss, se, std::exp(r.key_loss));
    out += line;
  }
  return out;
}

std::string ExtrapolationResult::table() const {
  std::string out;
  char line[160];
  const bool bpb = !rows.empty() && std::isfinite(rows[0].bits_per_byte);
  std::snprintf(line, sizeof line, "%-9s %8s %10s %8s %12s %12s%s\n", "multiple", "context", "loss", "± se",
                "loss past T", "last bucket", bpb ? "  bits/byte" : "");
  out += line;
  auto cell = [](double x, const char* fmt) {
    char c[32] = "-";
    if (std::isfinite(x)) std::snprintf(c, sizeof c, fmt, x);
    return std::string(c);
  };
  for (const auto& r : rows) {
    std::snprintf(line, sizeof line, "%-9s %8d %10.4f %8s %12s %12s", (std::to_string(r.multiple) + "x").c_str(),
                  r.context, r.loss, cell(r.loss_se, "%.4f").c_str(), cell(r.loss_past_train, "%.4f").c_str(),
                  cell(r.profile.empty() ? std::nan("") : r.profile.back(), "%.4f").c_str());
    out += line;
    if (bpb) out += "  " + cell(r.bits_per_byte, "%9.4f");
    out += "\n";
  }
  char foot[200];
  std::snprintf(foot, sizeof foot,
                "(%s protocol, %zu window(s) of %lld tokens%s; ± one standard error over the windows)\n",
                layout.protocol.c_str(), layout.starts.size(), static_cast<long long>(layout.span),
                layout.protocol == "sliding" ? (", stride " + std::to_string(layout.stride)).c_str() : "");
  out += foot;
  return out;
}

}  // namespace gpt
