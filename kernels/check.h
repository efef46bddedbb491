// CHECK-style macros for broken invariants (and, in CUDA code, CUDA errors): print the failed
// expression, file, line and a message, then abort. Expected failures use absl::Status instead.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"

namespace exl3::internal {

[[noreturn]] inline void check_failed(const char* expr, const char* file, int line,
                                      const std::string& message) {
  std::fprintf(stderr, "EXL3 check failed: %s at %s:%d%s%s\n", expr, file, line,
               message.empty() ? "" : ": ", message.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace exl3::internal

// EXL3_CHECK(cond, parts...): parts are joined with absl::StrCat.
#define EXL3_CHECK(cond, ...)                                                         \
  do {                                                                                \
    if (!(cond)) [[unlikely]] {                                                       \
      ::exl3::internal::check_failed(#cond, __FILE__, __LINE__,                       \
                                     ::absl::StrCat("" __VA_OPT__(, ) __VA_ARGS__));  \
    }                                                                                 \
  } while (0)

#define EXL3_CHECK_EQ(a, b, ...) \
  EXL3_CHECK((a) == (b), "(", (a), " vs ", (b), ") " __VA_OPT__(, ) __VA_ARGS__)

// Evaluates an absl::Status expression and aborts if it is not OK (for tools and tests).
#define EXL3_CHECK_OK(expr)                                                      \
  do {                                                                           \
    const ::absl::Status exl3_status_ = (expr);                                  \
    if (!exl3_status_.ok()) [[unlikely]] {                                       \
      ::exl3::internal::check_failed(#expr, __FILE__, __LINE__,                  \
                                     std::string(exl3_status_.ToString()));      \
    }                                                                            \
  } while (0)

// Propagates a non-OK absl::Status from the current function.
#define EXL3_RETURN_IF_ERROR(expr)                 \
  do {                                             \
    ::absl::Status exl3_status_ = (expr);          \
    if (!exl3_status_.ok()) return exl3_status_;   \
  } while (0)

#define EXL3_CONCAT_INNER_(a, b) a##b
#define EXL3_CONCAT_(a, b) EXL3_CONCAT_INNER_(a, b)

// EXL3_ASSIGN_OR_RETURN(lhs, statusor_expr): unwraps an absl::StatusOr or returns its status.
#define EXL3_ASSIGN_OR_RETURN(lhs, expr) \
  EXL3_ASSIGN_OR_RETURN_IMPL_(EXL3_CONCAT_(exl3_statusor_, __LINE__), lhs, expr)
#define EXL3_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(tmp).value()
