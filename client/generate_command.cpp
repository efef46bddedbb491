// exl3-client generate: streams a completion to stdout and reports speed on stderr.
#include <unistd.h>

#include <chrono>
#include <cstdio>

#include "client/commands.h"
#include "client/format.h"
#include "client/rpc_util.h"
#include "proto/inference.grpc.pb.h"

namespace exl3::client {

int run_generate(const ClientConfig& config, const exl3::v1::GenerateRequest& request, bool json) {
  std::unique_ptr<exl3::v1::Inference::Stub> stub = exl3::v1::Inference::NewStub(make_channel(config));
  grpc::ClientContext context;
  set_deadline(context, config);
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  auto seconds_since_start = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };

  std::unique_ptr<grpc::ClientReader<exl3::v1::GenerateResponse>> reader = stub->Generate(&context, request);
  exl3::v1::GenerateResponse response;
  GenerateSummary summary;
  char last_char = '\n';
  while (reader->Read(&response)) {
    if (response.token_ids_size() > 0 && summary.first_token_s < 0) summary.first_token_s = seconds_since_start();
    summary.tokens += response.token_ids_size();
    if (response.finish_reason() != exl3::v1::FINISH_REASON_UNSPECIFIED)
      summary.finish_reason = response.finish_reason();
    if (json) {
      std::printf("%s\n", to_json(response).c_str());
    } else if (!response.text().empty()) {
      std::fwrite(response.text().data(), 1, response.text().size(), stdout);
      last_char = response.text().back();
    }
    std::fflush(stdout);
  }
  const grpc::Status status = reader->Finish();
  summary.total_s = seconds_since_start();
  // On a terminal, end the text's last line so the summary and the shell prompt start afresh;
  // piped output stays exactly the generated text.
  if (!json && last_char != '\n' && ::isatty(STDOUT_FILENO)) {
    std::fputc('\n', stdout);
    std::fflush(stdout);
  }
  if (!status.ok()) return report_rpc_error("generate", status);
  std::fprintf(stderr, "%s\n", format_summary(summary).c_str());
  return kExitOk;
}

}  // namespace exl3::client
