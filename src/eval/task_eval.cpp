#include "eval/task_eval.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "core/check.h"
#include "data/rng.h"

namespace gpt {

RetrievalScores score_retrieval(Model<float>& model, int L, int cells, int samples, int64_t batch_tokens,
                                const std::function<RetrievalExample(int)>& make) {
  RetrievalScores sc{std::vector<double>(cells, 0.0), std::vector<double>(cells, 0.0)};
  const int n = cells * samples;
  const int B = static_cast<int>(std::clamp<int64_t>(batch_tokens / L, 1, std::max(n, 1)));
  std::vector<int32_t> batch, pred;
  std::vector<std::vector<SyntheticAnswer>> answers;
  for (int first = 0; first < n; first += B) {
    const int nb = std::min(B, n - first);
    batch.clear();
    answers.clear();
    for (int k = first; k < first + nb; ++k) {
      RetrievalExample ex = make(k);
      GPT_CHECK(static_cast<int>(ex.tokens.size()) == L, "retrieval: example ", k, " has ", ex.tokens.size(),
                " tokens, not ", L);
      batch.insert(batch.end(), ex.tokens.begin(), ex.tokens.end());
      answers.push_back(std::move(ex.answers));
    }
    model.forward_argmax(batch.data(), nb, L, pred);
    for (int b = 0; b < nb; ++b) {
      const auto& a = answers[b];
      int right = 0;
      // Position t predicts token t + 1.
      for (const SyntheticAnswer& x : a) right += pred[static_cast<size_t>(b) * L + x.position - 1] == x.token;
      const int c = (first + b) / samples;
      sc.exact[c] += !a.empty() && right == static_cast<int>(a.size());
      sc.token_accuracy[c] += a.empty() ? 0.0 : static_cast<double>(right) / a.size();
    }
  }
  for (int c = 0; c < cells; ++c) {
    sc.exact[c] /= samples;
    sc.token_accuracy[c] /= samples;
  }
  return sc;
}

TaskEvalResult evaluate_task(Model<float>& model, const SyntheticTask& task, const TaskEvalConfig& cfg,
                             int trained_context, int64_t batch_tokens) {
  GPT_CHECK(!cfg.multiples.empty(), "eval --task ", task.name(), ": need at least one multiple");
  GPT_CHECK(cfg.samples >= 1, "eval --task ", task.name(), ": samples must be >= 1, got ", cfg.samples);
  GPT_CHECK(task.vocab_size() <= model.config().vocab_size, "eval --task ", task.name(), ": the task's ids need a ",
            "vocabulary of ", task.vocab_size(), " but the model has ", model.config().vocab_size,
            "; evaluate a model trained on this task's data");
  TaskEvalResult res;
  res.task = task.to_json();
  res.trained_context = trained_context;
  res.config = cfg;
  res.has_depth = task.has_depth();
  if (res.has_depth) {
    GPT_CHECK(!cfg.depths.empty(), "eval --task ", task.name(), ": need at least one depth");
    for (double d : cfg.depths)
      GPT_CHECK(d >= 0 && d <= 1, "eval --task ", task.name(), ": depths must lie in [0, 1], got ", d);
  }
  const std::vector<double> cells = res.has_depth ? cfg.depths : std::vector<double>{-1.0};
  const int nc = static_cast<int>(cells.size());
  for (int m : cfg.multiples) {
    GPT_CHECK(m >= 1, "eval --task ", task.name(), ": multiples must be >= 1, got ", m);
    const auto t0 = std::chrono::steady_clock::now();
    const int L = m * trained_context;
    GPT_CHECK(L >= task.min_length(m), "eval --task ", task.name(), ": examples of ", L, " tokens at ", m,
              "x are shorter than the ", task.min_length(m), " the task's options ", task.options().dump(), " need");
    // Example (cell, sample) of this multiple: its own seed, so a cell's
    // examples do not depend on the batch size or the other cells.
    RetrievalScores sc = score_retrieval(model, L, nc, cfg.samples, batch_tokens, [&](int k) {
      Rng rng(synthetic_seed(cfg.seed, static_cast<uint64_t>(m), static_cast<uint64_t>(k)));
      SyntheticExample ex = task.make(L, m, cells[k / cfg.samples], SyntheticSplit::kVal, rng);
      std::vector<SyntheticAnswer> answers = task.answers(ex.tokens);  // the checker, not the generator's mask
      return RetrievalExample{std::move(ex.tokens), std::move(answers)};
    });
    std::vector<double>&exact = sc.exact, &tokacc = sc.token_accuracy;
    const int n = nc * cfg.samples;
    double me = 0, mt = 0;
    for (int c = 0; c < nc; ++c) {
      me += exact[c] / nc;
      mt += tokacc[c] / nc;
    }
    res.exact.push_back(exact);
    res.token_accuracy.push_back(tokacc);
    res.mean_exact.push_back(me);
    res.mean_token_accuracy.push_back(mt);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    spdlog::info("{} {:>2}x ({} tokens): exact match {:.3f}, token accuracy {:.3f} over {} examples ({:.1f} s)",
                 task.name(), m, L, me, mt, n, secs);
  }
  return res;
}

int effective_multiple(const std::vector<int>& multiples, const std::vector<double>& scores, double keep) {
  GPT_CHECK(multiples.size() == scores.size(), "effective_multiple: ", multiples.size(), " multiples but ",
            scores.size(), " scores");
  const auto one = std::find(multiples.begin(), multiples.end(), 1);
  if (one == multiples.end() || !(scores[one - multiples.begin()] > 0)) return 0;
  const double floor = keep * scores[one - multiples.begin()];
  int best = 1;
  std::vector<size_t> order(multiples.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return multiples[a] < multiples[b]; });
  for (size_t i : order) {
    if (multiples[i] <= 1) continue;
    if (scores[i] < floor) break;
    best = multiples[i];
  }
  return best;
}

nlohmann::json effective_multiple_json(int m) { return m > 0 ? nlohmann::json(m) : nlohmann::json(nullptr); }
std::string effective_multiple_text(int m) {
  return m > 0 ? std::to_string(m) + "x" : std::string("undefined (no 1x score)");
}

nlohmann::json TaskEvalResult::to_json() const {
  nlohmann::json rows = nlohmann::json::array();
  for (size_t i = 0; i < config.multiples.size(); ++i) {
    nlohmann::json cells = nlohmann::json::array();
    for (size_t c = 0; c < exact[i].size(); ++c) {
      nlohmann::json cell = {{"exact", exact[i][c]}, {"token_accuracy", token_accuracy[i][c]}};
      cell["depth"] = has_depth ? nlohmann::json(config.depths[c]) : nlohmann::json("random");
      cells.push_back(cell);
    }
    rows.push_back({{"multiple", config.multiples[i]},
                    {"context", config.multiples[i] * trained_context},
                    {"exact", mean_exact[i]},
                    {"token_accuracy", mean_token_accuracy[i]},
                    {"cells", cells}});
  }
  return {{"task", task["task"]},
          {"options", task["options"]},
          {"vocab_size", task["vocab_size"]},
          {"base", task["base"]},
          {"trained_context", trained_context},
          {"samples", config.samples},
          {"seed", config.seed},
          {"scoring", "teacher-forced argmax at every answer token (the task's checker)"},
          {"effective_multiple", effective_json()},
          {"multiples", rows}};
}

std::string TaskEvalResult::table() const {
  std::string out;
  char buf[64];
  for (int which = 0; which < 2; ++which) {
    const auto& grid = which == 0 ? exact : token_accuracy;
    out += std::string(task["task"].get<std::string>()) + (which == 0 ? " exact match" : " token accuracy") +
           (has_depth ? " (rows: depth; columns: context multiple)\n  depth" : " (columns: context multiple)\n       ");
    for (int m : config.multiples) {
      std::snprintf(buf, sizeof buf, " %6dx", m);
      out += buf;
    }
    out += "\n";
    for (size_t c = 0; c < grid.front().size(); ++c) {
      if (has_depth)
        std::snprintf(buf, sizeof buf, "  %5.2f", config.depths[c]);
      else
        std::snprintf(buf, sizeof buf, "    all");
      out += buf;
      for (size_t i = 0; i < config.multiples.size(); ++i) {
        std::snprintf(buf, sizeof buf, " %7.3f", grid[i][c]);
        out += buf;
      }
      out += "\n";
    }
    if (has_depth && grid.front().size() > 1) {
      out += "   mean";
      for (size_t i = 0; i < config.multiples.size(); ++i) {
        std::snprintf(buf, sizeof buf, " %7.3f", which == 0 ? mean_exact[i] : mean_token_accuracy[i]);
        out += buf;
      }
      out += "\n";
    }
  }
  out += "effective length (every multiple up to it keeps >= " + std::to_string(static_cast<int>(kEffectiveKeep * 100)) +
         "% of the 1x score): exact match " +
         effective_multiple_text(effective_multiple(config.multiples, mean_exact)) + ", token accuracy " +
         effective_multiple_text(effective_multiple(config.multiples, mean_token_accuracy)) + "\n";
  return out;
}

nlohmann::json TaskEvalResult::effective_json() const {
  return {{"keep", kEffectiveKeep},
          {"exact", effective_multiple_json(effective_multiple(config.multiples, mean_exact))},
          {"token_accuracy", effective_multiple_json(effective_multiple(config.multiples, mean_token_accuracy))}};
}

}  // namespace gpt
