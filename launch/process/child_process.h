// Starting one child process with fork + execve under the launcher's no-orphan rules. The child
// runs only async-signal-safe calls between fork and exec (everything it needs is prepared in
// the parent first) and, in this order:
//   - resets every signal disposition to the default and later clears the signal mask, so the
//     launcher's handlers never run in the child and a worker always starts from a clean slate;
//   - becomes the leader of its own process group (the parent sets it too, so there is no window
//     in which the parent could signal the wrong group): terminal Ctrl-C reaches the launcher
//     only, which then stops the workers in order, and the launcher can signal a worker together
//     with any helpers it started;
//   - sets PR_SET_PDEATHSIG = SIGKILL and then checks getppid(), so a launcher killed even
//     before that call cannot leave the child running;
//   - gets /dev/null as stdin, optionally pipes as stdout/stderr, and every other inherited
//     descriptor marked close-on-exec (close_range), so a worker never holds the launcher's
//     sockets;
//   - execs; an exec failure is sent back through a close-on-exec pipe and becomes the error of
//     start_child.
//
// PR_SET_PDEATHSIG fires when the *thread* that forked exits, not only the process: start
// children from a thread that lives as long as they should (the launcher's main thread).
// Nothing else in the process may reap children (no waitpid(-1), SIGCHLD not ignored); this is
// checked for SIGCHLD.
#pragma once

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "launch/process/unique_fd.h"

namespace exl3 {

struct ChildLaunch {
  // argv[0] is the program, a path containing '/' (absolute, or relative to the working
  // directory). There is no PATH search: the launcher always knows where its binaries are.
  std::vector<std::string> argv;
  // Set in the child on top of the parent's environment, replacing variables of the same name.
  std::vector<std::pair<std::string, std::string>> env;
  // Descriptors to become the child's stdout and stderr; -1 = inherit the parent's.
  int stdout_fd = -1;
  int stderr_fd = -1;
};

struct StartedChild {
  pid_t pid = -1;
  // A pidfd of the child: readable once it has exited (until it is reaped).
  UniqueFd pidfd;
};

// Starts the child and returns once it has exec'd. Errors: InvalidArgument (empty argv, argv[0]
// without '/', '=' in a variable name), NotFound / PermissionDenied (program, also when exec
// fails), FailedPrecondition (SIGCHLD ignored), DeadlineExceeded (no exec within 10 s).
absl::StatusOr<StartedChild> start_child(const ChildLaunch& launch);

// The environment a child gets, as "NAME=value" strings: the entries of `base` (a NULL-terminated
// array such as environ) whose names are not overridden, in their order, then `overrides` in the
// order given (the last setting of a repeated name wins).
std::vector<std::string> merged_environment(const char* const* base,
                                            const std::vector<std::pair<std::string, std::string>>& overrides);

}  // namespace exl3
