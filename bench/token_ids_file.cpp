// Token-id file parsing (JSON or safetensors) with errors naming the file and the problem.
#include "bench/token_ids_file.h"

#include <fstream>
#include <limits>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "worker/loader/safetensors.h"

namespace exl3 {
namespace {

using json = nlohmann::json;

absl::StatusOr<std::vector<int32_t>> json_row(const json& row, const std::string& path, size_t index) {
  std::vector<int32_t> out;
  for (const json& v : row) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": sequence ", index, " holds ", v.dump(),
                                                     ", not a non-negative token id"));
    }
    out.push_back(v.get<int32_t>());
  }
  return out;
}

absl::StatusOr<TokenSequences> from_json(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  json j = json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(path, ": not valid JSON"));
  if (j.is_object() && j.contains("input_ids")) j = j["input_ids"];
  if (!j.is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": expected a JSON list of token-id lists"));
  }
  TokenSequences seqs;
  if (!j.empty() && j[0].is_number()) {
    EXL3_ASSIGN_OR_RETURN(std::vector<int32_t> row, json_row(j, path, 0));
    seqs.push_back(std::move(row));
    return seqs;
  }
  for (size_t i = 0; i < j.size(); ++i) {
    if (!j[i].is_array()) return absl::InvalidArgumentError(absl::StrCat(path, ": entry ", i, " is not a list"));
    EXL3_ASSIGN_OR_RETURN(std::vector<int32_t> row, json_row(j[i], path, i));
    seqs.push_back(std::move(row));
  }
  return seqs;
}

absl::StatusOr<TokenSequences> from_safetensors(const std::string& path) {
  EXL3_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file, SafetensorsFile::open(path));
  if (file->tensors().size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": expected exactly one tensor, found ", file->tensors().size()));
  }
  const std::string name = file->tensors().begin()->first;
  EXL3_ASSIGN_OR_RETURN(Tensor t, file->get(name));
  if (t.dtype() != DType::kI32 && t.dtype() != DType::kI64 && t.dtype() != DType::kI16) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": tensor \"", name, "\" is ", dtype_name(t.dtype()),
                                                   ", expected an integer tensor"));
  }
  if (t.rank() != 1 && t.rank() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": tensor \"", name, "\" has shape ", shape_string(t.shape()),
                                                   ", expected 1-D or 2-D"));
  }
  const int64_t rows = t.rank() == 1 ? 1 : t.dim(0);
  const int64_t cols = t.rank() == 1 ? t.dim(0) : t.dim(1);
  TokenSequences seqs(rows);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t i = r * cols + c;
      const int64_t v = t.dtype() == DType::kI32   ? t.data<int32_t>()[i]
                        : t.dtype() == DType::kI64 ? t.data<int64_t>()[i]
                                                   : t.data<int16_t>()[i];
      if (v < 0 || v > std::numeric_limits<int32_t>::max()) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": token id ", v, " at row ", r, ", column ", c));
      }
      seqs[r].push_back(static_cast<int32_t>(v));
    }
  }
  return seqs;
}

}  // namespace

absl::StatusOr<TokenSequences> load_token_sequences(const std::string& path) {
  std::ifstream probe(path, std::ios::binary);
  if (!probe) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  const bool is_safetensors = path.size() > 12 && path.substr(path.size() - 12) == ".safetensors";
  return is_safetensors ? from_safetensors(path) : from_json(path);
}

}  // namespace exl3
