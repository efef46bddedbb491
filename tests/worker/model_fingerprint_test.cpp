// Model directory fingerprints: a copy of the fixture made of links fingerprints the same; a copy
// with a changed config.json, a missing or an extra weights file is told apart, naming the file;
// a truncated safetensors header is an error naming the file.
#include "worker/loader/model_fingerprint.h"

#include <filesystem>
#include <fstream>

#include "common/test_paths.h"
#include "gtest/gtest.h"

namespace exl3 {
namespace {

namespace fs = std::filesystem;

std::string copy_of_fixture(const std::string& name) {
  const fs::path dir = testing::work_path("fingerprint/" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(testing::source_path("models/exl3-4.0bpw"))) {
    fs::copy_file(e.path(), dir / e.path().filename());
  }
  return dir.string();
}

TEST(ModelFingerprint, CopiesMatchAndDifferencesAreNamed) {
  const auto reference = fingerprint_model(testing::source_path("models/exl3-4.0bpw"));
  ASSERT_TRUE(reference.ok()) << reference.status();
  ASSERT_GE(reference->size(), 2u);  // config.json and at least one .safetensors
  const std::string same = copy_of_fixture("same");
  auto copy = fingerprint_model(same);
  ASSERT_TRUE(copy.ok()) << copy.status();
  EXPECT_EQ(fingerprint_difference(*reference, *copy), "");

  // A config with one more space: same role, other content.
  const std::string edited = copy_of_fixture("edited");
  {
    std::ofstream out(edited + "/config.json", std::ios::app);
    out << " ";
  }
  copy = fingerprint_model(edited);
  ASSERT_TRUE(copy.ok());
  const std::string diff = fingerprint_difference(*reference, *copy);
  EXPECT_NE(diff.find("config.json"), std::string::npos) << diff;

  // A weights file missing, and one that is not in the reference.
  std::string weights;
  for (const auto& f : *reference) {
    if (f.name.ends_with(".safetensors")) weights = f.name;
  }
  const std::string missing = copy_of_fixture("missing");
  fs::remove(missing + "/" + weights);
  copy = fingerprint_model(missing);
  ASSERT_TRUE(copy.ok());
  EXPECT_EQ(fingerprint_difference(*reference, *copy), "file " + weights + " is missing");
  const std::string extra = copy_of_fixture("extra");
  fs::copy_file(extra + "/" + weights, extra + "/zz-extra.safetensors");
  copy = fingerprint_model(extra);
  ASSERT_TRUE(copy.ok());
  EXPECT_EQ(fingerprint_difference(*reference, *copy), "file zz-extra.safetensors is not in the coordinator's copy");
}

TEST(ModelFingerprint, TruncatedHeaderIsAnErrorNamingTheFile) {
  const std::string dir = copy_of_fixture("truncated");
  {
    std::ofstream out(dir + "/broken.safetensors", std::ios::binary);
    const uint64_t header = 1000;
    out.write(reinterpret_cast<const char*>(&header), sizeof(header));
    out << "{\"short\": 1}";
  }
  const auto f = fingerprint_model(dir);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("broken.safetensors"), std::string_view::npos) << f.status();
}

}  // namespace
}  // namespace exl3
