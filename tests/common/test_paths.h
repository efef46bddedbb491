// Paths of test data: small fixtures copied into tests/data, files unpacked into the build tree,
// and the larger fixture models read from the read-only shared/ folder beside the checkout.
#pragma once

#include <filesystem>
#include <string>

#include "gtest/gtest.h"

namespace exl3::testing {

inline std::string test_data(const std::string& rel) { return std::string(EXL3_TEST_DATA_DIR) + "/" + rel; }
inline std::string work_path(const std::string& rel) { return std::string(EXL3_TEST_WORK_DIR) + "/" + rel; }
inline std::string source_path(const std::string& rel) { return std::string(EXL3_SOURCE_DIR) + "/" + rel; }
inline std::string shared_path(const std::string& rel) { return std::string(EXL3_SHARED_DIR) + "/" + rel; }

}  // namespace exl3::testing

// Fails (never skips) when a shared fixture is missing: CI always has shared/ beside the clone.
#define EXL3_REQUIRE_FILE(path)                                                          \
  do {                                                                                   \
    if (!std::filesystem::exists(path)) GTEST_FAIL() << "missing test fixture " << (path); \
  } while (0)
