// BannedStringFilter: hand cases (hold-back while the text could still become a banned string,
// release as soon as it cannot, ASCII-only case-insensitivity, a match starting inside a token and
// spanning several, multi-byte characters held in the detokenizer, cut(), logprobs travelling with
// their tokens, the filter off) and a randomized generator that rewinds and bans like the serving
// loop, checked against brute force: every match is the earliest occurrence (lower-cased A-Z) and
// rewinds to the first token reaching into it, no released token or byte is ever retracted, and
// the final text holds no banned string.
#include "coordinator/server/banned_string_filter.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace exl3 {
namespace {

using Release = BannedStringFilter::Release;

std::vector<int32_t> ids(std::initializer_list<int32_t> list) { return std::vector<int32_t>(list); }

TEST(BannedStringFilter, OffPassesEverythingAtOnce) {
  BannedStringFilter f({});
  EXPECT_FALSE(f.active());
  f.push(5, "dra", false);
  f.push(6, "", true);  // bytes held in the detokenizer: the token still passes, as without bans
  EXPECT_FALSE(f.find().has_value());
  const Release r = f.take_safe();
  EXPECT_EQ(r.text, "dra");
  EXPECT_EQ(r.tokens, ids({5, 6}));
  EXPECT_EQ(f.released_tokens(), 2);
}

TEST(BannedStringFilter, HoldsBackWhileTheTextCouldBecomeABannedString) {
  BannedStringFilter f({"dragon"});
  f.push(1, "The", false);
  f.push(2, " dr", false);
  Release r = f.take_safe();
  EXPECT_EQ(r.text, "The");  // " dr" may start "dragon"; the space belongs to the held token
  EXPECT_EQ(r.tokens, ids({1}));
  f.push(3, "ag", false);
  r = f.take_safe();
  EXPECT_TRUE(r.text.empty());
  EXPECT_TRUE(r.tokens.empty());
  f.push(4, "on", false);
  const auto m = f.find();
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->text_offset, 4u);
  EXPECT_EQ(m->token_index, 1);  // " dr" is the first token reaching into "dragon"
  f.rewind(m->token_index);
  EXPECT_EQ(f.text(), "The");
  EXPECT_EQ(f.num_tokens(), 1);
  f.push(7, " wyvern", false);
  EXPECT_FALSE(f.find().has_value());
  r = f.take_safe();
  EXPECT_EQ(r.text, " wyvern");
  EXPECT_EQ(r.tokens, ids({7}));
}

TEST(BannedStringFilter, ReleasesAsSoonAsNoBannedStringCanFollow) {
  BannedStringFilter f({"abc", "xyz"});
  f.push(1, "ab", false);
  EXPECT_TRUE(f.take_safe().tokens.empty());
  f.push(2, "d", false);  // "abd": neither "abc" nor "xyz" can start in it any more
  const Release r = f.take_safe();
  EXPECT_EQ(r.text, "abd");
  EXPECT_EQ(r.tokens, ids({1, 2}));
  f.push(3, "x", false);
  EXPECT_TRUE(f.take_safe().tokens.empty());
  f.push(4, "a", false);
  // "xa" cannot become "xyz" now, but a rewind to "a" could still put "yz" after "x"; and "a"
  // may start "abc".
  EXPECT_TRUE(f.take_safe().tokens.empty());
  f.push(5, "z", false);
  const Release rest = f.take_safe();
  EXPECT_EQ(rest.text, "xaz");
  EXPECT_EQ(rest.tokens, ids({3, 4, 5}));
}

TEST(BannedStringFilter, MatchesAsciiCaseInsensitively) {
  for (const char* text : {"DRAGON", "dRaGoN", "Dragon"}) {
    BannedStringFilter f({"drAGon"});
    f.push(1, "A ", false);
    f.push(2, text, false);
    const auto m = f.find();
    ASSERT_TRUE(m.has_value()) << text;
    EXPECT_EQ(m->text_offset, 2u);
    EXPECT_EQ(m->token_index, 1);
  }
  // Only A-Z fold: "É" (C3 89) is not "é" (C3 A9).
  BannedStringFilter f({"\xc3\xa9t\xc3\xa9"});
  f.push(1, "\xc3\x89T\xc3\x89", false);
  EXPECT_FALSE(f.find().has_value());
  f.push(2, " \xc3\xa9T\xc3\xa9", false);
  const auto m = f.find();
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->text_offset, 6u);
  EXPECT_EQ(m->token_index, 1);
}

TEST(BannedStringFilter, MatchStartingInsideATokenAndSpanningSeveral) {
  BannedStringFilter f({"llo wor"});
  f.push(10, "Say", false);
  f.push(11, " hello", false);
  f.push(12, " w", false);
  f.push(13, "or", false);
  f.push(14, "ld", false);
  const auto m = f.find();
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->text_offset, 6u);
  EXPECT_EQ(m->token_index, 1);  // " hello": its text reaches into the match
  // Only "Say" was safe; cutting here keeps the text before the match, not the token holding it.
  const Release r = f.cut(*m);
  EXPECT_EQ(r.text, "Say he");
  EXPECT_EQ(r.tokens, ids({10}));
  EXPECT_EQ(f.num_tokens(), 1);
}

TEST(BannedStringFilter, EarliestOfSeveralMatches) {
  BannedStringFilter f({"cd", "bcx", "b"});
  f.push(1, "a", false);
  f.push(2, "bcd", false);
  const auto m = f.find();
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->text_offset, 1u);
  EXPECT_EQ(m->token_index, 1);
}

// A two-byte character split over two tokens: the detokenizer returns nothing for the first and
// the character with the second.
TEST(BannedStringFilter, MultiByteCharacterHeldInTheDetokenizer) {
  BannedStringFilter f({"\xc3\xa9t"});
  f.push(1, "d", false);
  f.push(2, "", true);         // 0xC3
  f.push(3, "\xc3\xa9", false);  // 0xA9 completes "é"
  Release r = f.take_safe();
  EXPECT_EQ(r.text, "d");  // "é" may start "ét"
  EXPECT_EQ(r.tokens, ids({1}));
  f.push(4, "t", false);
  const auto m = f.find();
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->text_offset, 1u);
  EXPECT_EQ(m->token_index, 1) << "the run's first token (the lead byte) is where the match began";
  f.rewind(m->token_index);
  EXPECT_EQ(f.text(), "d");
  EXPECT_EQ(f.num_tokens(), 1);

  // A run is never released before its text is known, even when no banned string is near.
  BannedStringFilter g({"zzz"});
  g.push(1, "a", false);
  g.push(2, "", true);
  r = g.take_safe();
  EXPECT_EQ(r.tokens, ids({1}));
  g.push(3, "", true);  // a three-byte character
  EXPECT_TRUE(g.take_safe().tokens.empty());
  g.push(4, "\xe2\x82\xac", false);
  r = g.take_safe();
  EXPECT_EQ(r.text, "\xe2\x82\xac");
  EXPECT_EQ(r.tokens, ids({2, 3, 4}));
  // A run ended by the detokenizer's flush at the end of generation.
  g.push(5, "", true);
  g.push_tail("\xef\xbf\xbd");
  r = g.take_all();
  EXPECT_EQ(r.text, "\xef\xbf\xbd");
  EXPECT_EQ(r.tokens, ids({5}));
}

TEST(BannedStringFilter, LogprobsTravelWithTheirTokens) {
  BannedStringFilter f({"xy"});
  auto lp = [](float v) { return TokenLogprobs{v, {{7, v}}}; };
  f.push(1, "a", false, lp(-1.0f));
  f.push(2, "x", false, lp(-2.0f));
  Release r = f.take_safe();
  ASSERT_EQ(r.logprobs.size(), 1u);
  EXPECT_EQ(r.logprobs[0].logprob, -1.0f);
  f.push(3, "b", false, lp(-3.0f));
  r = f.take_safe();
  EXPECT_EQ(r.tokens, ids({2, 3}));
  ASSERT_EQ(r.logprobs.size(), 2u);
  EXPECT_EQ(r.logprobs[0].logprob, -2.0f);
  EXPECT_EQ(r.logprobs[1].logprob, -3.0f);
  EXPECT_EQ(r.logprobs[1].top[0].id, 7);
}

// A UTF-8 "detokenizer" for 1- and 2-byte characters: it holds a lead byte until the next byte.
class FakeDetokenizer {
 public:
  std::string push(const std::string& bytes) {
    std::string out;
    for (const char c : bytes) {
      const auto b = static_cast<unsigned char>(c);
      if (!pending_.empty()) {
        if ((b & 0xC0) == 0x80) {
          out += pending_ + c;
          pending_.clear();
          continue;
        }
        out += "\xef\xbf\xbd";
        pending_.clear();
      }
      if (b < 0x80) {
        out += c;
      } else if ((b & 0xE0) == 0xC0) {
        pending_ = c;
      } else {
        out += "\xef\xbf\xbd";
      }
    }
    return out;
  }
  std::string flush() {
    const std::string out = pending_.empty() ? "" : "\xef\xbf\xbd";
    pending_.clear();
    return out;
  }
  bool pending() const { return !pending_.empty(); }

 private:
  std::string pending_;
};

std::string lower(std::string s) {
  for (char& c : s) c = (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
  return s;
}

// Generates like the serving loop: draw a token (never one banned at its position), push it,
// rewind on a match (banning the match's first token there), release what is safe.
TEST(BannedStringFilter, RandomGenerationAgainstBruteForce) {
  const std::vector<std::string> vocab = {"a", "b", "A", "B", "ab", "Ba", "c", " ", "aB c", "\xc3",
                                          "\xa9", "\xc3\xa9", "\xc3\x89", "b\xc3", "\xa9" "a"};
  const std::vector<std::string> pieces = {"a", "b", "A", "B", "c", " ", "\xc3\xa9", "\xc3\x89"};
  std::mt19937 rng(4711);
  int64_t rewinds = 0, cuts = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<std::string> banned;
    const int count = 1 + static_cast<int>(rng() % 3);
    for (int i = 0; i < count; ++i) {
      std::string s;
      const int len = 1 + static_cast<int>(rng() % 4);
      for (int k = 0; k < len; ++k) s += pieces[rng() % pieces.size()];
      banned.push_back(s);
    }
    BannedStringFilter f(banned);
    FakeDetokenizer detok;
    std::vector<int32_t> tokens;              // kept tokens (what the scheduler holds)
    std::map<int32_t, std::set<int32_t>> bans;  // output position -> banned vocab ids
    std::string streamed;
    std::vector<int32_t> streamed_tokens;
    const int32_t length = 1 + static_cast<int32_t>(rng() % 30);
    bool cut = false;
    for (int guard = 0; guard < 2000 && static_cast<int32_t>(tokens.size()) < length && !cut; ++guard) {
      const int32_t position = static_cast<int32_t>(tokens.size());
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < static_cast<int32_t>(vocab.size()); ++id) {
        if (bans[position].count(id) == 0) allowed.push_back(id);
      }
      ASSERT_FALSE(allowed.empty());
      const int32_t id = allowed[rng() % allowed.size()];
      tokens.push_back(id);
      const std::string text = detok.push(vocab[id]);
      f.push(id, text, detok.pending());
      std::string raw;  // the text of the kept tokens as far as the detokenizer emitted it
      {
        FakeDetokenizer d;
        for (const int32_t t : tokens) raw += d.push(vocab[t]);
      }
      ASSERT_EQ(f.text(), raw) << "trial " << trial;
      const auto m = f.find();
      size_t first = std::string::npos;
      for (const std::string& s : banned) first = std::min(first, lower(raw).find(lower(s)));
      std::string banned_list;
      for (const std::string& b : banned) banned_list += "[" + b + "]";
      ASSERT_EQ(m.has_value(), first != std::string::npos)
          << "trial " << trial << ": text [" << raw << "], banned " << banned_list << ", " << f.released_tokens()
          << " tokens released";
      if (m.has_value()) {
        ASSERT_EQ(m->text_offset, first) << "trial " << trial;
        // The first token whose text reaches past the match start (a held run reaches to its end).
        FakeDetokenizer d;
        std::string text;
        int32_t expected = -1;
        for (size_t i = 0; i < tokens.size() && expected < 0; ++i) {
          text += d.push(vocab[tokens[i]]);
          // Tokens of a run end where the run's text ends: find the end of the run holding i.
          FakeDetokenizer e = d;
          std::string ahead = text;
          size_t j = i;
          while (e.pending() && j + 1 < tokens.size()) ahead += e.push(vocab[tokens[++j]]);
          if (e.pending() || ahead.size() > first) expected = static_cast<int32_t>(i);
        }
        ASSERT_EQ(m->token_index, expected) << "trial " << trial;
        ASSERT_GE(m->token_index, f.released_tokens()) << "a released token would be retracted";
        if (rng() % 8 == 0) {
          // The sequence could not rewind: end at the banned string.
          const Release r = f.cut(*m);
          streamed += r.text;
          streamed_tokens.insert(streamed_tokens.end(), r.tokens.begin(), r.tokens.end());
          ASSERT_EQ(streamed, raw.substr(0, first)) << "trial " << trial;
          ASSERT_EQ(streamed_tokens, std::vector<int32_t>(tokens.begin(), tokens.begin() + m->token_index));
          ++cuts;
          cut = true;
          break;
        }
        bans.erase(bans.upper_bound(m->token_index), bans.end());
        bans[m->token_index].insert(tokens[m->token_index]);
        tokens.resize(static_cast<size_t>(m->token_index));
        f.rewind(m->token_index);
        detok = FakeDetokenizer();
        std::string replay;
        for (const int32_t t : tokens) replay += detok.push(vocab[t]);
        ASSERT_EQ(replay, f.text()) << "trial " << trial;
        ASSERT_FALSE(detok.pending());
        ++rewinds;
      }
      const Release r = f.take_safe();
      streamed += r.text;
      streamed_tokens.insert(streamed_tokens.end(), r.tokens.begin(), r.tokens.end());
      ASSERT_EQ(streamed, f.text().substr(0, streamed.size())) << "trial " << trial;
      ASSERT_LE(streamed_tokens.size(), tokens.size());
      ASSERT_TRUE(std::equal(streamed_tokens.begin(), streamed_tokens.end(), tokens.begin())) << "trial " << trial;
    }
    if (cut) continue;
    f.push_tail(detok.flush());
    const auto m = f.find();
    const Release r = m.has_value() ? f.cut(*m) : f.take_all();
    streamed += r.text;
    streamed_tokens.insert(streamed_tokens.end(), r.tokens.begin(), r.tokens.end());
    for (const std::string& s : banned) {
      EXPECT_EQ(lower(streamed).find(lower(s)), std::string::npos) << "trial " << trial << ": \"" << s << "\"";
    }
    if (!m.has_value()) {
      EXPECT_EQ(streamed_tokens, tokens) << "trial " << trial;
      EXPECT_EQ(streamed, f.text()) << "trial " << trial;
    }
  }
  EXPECT_GT(rewinds, 1000);
  EXPECT_GT(cuts, 100);
  std::printf("%lld rewinds, %lld cuts\n", static_cast<long long>(rewinds), static_cast<long long>(cuts));
}

}  // namespace
}  // namespace exl3
