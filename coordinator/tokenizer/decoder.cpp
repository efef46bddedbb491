// Parsing of the decoder chain and its incremental evaluation (see decoder.h).
#include "coordinator/tokenizer/decoder.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "coordinator/tokenizer/json_file.h"
#include "coordinator/tokenizer/utf8.h"
#include "kernels/check.h"

namespace exl3 {
namespace {

using json = nlohmann::json;

constexpr size_t kMaxSteps = 64;
constexpr char kSupported[] = "supported: ByteLevel, Replace, Strip, Fuse, ByteFallback, Metaspace, Sequence";

std::string type_of(const json& spec) {
  const auto it = spec.is_object() ? spec.find("type") : spec.end();
  if (!spec.is_object() || it == spec.end() || !it->is_string()) return spec.dump();
  return it->get<std::string>();
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The byte of a "<0xAB>" token, parsed as Hugging Face does (Rust's u8::from_str_radix on the
// two characters after "<0x", so either case and a leading '+' are accepted).
std::optional<uint8_t> byte_token(std::string_view token) {
  if (token.size() != 6 || token.substr(0, 3) != "<0x" || token[5] != '>') return std::nullopt;
  const int high = token[3] == '+' ? 0 : hex_digit(token[3]);
  const int low = hex_digit(token[4]);
  if (high < 0 || low < 0) return std::nullopt;
  return static_cast<uint8_t>(high * 16 + low);
}

// Strip on one token: up to `start` leading and `stop` trailing `content` characters. Where the
// two overlap (Hugging Face panics there) the result is empty.
std::string strip_token(std::string_view token, std::string_view content, size_t start, size_t stop) {
  std::vector<size_t> begins;  // byte offset of each character
  for (size_t pos = 0; pos < token.size(); pos += utf8::step(token, pos).length) begins.push_back(pos);
  const size_t n = begins.size();
  const auto char_at = [&](size_t i) {
    const size_t end = i + 1 < n ? begins[i + 1] : token.size();
    return token.substr(begins[i], end - begins[i]);
  };
  size_t start_cut = 0;
  for (size_t i = 0; i < start && i < n && char_at(i) == content; ++i) start_cut = i + 1;
  size_t stop_cut = n;
  for (size_t i = 0; i < stop && i < n && char_at(n - i - 1) == content; ++i) stop_cut = n - i - 1;
  if (stop_cut <= start_cut) return "";
  const auto offset = [&](size_t i) { return i < n ? begins[i] : token.size(); };
  return std::string(token.substr(offset(start_cut), offset(stop_cut) - offset(start_cut)));
}

absl::StatusOr<std::string> one_char_string(const json& spec, const std::string& key, const std::string& where,
                                            const std::string& file) {
  EXL3_ASSIGN_OR_RETURN(const std::optional<std::string> value, optional_string(spec, key, file));
  if (!value || value->empty() || utf8::step(*value, 0).kind != utf8::StepKind::kValid ||
      utf8::step(*value, 0).length != value->size()) {
    return json_error(file, absl::StrCat(where, " needs \"", key, "\" to be exactly one character"));
  }
  return *value;
}

absl::StatusOr<size_t> count_field(const json& spec, const std::string& key, const std::string& where,
                                   const std::string& file) {
  const auto it = spec.find(key);
  if (it == spec.end() || it->is_null()) return size_t{0};
  if (!it->is_number_unsigned() || it->get<uint64_t>() > (1u << 20)) {
    return json_error(file, absl::StrCat(where, " \"", key, "\" must be a small non-negative integer, not ", it->dump()));
  }
  return static_cast<size_t>(it->get<uint64_t>());
}

}  // namespace

absl::Status Decoder::parse_steps(const json& spec, const std::string& file, Decoder& out) {
  const std::string type = type_of(spec);
  if (type == "Sequence") {
    const auto list = spec.find("decoders");
    if (list == spec.end() || !list->is_array()) return json_error(file, "decoder Sequence needs a \"decoders\" list");
    for (const json& step : *list) EXL3_RETURN_IF_ERROR(parse_steps(step, file, out));
    return absl::OkStatus();
  }
  if (type == "ByteLevel") {
    return json_error(file, "decoder ByteLevel is supported only alone (not in a Sequence with other decoders)");
  }
  if (type == "Fuse") {
    out.fused_ = true;
    return absl::OkStatus();
  }
  Step step;
  if (type == "Replace") {
    step.kind = Step::Kind::kReplace;
    const auto pattern = spec.find("pattern");
    if (pattern == spec.end() || !pattern->is_object() || !pattern->contains("String") ||
        !(*pattern)["String"].is_string() || (*pattern)["String"].get<std::string>().empty()) {
      return json_error(file, absl::StrCat("decoder Replace pattern ", pattern == spec.end() ? "(none)" : pattern->dump(),
                                           " is not supported (only a non-empty {\"String\": ...})"));
    }
    step.pattern = (*pattern)["String"].get<std::string>();
    EXL3_ASSIGN_OR_RETURN(const std::optional<std::string> content, optional_string(spec, "content", file));
    if (!content) return json_error(file, "decoder Replace needs a string \"content\"");
    step.content = *content;
  } else if (type == "Strip") {
    step.kind = Step::Kind::kStrip;
    EXL3_ASSIGN_OR_RETURN(step.content, one_char_string(spec, "content", "decoder Strip", file));
    EXL3_ASSIGN_OR_RETURN(step.start, count_field(spec, "start", "decoder Strip", file));
    EXL3_ASSIGN_OR_RETURN(step.stop, count_field(spec, "stop", "decoder Strip", file));
  } else if (type == "Metaspace") {
    step.kind = Step::Kind::kMetaspace;
    EXL3_ASSIGN_OR_RETURN(step.metaspace, Metaspace::from_json(spec, "decoder", file));
  } else if (type == "ByteFallback") {
    step.kind = Step::Kind::kByteFallback;
  } else {
    return json_error(file, absl::StrCat("decoder type \"", type, "\" is not supported (", kSupported, ")"));
  }
  // Steps run recursively while streaming; real chains have four or five.
  if (out.per_token_.size() + out.whole_text_.size() >= kMaxSteps) {
    return json_error(file, absl::StrCat("decoder has more than ", kMaxSteps, " steps"));
  }
  if (!out.fused_) {
    out.per_token_.push_back(std::move(step));
  } else if (step.kind == Step::Kind::kStrip) {
    out.whole_text_.push_back(std::move(step));
  } else {
    return json_error(file, absl::StrCat("decoder ", type, " after Fuse is not supported (only Strip may follow Fuse)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Decoder> Decoder::from_json(const json& spec, const std::string& file) {
  Decoder result;
  if (spec.is_null()) return json_error(file, "decoder is null; tokenizer.json needs a decoder");
  if (type_of(spec) == "ByteLevel") {
    result.byte_level_ = true;
    return result;
  }
  if (type_of(spec) == "Sequence") {
    const auto list = spec.find("decoders");
    if (list != spec.end() && list->is_array() && list->size() == 1 && type_of((*list)[0]) == "ByteLevel") {
      result.byte_level_ = true;
      return result;
    }
  }
  EXL3_RETURN_IF_ERROR(parse_steps(spec, file, result));
  return result;
}

std::string Decoder::token_text_in_context(std::string_view token) const {
  std::string text(token);
  for (const Step& step : per_token_) {
    switch (step.kind) {
      case Step::Kind::kReplace:
        text = absl::StrReplaceAll(text, {{step.pattern, step.content}});
        break;
      case Step::Kind::kStrip:
        text = strip_token(text, step.content, step.start, step.stop);
        break;
      case Step::Kind::kMetaspace:
        text = step.metaspace.decode_token(text, 1);
        break;
      case Step::Kind::kByteFallback:
        if (const std::optional<uint8_t> byte = byte_token(text)) return std::string(1, static_cast<char>(*byte));
        break;
    }
  }
  return text;
}

DecodeStream::DecodeStream(const Decoder& decoder)
    : decoder_(&decoder),
      index_(decoder.per_token_.size(), 0),
      run_(decoder.per_token_.size()),
      strips_(decoder.whole_text_.size()) {
  EXL3_CHECK(!decoder.byte_level(), "DecodeStream needs a decoder chain, not ByteLevel");
}

void DecodeStream::push(std::string_view token, std::string& out) { feed(0, std::string(token), out); }

void DecodeStream::feed(size_t stage, std::string element, std::string& out) {
  const std::vector<Decoder::Step>& steps = decoder_->per_token_;
  for (; stage < steps.size(); ++stage) {
    const Decoder::Step& step = steps[stage];
    const size_t index = index_[stage]++;
    switch (step.kind) {
      case Decoder::Step::Kind::kReplace:
        element = absl::StrReplaceAll(element, {{step.pattern, step.content}});
        break;
      case Decoder::Step::Kind::kStrip:
        element = strip_token(element, step.content, step.start, step.stop);
        break;
      case Decoder::Step::Kind::kMetaspace:
        element = step.metaspace.decode_token(element, index);
        break;
      case Decoder::Step::Kind::kByteFallback: {
        if (const std::optional<uint8_t> byte = byte_token(element)) {
          run_[stage].push_back(static_cast<char>(*byte));
          return;
        }
        if (!run_[stage].empty()) {
          std::string run;
          run.swap(run_[stage]);
          if (utf8::is_valid(run)) {
            feed(stage + 1, std::move(run), out);
          } else {
            for (size_t i = 0; i < run.size(); ++i) feed(stage + 1, std::string(utf8::kReplacement), out);
          }
        }
        break;
      }
    }
  }
  whole_text(0, element, out);
}

void DecodeStream::whole_text(size_t first, std::string_view text, std::string& out) {
  std::string current(text);
  std::string next;
  for (size_t k = first; k < strips_.size(); ++k) {
    const Decoder::Step& step = decoder_->whole_text_[k];
    StripState& state = strips_[k];
    next.clear();
    for (size_t pos = 0; pos < current.size();) {
      const size_t length = utf8::step(current, pos).length;
      const std::string_view ch = std::string_view(current).substr(pos, length);
      pos += length;
      const bool is_content = ch == step.content;
      if (!state.past_start) {
        if (is_content && state.dropped < step.start) {
          ++state.dropped;
          continue;
        }
        state.past_start = true;
      }
      if (is_content) {
        // Only the last `stop` of a run can still be stripped; earlier ones are final.
        if (state.held < step.stop) {
          ++state.held;
        } else {
          next.append(ch);
        }
        continue;
      }
      for (; state.held > 0; --state.held) next.append(step.content);
      next.append(ch);
    }
    current.swap(next);
  }
  out.append(current);
}

void DecodeStream::finish(std::string& out) {
  const std::vector<Decoder::Step>& steps = decoder_->per_token_;
  for (size_t stage = 0; stage < steps.size(); ++stage) {
    if (run_[stage].empty()) continue;
    std::string run;
    run.swap(run_[stage]);
    if (utf8::is_valid(run)) {
      feed(stage + 1, std::move(run), out);
    } else {
      for (size_t i = 0; i < run.size(); ++i) feed(stage + 1, std::string(utf8::kReplacement), out);
    }
  }
  // What each whole-text Strip still holds is at most `stop` trailing characters: all stripped.
  for (StripState& state : strips_) state.held = 0;
}

size_t DecodeStream::pending_bytes() const {
  size_t bytes = 0;
  for (const std::string& run : run_) bytes += run.size();
  for (size_t k = 0; k < strips_.size(); ++k) bytes += strips_[k].held * decoder_->whole_text_[k].content.size();
  return bytes;
}

}  // namespace exl3
