// StopStringFilter against a brute-force reference: random texts streamed in random pieces with
// random stop-string sets (overlapping prefixes, repeats, long strings). It stops at the first delta
// that completes a stop string and streams exactly the text before the earliest stop string in
// what was fed by then (all of it after flush() when none occurs), never a byte past it.
#include "coordinator/server/stop_string_filter.h"

#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace exl3 {
namespace {

// Earliest position at which any stop string occurs in text, or npos.
size_t first_stop(const std::string& text, const std::vector<std::string>& stops) {
  size_t first = std::string::npos;
  for (const std::string& s : stops) first = std::min(first, text.find(s));
  return first;
}

std::string random_text(std::mt19937& rng, size_t length, const std::string& alphabet) {
  std::string t;
  for (size_t i = 0; i < length; ++i) t += alphabet[rng() % alphabet.size()];
  return t;
}

TEST(StopStringFilter, StreamsExactlyTheTextBeforeTheFirstStopString) {
  std::mt19937 rng(2026);
  for (int trial = 0; trial < 3000; ++trial) {
    const std::string alphabet = trial % 3 == 0 ? "ab" : trial % 3 == 1 ? "abc" : "abcdefgh ";
    std::vector<std::string> stops;
    const int count = 1 + static_cast<int>(rng() % 5);
    for (int i = 0; i < count; ++i) stops.push_back(random_text(rng, 1 + rng() % (trial % 7 == 0 ? 40 : 6), alphabet));
    const std::string text = random_text(rng, rng() % 120, alphabet);
    StopStringFilter filter(stops);
    std::string streamed;
    bool stopped = false;
    size_t fed = 0;
    while (fed < text.size() && !stopped) {
      const size_t piece = std::min(text.size() - fed, static_cast<size_t>(1 + rng() % 5));
      const StopStringFilter::Result r = filter.append(text.substr(fed, piece));
      fed += piece;
      streamed += r.emit;
      stopped = r.stopped;
      const size_t stop = first_stop(text.substr(0, fed), stops);
      // Never a byte at or past a stop string that is complete in what was fed so far, nor one
      // that could still begin a stop string.
      ASSERT_LE(streamed.size(), stop == std::string::npos ? fed : stop) << "trial " << trial;
      ASSERT_EQ(streamed, text.substr(0, streamed.size())) << "trial " << trial;
      ASSERT_EQ(stopped, stop != std::string::npos) << "trial " << trial << ": stop at " << stop;
    }
    if (!stopped) streamed += filter.flush();
    // Generation ends at the first delta that completes a stop string: the text before the
    // earliest stop string within what was fed by then (a longer one starting earlier but not yet
    // complete does not count), or all of it.
    const size_t stop = first_stop(text.substr(0, fed), stops);
    EXPECT_EQ(streamed, stop == std::string::npos ? text : text.substr(0, stop)) << "trial " << trial;
  }
}

TEST(StopStringFilter, HoldsBackOnlyWhatCouldStillStartAStopString) {
  StopStringFilter filter({"STOP", "Xyz"});
  StopStringFilter::Result r = filter.append("hello ST");
  EXPECT_EQ(r.emit, "hello ");  // "ST" could become STOP
  EXPECT_FALSE(r.stopped);
  r = filter.append("ART X");
  EXPECT_EQ(r.emit, "START ");  // "X" could become Xyz
  r = filter.append("y");
  EXPECT_EQ(r.emit, "");
  r = filter.append("z and more");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.emit, "");
  EXPECT_EQ(filter.flush(), "");
}

TEST(StopStringFilter, ManyLongStopStringsStillStreamCorrectly) {
  // 64 stop strings of 256 bytes sharing long prefixes with the text: the worst case the request
  // limits allow; the hold-back must still be exact.
  std::vector<std::string> stops;
  for (int i = 0; i < 64; ++i) stops.push_back(std::string(255, 'a') + static_cast<char>('A' + i % 26));
  StopStringFilter filter(stops);
  std::string streamed;
  for (int i = 0; i < 400; ++i) streamed += filter.append("a").emit;
  EXPECT_EQ(streamed, std::string(400 - 255, 'a'));  // the last 255 'a' could start a stop string
  const StopStringFilter::Result r = filter.append("B");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(streamed + r.emit, std::string(400 - 255, 'a'));
}

}  // namespace
}  // namespace exl3
