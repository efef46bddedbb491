// A copy of the 4.0 bpw fixture model with an edited config.json (architecture, sliding window,
// fewer layers), made in the test work directory: config.json is written, every other file is a
// symbolic link to the fixture's. Header-only (tests/CMakeLists.txt builds one executable per test).
#pragma once

#include <filesystem>
#include <fstream>
#include <string>

#include "common/test_paths.h"
#include "nlohmann/json.hpp"

namespace exl3::testing {

// Writes work_path(name) as the fixture with config.json's fields overwritten by `edits` and
// returns its path.
inline std::string variant_model_dir(const std::string& name, const nlohmann::json& edits) {
  namespace fs = std::filesystem;
  const fs::path src = source_path("models/exl3-4.0bpw");
  const fs::path dst = work_path(name);
  fs::remove_all(dst);
  fs::create_directories(dst);
  for (const fs::directory_entry& e : fs::directory_iterator(src)) {
    if (e.path().filename() != "config.json") fs::create_symlink(fs::absolute(e.path()), dst / e.path().filename());
  }
  std::ifstream in(src / "config.json");
  nlohmann::json config = nlohmann::json::parse(in);
  for (const auto& [key, value] : edits.items()) config[key] = value;
  std::ofstream(dst / "config.json") << config.dump(2);
  return dst.string();
}

}  // namespace exl3::testing
