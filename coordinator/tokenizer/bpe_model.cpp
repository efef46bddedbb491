// Loading the BPE vocabulary and merges, and the merge loop (see bpe_model.h).
#include "coordinator/tokenizer/bpe_model.h"

#include <algorithm>
#include <queue>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "coordinator/tokenizer/byte_level.h"
#include "coordinator/tokenizer/json_file.h"
#include "coordinator/tokenizer/utf8.h"
#include "kernels/check.h"

namespace exl3 {
namespace {

using json = nlohmann::json;

absl::Status check_unsupported_options(const json& spec, const std::string& file) {
  const auto dropout = spec.find("dropout");
  if (dropout != spec.end() && !dropout->is_null() && !(dropout->is_number() && dropout->get<double>() == 0.0)) {
    return json_error(file, absl::StrCat("model.dropout ", dropout->dump(), " is not supported (only null)"));
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    EXL3_ASSIGN_OR_RETURN(const std::optional<std::string> affix, optional_string(spec, key, file));
    if (affix && !affix->empty()) {
      return json_error(file, absl::StrCat("model.", key, " \"", *affix, "\" is not supported (only empty)"));
    }
  }
  return absl::OkStatus();
}

// The two sides of merge number `index`, in either of tokenizer.json's spellings.
absl::StatusOr<std::pair<std::string, std::string>> merge_sides(const json& merge, size_t index,
                                                                const std::string& file) {
  if (merge.is_string()) {
    const std::string& text = merge.get_ref<const std::string&>();
    const size_t space = text.find(' ');
    if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos) {
      return json_error(file, absl::StrCat("model.merges[", index, "] \"", text,
                                           "\" must be two tokens separated by one space"));
    }
    return std::make_pair(text.substr(0, space), text.substr(space + 1));
  }
  if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
    return std::make_pair(merge[0].get<std::string>(), merge[1].get<std::string>());
  }
  return json_error(file, absl::StrCat("model.merges[", index, "] ", merge.dump(),
                                       " must be \"a b\" or [\"a\", \"b\"]"));
}

}  // namespace

absl::StatusOr<BpeModel> BpeModel::from_json(const json& spec, bool byte_level, const std::string& file) {
  if (!spec.is_object()) return json_error(file, "\"model\" is missing or not an object");
  EXL3_ASSIGN_OR_RETURN(const std::optional<std::string> type, optional_string(spec, "type", file));
  if (type && *type != "BPE") {
    return json_error(file, absl::StrCat("model type \"", *type, "\" is not supported (only BPE)"));
  }
  if (!type && !spec.contains("merges")) return json_error(file, "model has no \"type\" and no merges");
  EXL3_RETURN_IF_ERROR(check_unsupported_options(spec, file));

  BpeModel model;
  const auto vocab = spec.find("vocab");
  if (vocab == spec.end() || vocab->is_null()) return json_error(file, "model.vocab is missing");
  if (!vocab->is_object()) return json_error(file, "model.vocab must be an object mapping tokens to ids");
  if (vocab->empty()) return json_error(file, "model.vocab is empty");
  std::vector<std::pair<int32_t, const std::string*>> by_id;
  by_id.reserve(vocab->size());
  model.vocab_.reserve(vocab->size());
  for (const auto& [token, value] : vocab->items()) {
    EXL3_ASSIGN_OR_RETURN(const int32_t id, token_id_value(value, absl::StrCat("model.vocab[\"", token, "\"]"), file));
    const auto [it, inserted] = model.vocab_.emplace(token, id);
    by_id.emplace_back(id, &it->first);
  }
  std::sort(by_id.begin(), by_id.end());
  for (size_t i = 1; i < by_id.size(); ++i) {
    if (by_id[i].first == by_id[i - 1].first) {
      return json_error(file, absl::StrCat("model.vocab gives id ", by_id[i].first, " to both \"",
                                           *by_id[i - 1].second, "\" and \"", *by_id[i].second, "\""));
    }
  }

  EXL3_ASSIGN_OR_RETURN(const std::optional<std::string> unk, optional_string(spec, "unk_token", file));
  if (unk) {
    model.unk_id_ = model.find(*unk);
    if (!model.unk_id_) return json_error(file, absl::StrCat("model.unk_token \"", *unk, "\" is not in model.vocab"));
  }
  EXL3_ASSIGN_OR_RETURN(const std::optional<bool> fuse_unk, optional_bool(spec, "fuse_unk", file));
  EXL3_ASSIGN_OR_RETURN(const std::optional<bool> ignore_merges, optional_bool(spec, "ignore_merges", file));
  EXL3_ASSIGN_OR_RETURN(const std::optional<bool> byte_fallback, optional_bool(spec, "byte_fallback", file));
  model.byte_fallback_ = byte_fallback.value_or(false);
  model.fuse_unk_ = fuse_unk.value_or(false);
  model.ignore_merges_ = ignore_merges.value_or(false);

  const auto merges = spec.find("merges");
  if (merges == spec.end() || merges->is_null()) return json_error(file, "model.merges is missing");
  if (!merges->is_array()) return json_error(file, "model.merges must be a list");
  model.merges_.reserve(merges->size());
  std::string joined;
  for (size_t i = 0; i < merges->size(); ++i) {
    EXL3_ASSIGN_OR_RETURN(const auto sides, merge_sides((*merges)[i], i, file));
    joined.assign(sides.first).append(sides.second);
    const auto find_side = [&](const std::string& name) -> absl::StatusOr<int32_t> {
      if (const std::optional<int32_t> id = model.find(name)) return *id;
      return json_error(file, absl::StrCat("model.merges[", i, "] (\"", sides.first, "\", \"", sides.second,
                                           "\") names \"", name, "\", which is not in model.vocab"));
    };
    EXL3_ASSIGN_OR_RETURN(const int32_t left, find_side(sides.first));
    EXL3_ASSIGN_OR_RETURN(const int32_t right, find_side(sides.second));
    EXL3_ASSIGN_OR_RETURN(const int32_t merged, find_side(joined));
    // A pair listed twice keeps its last rank, as Hugging Face's loader does.
    model.merges_.insert_or_assign(pair_key(left, right), Merge{static_cast<int32_t>(i), merged});
  }

  model.byte_level_ = byte_level;
  for (int b = 0; b < 256; ++b) {
    const char raw = static_cast<char>(b);
    const std::string_view unit = byte_level ? byte_level::char_of(static_cast<uint8_t>(b))
                                             : b < 0x80 ? std::string_view(&raw, 1) : std::string_view();
    model.unit_ids_[b] = unit.empty() ? -1 : model.find(unit).value_or(-1);
    model.fallback_ids_[b] = model.find(absl::StrFormat("<0x%02X>", b)).value_or(-1);
  }
  return model;
}

std::optional<int32_t> BpeModel::find(std::string_view token) const {
  const auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

void BpeModel::initial_symbols(std::string_view piece, std::vector<int32_t>& ids) const {
  int32_t pending_unk = -1;  // Hugging Face emits an unk only when the next known unit comes, or at the end
  std::string unit_storage;
  for (size_t pos = 0; pos < piece.size();) {
    // One unit: a byte (byte-level) or a character (invalid bytes: the maximal invalid subpart).
    size_t length = 1;
    if (!byte_level_) length = utf8::step(piece, pos).length;
    const auto first = static_cast<uint8_t>(piece[pos]);
    std::string_view unit = piece.substr(pos, length);
    pos += length;
    int32_t id = length == 1 ? unit_ids_[first] : -1;
    if (id < 0 && length > 1) id = find(unit).value_or(-1);
    if (id >= 0) {
      if (pending_unk >= 0) ids.push_back(pending_unk);
      pending_unk = -1;
      ids.push_back(id);
      continue;
    }
    if (byte_level_) {
      unit_storage.assign(byte_level::char_of(first));
      unit = unit_storage;
    }
    if (byte_fallback_) {
      bool all = true;
      for (char ch : unit) all = all && fallback_ids_[static_cast<uint8_t>(ch)] >= 0;
      if (all) {
        for (char ch : unit) ids.push_back(fallback_ids_[static_cast<uint8_t>(ch)]);
        continue;
      }
    }
    if (!unk_id_) continue;
    if (pending_unk >= 0 && !fuse_unk_) ids.push_back(pending_unk);
    pending_unk = *unk_id_;
  }
  if (pending_unk >= 0) ids.push_back(pending_unk);
}

void BpeModel::encode(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (ignore_merges_) {
    const std::optional<int32_t> whole = byte_level_ ? find(byte_level::encode(piece)) : find(piece);
    if (whole) {
      out.push_back(*whole);
      return;
    }
  }

  // Symbols form a linked list over a vector; a merge folds the right symbol into the left one.
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
  };
  std::vector<int32_t> initial;
  initial.reserve(piece.size());
  initial_symbols(piece, initial);
  std::vector<Symbol> symbols;
  symbols.reserve(initial.size());
  for (int32_t id : initial) {
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, index - 1, index + 1});
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;

  // Candidate merges, lowest rank first, then leftmost. An entry goes stale when either symbol
  // changes; it is checked against the current pair when popped.
  struct Candidate {
    int32_t rank;
    int32_t pos;
    int32_t left_id;
    int32_t right_id;
    int32_t merged_id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  const auto push_pair = [&](int32_t left) {
    const int32_t right = symbols[left].next;
    if (right < 0) return;
    const auto it = merges_.find(pair_key(symbols[left].id, symbols[right].id));
    if (it == merges_.end()) return;
    queue.push({it->second.rank, left, symbols[left].id, symbols[right].id, it->second.id});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) push_pair(i);

  constexpr int32_t kDead = -1;
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& left = symbols[c.pos];
    if (left.id != c.left_id || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    if (right.id != c.right_id) continue;
    left.id = c.merged_id;
    right.id = kDead;
    left.next = right.next;
    if (left.next >= 0) symbols[left.next].prev = c.pos;
    if (left.prev >= 0) push_pair(left.prev);
    push_pair(c.pos);
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next) out.push_back(symbols[i].id);
}

}  // namespace exl3
