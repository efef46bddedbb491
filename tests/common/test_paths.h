// Paths of test data: small fixtures copied into tests/data, files unpacked into the build tree,
// and the larger fixture models read from the read-only shared/ folder beside the checkout. The
// paths are the build's; EXL3_TEST_SOURCE_DIR / EXL3_TEST_SHARED_DIR / EXL3_TEST_WORK_DIR in the
// environment move the source, shared and scratch roots when the binaries run elsewhere (the GPU
// machine gets a copy of the tree).
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

#include "gtest/gtest.h"

namespace exl3::testing {

inline std::string root_from_env(const char* variable, const char* built) {
  const char* value = std::getenv(variable);
  return value != nullptr && *value != '\0' ? std::string(value) : std::string(built);
}
inline std::string source_path(const std::string& rel) {
  return root_from_env("EXL3_TEST_SOURCE_DIR", EXL3_SOURCE_DIR) + "/" + rel;
}
inline std::string test_data(const std::string& rel) {
  const char* moved = std::getenv("EXL3_TEST_SOURCE_DIR");
  return moved != nullptr && *moved != '\0' ? source_path("tests/data/" + rel)
                                             : std::string(EXL3_TEST_DATA_DIR) + "/" + rel;
}
// The build's scratch folder, or EXL3_TEST_WORK_DIR from the environment (created if missing).
inline std::string work_path(const std::string& rel) {
  const std::string root = root_from_env("EXL3_TEST_WORK_DIR", EXL3_TEST_WORK_DIR);
  std::error_code ignored;
  std::filesystem::create_directories(root, ignored);
  return root + "/" + rel;
}
inline std::string shared_path(const std::string& rel) {
  return root_from_env("EXL3_TEST_SHARED_DIR", EXL3_SHARED_DIR) + "/" + rel;
}

}  // namespace exl3::testing

// Fails (never skips) when a shared fixture is missing: CI always has shared/ beside the clone.
#define EXL3_REQUIRE_FILE(path)                                                          \
  do {                                                                                   \
    if (!std::filesystem::exists(path)) GTEST_FAIL() << "missing test fixture " << (path); \
  } while (0)
