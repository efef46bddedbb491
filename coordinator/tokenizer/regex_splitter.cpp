// PCRE2 compilation and the "Isolated" split loop (see regex_splitter.h).
#include "coordinator/tokenizer/regex_splitter.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "absl/strings/str_cat.h"
#include "coordinator/tokenizer/utf8.h"
#include "kernels/check.h"

namespace exl3 {
namespace {

// The JIT stack grows on demand up to this size. The pre-tokenizer patterns backtrack over at
// most one run of whitespace, which needs a few bytes per character, so 64 MiB (virtual memory,
// touched only when used) covers pieces far longer than any prompt.
constexpr size_t kJitStackStart = 32 * 1024;
constexpr size_t kJitStackMax = 64 * 1024 * 1024;

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  const int n = pcre2_get_error_message(code, buffer, sizeof(buffer));
  if (n < 0) return absl::StrCat("PCRE2 error ", code);
  return std::string(reinterpret_cast<const char*>(buffer), static_cast<size_t>(n));
}

}  // namespace

struct RegexSplitter::Code {
  pcre2_code* code = nullptr;
  ~Code() { pcre2_code_free(code); }
};

struct RegexScratch::State {
  pcre2_match_data* match_data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;
  ~State() {
    pcre2_match_data_free(match_data);
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(jit_stack);
  }
};

RegexScratch::RegexScratch() : state_(std::make_unique<State>()) {
  // One offset pair is enough: only the whole match is used (a pattern with capture groups then
  // makes pcre2_match return 0, which still means "matched").
  state_->match_data = pcre2_match_data_create(1, nullptr);
  state_->context = pcre2_match_context_create(nullptr);
  state_->jit_stack = pcre2_jit_stack_create(kJitStackStart, kJitStackMax, nullptr);
  EXL3_CHECK(state_->match_data && state_->context && state_->jit_stack, "PCRE2 allocation failed");
  pcre2_jit_stack_assign(state_->context, nullptr, state_->jit_stack);
}

RegexScratch::~RegexScratch() = default;

absl::StatusOr<RegexSplitter> RegexSplitter::compile(std::string_view pattern, bool literal) {
  // PCRE2_UCP makes \s, \w, \d and POSIX classes follow Unicode properties, as Oniguruma (the
  // engine behind Hugging Face tokenizers) does. PCRE2_LITERAL allows UTF but not UCP.
  uint32_t options = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF;
  options |= literal ? PCRE2_LITERAL : PCRE2_UCP;
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   options, &error_code, &error_offset, nullptr);
  if (code == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("cannot compile pre-tokenizer regex \"", std::string(pattern),
                                                   "\" at offset ", error_offset, ": ",
                                                   pcre2_message(error_code)));
  }
  auto holder = std::make_shared<Code>();
  holder->code = code;
  // Without JIT support (some platforms) pcre2_match interprets the pattern: same results, slower.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  RegexSplitter splitter;
  splitter.code_ = std::move(holder);
  splitter.pattern_ = std::string(pattern);
  splitter.literal_ = literal;
  return splitter;
}

void RegexSplitter::split(std::string_view text, RegexScratch& scratch,
                          std::vector<std::string_view>& out) const {
  // PCRE2's \s (under UCP) includes U+180E MONGOLIAN VOWEL SEPARATOR, which Oniguruma's does not
  // (it follows White_Space, which dropped U+180E in Unicode 6.3). To split as Hugging Face does,
  // the regex runs on a copy where U+180E is replaced by U+200B ZERO WIDTH SPACE: the same UTF-8
  // length (so offsets carry over) and the same class for both engines (Cf, not whitespace).
  constexpr std::string_view kVowelSeparator = "\xE1\xA0\x8E";
  constexpr std::string_view kZeroWidthSpace = "\xE2\x80\x8B";
  std::string shadow;
  std::string_view subject_text = text;
  if (!literal_ && text.find(kVowelSeparator) != std::string_view::npos) {
    shadow.assign(text);
    for (size_t at = shadow.find(kVowelSeparator); at != std::string::npos; at = shadow.find(kVowelSeparator, at)) {
      shadow.replace(at, kVowelSeparator.size(), kZeroWidthSpace);
    }
    subject_text = shadow;
  }
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(subject_text.data());
  const size_t length = text.size();
  size_t gap_begin = 0;
  size_t search_from = 0;
  while (search_from < length) {
    const int rc = pcre2_match(code_->code, subject, length, search_from, 0,
                               scratch.state_->match_data, scratch.state_->context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    EXL3_CHECK(rc >= 0, "pre-tokenizer regex \"", pattern_, "\" failed on a ", length,
               "-byte piece: ", pcre2_message(rc));
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(scratch.state_->match_data);
    const size_t begin = ovector[0];
    const size_t end = ovector[1];
    if (end == begin) {
      // An empty match adds no piece; step over one character so the search moves on.
      search_from = begin + utf8::step(text, begin).length;
      continue;
    }
    if (begin > gap_begin) out.push_back(text.substr(gap_begin, begin - gap_begin));
    out.push_back(text.substr(begin, end - begin));
    gap_begin = end;
    search_from = end;
  }
  if (gap_begin < length) out.push_back(text.substr(gap_begin));
}

}  // namespace exl3
