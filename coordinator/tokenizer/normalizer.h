// The normalizer of tokenizer.json: none (null) or Unicode NFC (utf8proc), alone or in a
// Sequence. Other normalizers are refused when loading.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace exl3 {

class Normalizer {
 public:
  // `spec` is tokenizer.json's "normalizer"; `file` names the file in errors.
  static absl::StatusOr<Normalizer> from_json(const nlohmann::json& spec, const std::string& file);

  bool is_identity() const { return !nfc_; }

  // `text` normalized. Bytes that are not valid UTF-8 are kept as they are (NFC applies to the
  // valid runs between them).
  std::string apply(std::string_view text) const;

 private:
  bool nfc_ = false;
};

}  // namespace exl3
