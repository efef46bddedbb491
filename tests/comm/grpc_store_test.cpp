// The rendezvous store over real gRPC on loopback: a test-only Control service forwarding to the
// store handlers, GrpcStoreClient against it, deadlines, argument checks, and a 2-rank Gloo
// all-reduce bootstrapped through it.
#include "worker/comm/grpc_store.h"

#include <thread>

#include <grpcpp/grpcpp.h>

#include "comm/rank_threads.h"
#include "gtest/gtest.h"
#include "worker/comm/in_memory_store.h"

namespace exl3 {
namespace {

using exl3::testing::has_substr;
using exl3::testing::rank_values;
using exl3::testing::seconds_since;
using exl3::testing::test_prefix;
using std::chrono::milliseconds;

std::vector<char> bytes(const std::string& s) { return {s.begin(), s.end()}; }

// Only the store RPCs; Register and Session stay unimplemented.
class StoreOnlyControl final : public control::v1::Control::Service {
 public:
  explicit StoreOnlyControl(InMemoryStore& store) : store_(store) {}

  grpc::Status StoreSet(grpc::ServerContext*, const control::v1::StoreSetRequest* request,
                        control::v1::StoreSetResponse*) override {
    return handle_store_set(store_, *request);
  }
  grpc::Status StoreGet(grpc::ServerContext*, const control::v1::StoreGetRequest* request,
                        control::v1::StoreGetResponse* response) override {
    return handle_store_get(store_, *request, response);
  }

 private:
  InMemoryStore& store_;
};

class GrpcStore : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port_, 0);
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(port_),
                                   grpc::InsecureChannelCredentials());
  }
  void TearDown() override {
    store_.close();  // wakes any StoreGet still waiting, so Shutdown does not wait it out
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  }

  InMemoryStore store_;
  StoreOnlyControl service_{store_};
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(GrpcStore, SetThenGetAcrossThreads) {
  GrpcStoreClient writer(channel_);
  GrpcStoreClient reader(channel_);
  absl::StatusOr<std::vector<std::vector<char>>> values;
  std::thread waiter([&] { values = reader.get({"b", "a"}, milliseconds(5000)); });
  std::this_thread::sleep_for(milliseconds(100));
  ASSERT_TRUE(writer.set("a", bytes("alpha")).ok());
  ASSERT_TRUE(writer.set("b", bytes(std::string("\0\xff", 2))).ok());
  waiter.join();
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ(*values, (std::vector<std::vector<char>>{bytes(std::string("\0\xff", 2)),
                                                      bytes("alpha")}));
  // The values really live in the server's store.
  EXPECT_EQ(store_.get({"a"}, milliseconds(1)).value().at(0), bytes("alpha"));
}

TEST_F(GrpcStore, MissingKeyGivesDeadlineExceededWithinTheTimeout) {
  GrpcStoreClient client(channel_);
  ASSERT_TRUE(client.set("present", bytes("v")).ok());
  const auto start = std::chrono::steady_clock::now();
  auto values = client.get({"present", "absent"}, milliseconds(500));
  const double elapsed = seconds_since(start);
  EXPECT_EQ(values.status().code(), absl::StatusCode::kDeadlineExceeded) << values.status();
  // The server's answer, not the client deadline: it names the missing key.
  EXPECT_TRUE(has_substr(std::string(values.status().message()), "missing 1 of 2 keys: absent"));
  EXPECT_GE(elapsed, 0.45);
  EXPECT_LT(elapsed, 0.5 + 1.0);
}

TEST_F(GrpcStore, HandlersRejectBadRequests) {
  GrpcStoreClient client(channel_);
  EXPECT_EQ(client.set("", bytes("v")).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client.get({}, milliseconds(100)).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client.get({"k", ""}, milliseconds(100)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client.get({"k"}, milliseconds(0)).status().code(), absl::StatusCode::kInvalidArgument);

  // The server checks too, whatever a client sends.
  control::v1::StoreGetRequest request;
  request.add_keys("k");
  request.set_timeout_ms(-1);
  control::v1::StoreGetResponse response;
  EXPECT_EQ(handle_store_get(store_, request, &response).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  request.set_timeout_ms(10);
  request.clear_keys();
  EXPECT_EQ(handle_store_get(store_, request, &response).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(GrpcStore, UnreachableServerFailsWithinTheDeadline) {
  server_->Shutdown(std::chrono::system_clock::now());
  GrpcStoreClient client(channel_, milliseconds(500));
  const auto start = std::chrono::steady_clock::now();
  const absl::Status set = client.set("k", bytes("v"));
  EXPECT_TRUE(set.code() == absl::StatusCode::kUnavailable ||
              set.code() == absl::StatusCode::kDeadlineExceeded)
      << set;
  const absl::Status get = client.get({"k"}, milliseconds(200)).status();
  EXPECT_TRUE(get.code() == absl::StatusCode::kUnavailable ||
              get.code() == absl::StatusCode::kDeadlineExceeded)
      << get;
  EXPECT_LT(seconds_since(start), 0.5 + 0.2 + 2 * 1.0);
}

TEST_F(GrpcStore, BootstrapsTwoRankGlooAllReduce) {
  const int n = 2;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < n; ++rank) {
    threads.emplace_back([&, rank] {
      // Each rank has its own client, as separate worker processes would.
      GrpcStoreClient client(channel_);
      auto comm = make_gloo_communicator(
          exl3::testing::gloo_options(rank, n, test_prefix(), milliseconds(5000)), client);
      ASSERT_TRUE(comm.ok()) << comm.status();
      std::vector<float> data = rank_values(rank, 1000);
      ASSERT_TRUE((*comm)->all_reduce_sum(data).ok());
      for (size_t i = 0; i < data.size(); ++i) {
        ASSERT_EQ(data[i], static_cast<float>(1000 + 2 * i)) << "rank " << rank << " [" << i << "]";
      }
    });
  }
  for (std::thread& t : threads) t.join();
  // The rendezvous went through the coordinator-side store.
  EXPECT_TRUE(store_.get({test_prefix() + "/0", test_prefix() + "/1"}, milliseconds(1)).ok());
}

}  // namespace
}  // namespace exl3
