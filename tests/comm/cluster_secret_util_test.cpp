// The cluster secret helpers: constant-time comparison, reading --cluster-secret-file, making a
// fresh secret, the private 0600 file the launcher hands its workers, loopback detection.
#include "worker/comm/cluster_secret.h"
#include "worker/comm/secret_text.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "common/test_paths.h"
#include "gtest/gtest.h"

namespace exl3 {
namespace {

namespace fs = std::filesystem;

std::string work_file(const std::string& name, const std::string& text) {
  const std::string path = std::string(EXL3_TEST_WORK_DIR) + "/" + name + "-" + std::to_string(::getpid());
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
  return path;
}

TEST(ClusterSecretUtil, SameSecretComparesEveryByte) {
  EXPECT_TRUE(same_secret("", ""));
  EXPECT_TRUE(same_secret("abc123", "abc123"));
  EXPECT_FALSE(same_secret("abc123", "abc124"));  // last byte
  EXPECT_FALSE(same_secret("abc123", "bbc123"));  // first byte
  EXPECT_FALSE(same_secret("abc123", "abc12"));   // prefix
  EXPECT_FALSE(same_secret("abc12", "abc123"));
  EXPECT_FALSE(same_secret("", "a"));
  const std::string a(4097, 'x');
  std::string b = a;
  b[2048] = 'y';
  EXPECT_FALSE(same_secret(a, b));
  EXPECT_TRUE(same_secret(a, std::string(4097, 'x')));
}

TEST(ClusterSecretUtil, ReadsTheFileWithoutSurroundingWhitespace) {
  const std::string path = work_file("secret-ok", "  0123abcdEF-_.\n");
  absl::StatusOr<std::string> s = read_cluster_secret_file(path);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(*s, "0123abcdEF-_.");
  fs::remove(path);
}

TEST(ClusterSecretUtil, RefusesMissingEmptyOrUnprintableFilesByFlagAndPath) {
  const std::string missing = std::string(EXL3_TEST_WORK_DIR) + "/no-such-secret-" + std::to_string(::getpid());
  const std::string empty = work_file("secret-empty", " \n\t\n");
  const std::string spaced = work_file("secret-spaced", "two words");
  const std::string binary = work_file("secret-binary", std::string("ab\x01\xff", 4));
  for (const std::string& path : {missing, empty, spaced, binary}) {
    absl::StatusOr<std::string> s = read_cluster_secret_file(path);
    ASSERT_FALSE(s.ok()) << path;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << s.status();
    EXPECT_NE(s.status().message().find("--cluster-secret-file"), std::string::npos) << s.status();
    EXPECT_NE(s.status().message().find(path), std::string::npos) << s.status();
    EXPECT_EQ(s.status().message().find("two words"), std::string::npos) << "the secret leaked: " << s.status();
  }
  EXPECT_NE(read_cluster_secret_file(missing).status().message().find("cannot read"), std::string::npos);
  EXPECT_NE(read_cluster_secret_file(empty).status().message().find("holds no secret"), std::string::npos);
  for (const std::string& path : {empty, spaced, binary}) fs::remove(path);
}

TEST(ClusterSecretUtil, MakesFreshHexSecretsOf32Bytes) {
  absl::StatusOr<std::string> a = make_cluster_secret();
  absl::StatusOr<std::string> b = make_cluster_secret();
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(a->size(), 64u);
  EXPECT_EQ(a->find_first_not_of("0123456789abcdef"), std::string::npos) << *a;
  EXPECT_NE(*a, *b);
  absl::StatusOr<std::string> c = make_cluster_secret(5);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->size(), 10u);
  EXPECT_FALSE(make_cluster_secret(0).ok());
}

TEST(ClusterSecretUtil, FileIsPrivateReadableAndRemoved) {
  const std::string temp_dir = exl3::testing::work_path("cluster_secret_util");
  fs::create_directories(temp_dir);
  std::string path, dir;
  {
    absl::StatusOr<std::unique_ptr<ClusterSecretFile>> f = ClusterSecretFile::create("s3cr3t-value", temp_dir);
    ASSERT_TRUE(f.ok()) << f.status();
    path = (*f)->path();
    dir = fs::path(path).parent_path().string();
    EXPECT_EQ(fs::path(dir).parent_path(), fs::path(temp_dir)) << "the private directory goes under temp_dir";
    struct stat st{};
    ASSERT_EQ(::stat(path.c_str(), &st), 0) << path;
    EXPECT_EQ(st.st_mode & 0777, 0600u) << path;
    ASSERT_EQ(::stat(dir.c_str(), &st), 0) << dir;
    EXPECT_EQ(st.st_mode & 0777, 0700u) << dir;
    absl::StatusOr<std::string> back = read_cluster_secret_file(path);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, "s3cr3t-value");
  }
  EXPECT_FALSE(fs::exists(path)) << path;
  EXPECT_FALSE(fs::exists(dir)) << dir;
  EXPECT_FALSE(ClusterSecretFile::create("s3cr3t-value", temp_dir + "/missing").ok()) << "no such directory";
}

TEST(ClusterSecretUtil, LoopbackHosts) {
  for (const char* h : {"127.0.0.1", "127.1.2.3", "localhost", "::1", "[::1]"}) EXPECT_TRUE(is_loopback_host(h)) << h;
  for (const char* h : {"0.0.0.0", "10.0.0.2", "192.168.1.1", "::", "example.com", ""}) {
    EXPECT_FALSE(is_loopback_host(h)) << h;
  }
}

}  // namespace
}  // namespace exl3
