// Parallel encoding of spans: group spans (or ~1 MB chunks of long spans) into
// work items, encode the items with OpenMP's dynamic schedule, concatenate.
#include "tokenizer/parallel_encode.h"

#include <omp.h>

#include <atomic>
#include <mutex>

#include "tokenizer/pretokenize.h"

namespace gpt {

namespace {

constexpr size_t kChunkBytes = size_t{1} << 20;

struct Piece {
  size_t begin, end;
  bool end_of_text_before;
};

}  // namespace

std::vector<uint32_t> encode_spans(const Tokenizer& tok, std::string_view text, const std::vector<TextSpan>& spans,
                                   const EncodeProgress& progress) {
  // Work items: runs of pieces of about kChunkBytes; a long span is first cut
  // into chunks at independent cuts, so chunks encode as the span would.
  std::vector<std::vector<Piece>> items(1);
  size_t item_bytes = 0;
  uint64_t total = 0;
  for (const TextSpan& s : spans) {
    const std::string_view span = text.substr(s.begin, s.end - s.begin);
    bool first = true;
    auto add = [&](size_t b, size_t e) {
      items.back().push_back({s.begin + b, s.begin + e, first && s.end_of_text_before});
      first = false;
      item_bytes += e - b;
      if (item_bytes >= kChunkBytes) {
        items.emplace_back();
        item_bytes = 0;
      }
    };
    if (span.empty()) {
      add(0, 0);  // still carries its end-of-text
    } else if (!tok.independent_cuts()) {
      add(0, span.size());  // encoded whole (documents still run in parallel)
    } else {
      for (auto [b, e] : independent_chunks(span, kChunkBytes)) add(b, e);
    }
    total += span.size();
  }

  std::vector<std::vector<uint32_t>> out(items.size());
  std::atomic<uint64_t> done{0};
  std::mutex report;
#pragma omp parallel for schedule(dynamic, 1)
  for (size_t i = 0; i < items.size(); ++i) {
    uint64_t bytes = 0;
    for (const Piece& p : items[i]) {
      if (p.end_of_text_before) out[i].push_back(tok.end_of_text());
      tok.encode_ordinary(text.substr(p.begin, p.end - p.begin), out[i]);
      bytes += p.end - p.begin;
    }
    const uint64_t now = done += bytes;
    if (progress) {
      std::lock_guard<std::mutex> lock(report);
      progress(now, total);
    }
  }

  size_t n = 0;
  for (const auto& o : out) n += o.size();
  std::vector<uint32_t> ids;
  ids.reserve(n);
  for (auto& o : out) {
    ids.insert(ids.end(), o.begin(), o.end());
    std::vector<uint32_t>().swap(o);
  }
  return ids;
}

std::vector<TextSpan> spans_around_end_of_text(std::string_view text) {
  std::vector<TextSpan> spans;
  size_t pos = 0;
  bool eot = false;
  while (true) {
    const size_t at = text.find(kEndOfTextText, pos);
    const size_t end = at == std::string_view::npos ? text.size() : at;
    spans.push_back({pos, end, eot});
    if (at == std::string_view::npos) break;
    pos = at + kEndOfTextText.size();
    eot = true;
  }
  return spans;
}

}  // namespace gpt
