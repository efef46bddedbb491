// Tests of ProcessGroup, SignalWatcher and wait_event with /bin/sh and /bin/sleep children:
// exit codes and signals are reported with the right rank, terminate_all escalates to SIGKILL,
// nothing is left running or unreaped, environment variables and prefixed output reach their
// destinations, and the children of a SIGKILLed launcher die with it.
#include "launch/process/process_group.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "launch/process/child_process.h"
#include "launch/process/signal_watcher.h"
#include "launch/process/wait_event.h"

namespace exl3 {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

ProcessClock::time_point in(milliseconds d) { return ProcessClock::now() + d; }

ProcessSpec sh(const std::string& script) { return ProcessSpec{{"/bin/sh", "-c", script}, {}, ""}; }
ProcessSpec sleeper() { return ProcessSpec{{"/bin/sleep", "60"}, {}, ""}; }

ProcessGroupOptions inherit_output() {
  ProcessGroupOptions o;
  o.output = ChildOutput::kInherit;
  return o;
}

bool gone(pid_t pid) { return ::kill(pid, 0) == -1 && errno == ESRCH; }

// Reaps `pid` (a child of this process) within the deadline; returns its wait status or -1.
int reap_within(pid_t pid, ProcessClock::time_point deadline) {
  while (ProcessClock::now() < deadline) {
    int status = 0;
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0 && errno != EINTR) return -1;
    ::usleep(2000);
  }
  return -1;
}

// Reads from `fd` until `lines` newlines have arrived or the deadline passes.
std::string read_lines(int fd, int lines, ProcessClock::time_point deadline) {
  std::string out;
  while (std::count(out.begin(), out.end(), '\n') < lines) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, poll_timeout_ms(deadline)) <= 0) break;
    char buf[256];
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

std::string read_file(FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string out;
  char buf[256];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  return out;
}

class ProcessGroupTest : public ::testing::Test {
 protected:
  // Orphaned grandchildren are re-parented to this process instead of init (which in a
  // container may never reap them), so tests can check how they ended.
  void SetUp() override { ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0); }
};

TEST_F(ProcessGroupTest, ReportsExitCodeWithRank) {
  auto group = ProcessGroup::spawn({sleeper(), sh("exit 3")}, inherit_output());
  ASSERT_TRUE(group.ok()) << group.status();
  auto exit = (*group)->wait_any(in(seconds(5)));
  ASSERT_TRUE(exit.ok()) << exit.status();
  ASSERT_TRUE(exit->has_value());
  EXPECT_EQ((*exit)->rank, 1);
  EXPECT_EQ((*exit)->pid, (*group)->pid(1));
  EXPECT_FALSE((*exit)->killed_by_signal());
  EXPECT_EQ((*exit)->exit_code, 3);
  EXPECT_EQ((*exit)->describe(), "worker 1 (pid " + std::to_string((*group)->pid(1)) + ") exited with code 3");
  EXPECT_TRUE((*group)->alive(0));
  EXPECT_FALSE((*group)->alive(1));
  EXPECT_EQ((*group)->pending_count(), 1);
  EXPECT_TRUE(gone((*group)->pid(1)));

  auto stopped = (*group)->terminate_all(milliseconds(2000));
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  ASSERT_EQ(stopped->size(), 1u);
  EXPECT_EQ((*stopped)[0].rank, 0);
  EXPECT_EQ((*stopped)[0].signal, SIGTERM);
  EXPECT_TRUE(gone((*group)->pid(0)));
  EXPECT_EQ((*group)->pending_count(), 0);
}

TEST_F(ProcessGroupTest, ReportsSigkill) {
  auto group = ProcessGroup::spawn({sleeper(), sleeper(), sleeper()}, inherit_output());
  ASSERT_TRUE(group.ok()) << group.status();
  EXPECT_EQ((*group)->alive_count(), 3);
  ASSERT_EQ(::kill((*group)->pid(2), SIGKILL), 0);
  auto exit = (*group)->wait_any(in(seconds(5)));
  ASSERT_TRUE(exit.ok() && exit->has_value());
  EXPECT_EQ((*exit)->rank, 2);
  EXPECT_TRUE((*exit)->killed_by_signal());
  EXPECT_EQ((*exit)->signal, SIGKILL);
  EXPECT_NE((*exit)->describe().find("was killed by SIGKILL"), std::string::npos) << (*exit)->describe();
  EXPECT_EQ((*group)->alive_count(), 2);
}

TEST_F(ProcessGroupTest, WaitAnyReturnsAtDeadline) {
  auto group = ProcessGroup::spawn({sleeper()}, inherit_output());
  ASSERT_TRUE(group.ok()) << group.status();
  const auto start = ProcessClock::now();
  auto exit = (*group)->wait_any(start + milliseconds(100));
  const auto waited = ProcessClock::now() - start;
  ASSERT_TRUE(exit.ok());
  EXPECT_FALSE(exit->has_value());
  EXPECT_GE(waited, milliseconds(100));
  EXPECT_LT(waited, seconds(2));
}

TEST_F(ProcessGroupTest, TerminateAllKillsChildrenIgnoringSigterm) {
  ProcessGroupOptions options;
  options.output = ChildOutput::kPrefixLines;
  int out[2];
  ASSERT_EQ(::pipe(out), 0);
  options.stdout_fd = out[1];
  // Rank 0 ignores SIGTERM itself; rank 1 is a shell that ignores it and has a grandchild in its
  // process group that ignores it too. Each says when its trap is set.
  auto group = ProcessGroup::spawn(
      {sh("trap '' TERM; echo ready; exec /bin/sleep 60"), sh("trap '' TERM; /bin/sleep 60 & echo $!; wait")}, options);
  ASSERT_TRUE(group.ok()) << group.status();
  const std::string lines = read_lines(out[0], 2, in(seconds(5)));
  const size_t at = lines.find("[worker 1] ");
  ASSERT_NE(at, std::string::npos) << lines;
  ASSERT_NE(lines.find("[worker 0] ready\n"), std::string::npos) << lines;
  const pid_t grandchild = std::stoi(lines.substr(at + 11));

  const auto start = ProcessClock::now();
  auto stopped = (*group)->terminate_all(milliseconds(300));
  const auto took = ProcessClock::now() - start;
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  ASSERT_EQ(stopped->size(), 2u);
  for (const ChildExit& e : *stopped) EXPECT_EQ(e.signal, SIGKILL) << e.describe();
  EXPECT_GE(took, milliseconds(300));
  EXPECT_LT(took, seconds(3));
  for (pid_t pid : (*group)->pids()) EXPECT_TRUE(gone(pid)) << pid;

  const int status = reap_within(grandchild, in(seconds(2)));
  ASSERT_NE(status, -1) << "grandchild " << grandchild << " was not killed";
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  EXPECT_TRUE(gone(grandchild));
  group->reset();
  ::close(out[0]);
  ::close(out[1]);
}

TEST_F(ProcessGroupTest, EnvironmentReachesChild) {
  ASSERT_EQ(::setenv("EXL3_TEST_REPLACED", "old", 1), 0);
  ProcessSpec spec =
      sh("test \"$CUDA_VISIBLE_DEVICES\" = 3 || exit 1; test \"$EXL3_TEST_REPLACED\" = new || exit 2; "
         "test -n \"$PATH\" || exit 4; exit \"$EXL3_TEST_CODE\"");
  spec.env = {{"CUDA_VISIBLE_DEVICES", "3"}, {"EXL3_TEST_REPLACED", "new"}, {"EXL3_TEST_CODE", "42"}};
  auto group = ProcessGroup::spawn({spec}, inherit_output());
  ASSERT_TRUE(group.ok()) << group.status();
  auto exit = (*group)->wait_any(in(seconds(5)));
  ASSERT_TRUE(exit.ok() && exit->has_value());
  EXPECT_EQ((*exit)->exit_code, 42);
  ::unsetenv("EXL3_TEST_REPLACED");
}

TEST(MergedEnvironment, OverridesReplaceAndAppend) {
  const char* base[] = {"A=1", "B=2", "C=3", nullptr};
  const std::vector<std::string> env = merged_environment(base, {{"B", "x"}, {"D", "4"}, {"B", "y"}});
  EXPECT_EQ(env, (std::vector<std::string>{"A=1", "C=3", "D=4", "B=y"}));
}

TEST_F(ProcessGroupTest, PrefixesOutputLines) {
  FILE* out = std::tmpfile();
  FILE* err = std::tmpfile();
  ASSERT_TRUE(out != nullptr && err != nullptr);
  ProcessGroupOptions options;
  options.stdout_fd = ::fileno(out);
  options.stderr_fd = ::fileno(err);
  ProcessSpec second = sh("echo two");
  second.label = "rank one";
  {
    auto group = ProcessGroup::spawn({sh("echo hello; echo oops >&2; printf 'no newline'"), second}, options);
    ASSERT_TRUE(group.ok()) << group.status();
    for (int i = 0; i < 2; ++i) {
      auto exit = (*group)->wait_any(in(seconds(5)));
      ASSERT_TRUE(exit.ok() && exit->has_value());
      EXPECT_TRUE((*exit)->success()) << (*exit)->describe();
    }
  }  // the destructor drains the pipes
  const std::string o = read_file(out);
  // Lines of different children may interleave; within one child they keep their order.
  const size_t hello = o.find("[worker 0] hello\n");
  const size_t tail = o.find("[worker 0] no newline\n");
  EXPECT_NE(hello, std::string::npos) << o;
  EXPECT_NE(tail, std::string::npos) << o;
  EXPECT_LT(hello, tail) << o;
  EXPECT_NE(o.find("[rank one] two\n"), std::string::npos) << o;
  EXPECT_EQ(read_file(err), "[worker 0] oops\n");
  std::fclose(out);
  std::fclose(err);
}

TEST_F(ProcessGroupTest, SpawnErrors) {
  auto missing = ProcessGroup::spawn({ProcessSpec{{"/nonexistent/exl3-worker"}, {}, ""}}, inherit_output());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound) << missing.status();
  auto bare = ProcessGroup::spawn({ProcessSpec{{"sleep", "1"}, {}, ""}}, inherit_output());
  EXPECT_EQ(bare.status().code(), absl::StatusCode::kInvalidArgument) << bare.status();
  auto bad_env = ProcessGroup::spawn({ProcessSpec{{"/bin/true"}, {{"A=B", "1"}}, ""}}, inherit_output());
  EXPECT_EQ(bad_env.status().code(), absl::StatusCode::kInvalidArgument) << bad_env.status();
  // Passes the checks before fork but fails in execve (ENOEXEC), reported through the error pipe.
  char script[] = "/tmp/exl3_not_a_program_XXXXXX";
  const int fd = ::mkstemp(script);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd,
                    "\x7f"
                    "ELF garbage",
                    12),
            12);
  ::close(fd);
  ASSERT_EQ(::chmod(script, 0755), 0);
  auto not_exec = ProcessGroup::spawn({ProcessSpec{{script}, {}, ""}}, inherit_output());
  ::unlink(script);
  ASSERT_FALSE(not_exec.ok());
  EXPECT_NE(not_exec.status().message().find("exec "), std::string::npos) << not_exec.status();
  // Rank 1 fails; rank 0 has to be stopped by spawn and the error names rank 1.
  auto partial = ProcessGroup::spawn({sleeper(), ProcessSpec{{"/nonexistent/x"}, {}, ""}}, inherit_output());
  ASSERT_FALSE(partial.ok());
  EXPECT_NE(partial.status().message().find("worker 1"), std::string::npos) << partial.status();
}

// A launcher process holding a group of one `sleep 60` is SIGKILLed: the sleep must die too.
TEST_F(ProcessGroupTest, ChildrenDieWithSigkilledLauncher) {
  int report[2];
  ASSERT_EQ(::pipe(report), 0);
  const pid_t launcher = ::fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {
    ::close(report[0]);
    auto group = ProcessGroup::spawn({sleeper()}, inherit_output());
    const pid_t child = group.ok() ? (*group)->pid(0) : -1;
    if (::write(report[1], &child, sizeof(child)) != sizeof(child)) ::_exit(1);
    ::sleep(30);  // the test kills us long before
    ::_exit(0);
  }
  ::close(report[1]);
  pid_t child = -1;
  pollfd p{report[0], POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 5000), 1);
  ASSERT_EQ(::read(report[0], &child, sizeof(child)), static_cast<ssize_t>(sizeof(child)));
  ::close(report[0]);
  ASSERT_GT(child, 0);
  ASSERT_FALSE(gone(child));

  ASSERT_EQ(::kill(launcher, SIGKILL), 0);
  const int launcher_status = reap_within(launcher, in(seconds(5)));
  ASSERT_TRUE(WIFSIGNALED(launcher_status) && WTERMSIG(launcher_status) == SIGKILL);
  // The orphan is re-parented to this process (a subreaper), so its end can be observed.
  const int child_status = reap_within(child, in(seconds(2)));
  ASSERT_NE(child_status, -1) << "child " << child << " outlived its launcher";
  EXPECT_TRUE(WIFSIGNALED(child_status) && WTERMSIG(child_status) == SIGKILL);
  EXPECT_TRUE(gone(child));
}

TEST(SignalWatcher, ReportsEachSignalOnce) {
  auto watcher = SignalWatcher::create();
  ASSERT_TRUE(watcher.ok()) << watcher.status();
  EXPECT_EQ(SignalWatcher::create().status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(SignalWatcher::create({SIGKILL}).status().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_EQ(::raise(SIGTERM), 0);
  ASSERT_EQ(::kill(::getpid(), SIGINT), 0);
  auto first = (*watcher)->wait(in(seconds(1)));
  ASSERT_TRUE(first.ok() && first->has_value());
  EXPECT_EQ(**first, SIGTERM);
  auto second = (*watcher)->wait(in(seconds(1)));
  ASSERT_TRUE(second.ok() && second->has_value());
  EXPECT_EQ(**second, SIGINT);
  auto none = (*watcher)->wait(in(milliseconds(50)));
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
}

TEST_F(ProcessGroupTest, WaitEventSeesSignalsExitsAndDeadline) {
  auto watcher = SignalWatcher::create();
  ASSERT_TRUE(watcher.ok()) << watcher.status();
  auto group = ProcessGroup::spawn({sh("exit 5"), sleeper()}, inherit_output());
  ASSERT_TRUE(group.ok()) << group.status();
  ASSERT_EQ(::kill(::getpid(), SIGTERM), 0);

  auto event = wait_event(group->get(), **watcher, in(seconds(5)));
  ASSERT_TRUE(event.ok()) << event.status();
  EXPECT_EQ(event->kind, SupervisorEvent::Kind::kSignal);
  EXPECT_EQ(event->signal, SIGTERM);

  event = wait_event(group->get(), **watcher, in(seconds(5)));
  ASSERT_TRUE(event.ok()) << event.status();
  ASSERT_EQ(event->kind, SupervisorEvent::Kind::kChildExited);
  EXPECT_EQ(event->exit.rank, 0);
  EXPECT_EQ(event->exit.exit_code, 5);

  event = wait_event(group->get(), **watcher, in(milliseconds(100)));
  ASSERT_TRUE(event.ok()) << event.status();
  EXPECT_EQ(event->kind, SupervisorEvent::Kind::kDeadline);

  // The launcher's SIGTERM handler is not inherited: the sleeper dies of SIGTERM at once.
  auto stopped = (*group)->terminate_all(milliseconds(5000));
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  ASSERT_EQ(stopped->size(), 1u);
  EXPECT_EQ((*stopped)[0].signal, SIGTERM);
}

}  // namespace
}  // namespace exl3
