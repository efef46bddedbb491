// Names and parsing of the int8-activation modes (kernels/int8_activations.h).
#include "kernels/int8_activations.h"

#include "absl/strings/str_cat.h"

namespace exl3 {

std::string int8_activations_name(Int8Activations mode) {
  switch (mode) {
    case Int8Activations::kOff: return "off";
    case Int8Activations::kAuto: return "auto";
    case Int8Activations::kOn: return "on";
  }
  return absl::StrCat("invalid(", static_cast<int>(mode), ")");
}

absl::StatusOr<Int8Activations> parse_int8_activations(const std::string& text, const std::string& flag) {
  if (text == "off") return Int8Activations::kOff;
  if (text == "auto") return Int8Activations::kAuto;
  if (text == "on") return Int8Activations::kOn;
  return absl::InvalidArgumentError(absl::StrCat(
      flag, " \"", text, "\": expected off, auto or on (auto: int8 for MUL1 weights of at most ", kInt8AutoMaxBits,
      " bits in matmuls of at most ", kInt8ActivationsMaxRows, " rows)"));
}

std::string int8_activations_flag_help() {
  return absl::StrCat(
      "Int8 activations for the few-rows EXL3 matmuls (decode steps): the transformed input of each matmul is "
      "rounded to int8 per block of 128 (about 0.6% relative error, small next to the quantized weights' own; mean "
      "KL 2e-4 against ExLlamaV3 on the 4.0 bpw test model) so that the GPU kernel multiplies the weights' code "
      "bytes directly instead of decoding them. off: full-precision activations everywhere; auto: MUL1 weights of "
      "at most ", kInt8AutoMaxBits, " bits, at most ", kInt8ActivationsMaxRows,
      " rows per matmul; on: MUL1 weights of any width, at most ", kInt8ActivationsMaxRows,
      " rows per matmul. One mode for every worker of a job. Off by default: whether a matmul takes int8 "
      "depends on its row count, so with auto or on a request's tokens can depend on what else shares its "
      "decode steps");
}

}  // namespace exl3
