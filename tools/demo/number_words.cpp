// English and French cardinal number words (tools/demo/number_words.hpp).
#include "demo/number_words.hpp"

#include <array>

#include "ffn/types.hpp"

namespace ffn::demo {
namespace {

void check(int64_t n) {
  if (n < 0 || n > kMaxNumberWords)
    throw Error("number words: " + std::to_string(n) + " is outside 0.." + std::to_string(kMaxNumberWords));
}

std::string join(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (b.empty()) return a;
  return a + " " + b;
}

// ---- English -----------------------------------------------------------------
constexpr std::array<const char*, 20> kEnSmall = {
    "zero",    "one",     "two",       "three",    "four",     "five",    "six",
    "seven",   "eight",   "nine",      "ten",      "eleven",   "twelve",  "thirteen",
    "fourteen", "fifteen", "sixteen",  "seventeen", "eighteen", "nineteen"};
constexpr std::array<const char*, 10> kEnTens = {"",      "",      "twenty",  "thirty", "forty",
                                                 "fifty", "sixty", "seventy", "eighty", "ninety"};

// 1..999 (empty for 0).
std::string english_below_1000(int64_t n) {
  std::string s;
  if (n >= 100) s = std::string(kEnSmall[size_t(n / 100)]) + " hundred";
  n %= 100;
  if (n == 0) return s;
  std::string t;
  if (n < 20) {
    t = kEnSmall[size_t(n)];
  } else {
    t = kEnTens[size_t(n / 10)];
    if (n % 10) t += std::string("-") + kEnSmall[size_t(n % 10)];
  }
  return join(s, t);
}

// ---- French ------------------------------------------------------------------
constexpr std::array<const char*, 17> kFrSmall = {"zéro", "un",       "deux",    "trois", "quatre", "cinq",
                                                  "six",  "sept",     "huit",    "neuf",  "dix",    "onze",
                                                  "douze", "treize",  "quatorze", "quinze", "seize"};

// 1..99; `final`: the number ends here (quatre-vingts takes its s only then).
std::string french_below_100(int64_t n, bool final) {
  if (n <= 16) return kFrSmall[size_t(n)];
  if (n < 20) return std::string("dix-") + kFrSmall[size_t(n - 10)];
  static constexpr std::array<const char*, 7> tens = {"vingt", "trente", "quarante", "cinquante", "soixante"};
  const int64_t t = n / 10, u = n % 10;
  if (t < 7) {  // 20..69
    const std::string base = tens[size_t(t - 2)];
    if (u == 0) return base;
    if (u == 1) return base + " et un";
    return base + "-" + kFrSmall[size_t(u)];
  }
  if (t == 7) {  // 70..79: soixante + 10..19
    if (u == 1) return "soixante et onze";
    return "soixante-" + french_below_100(n - 60, final);
  }
  // 80..99: quatre-vingt(s) + 0..19, never "et".
  if (n == 80) return final ? "quatre-vingts" : "quatre-vingt";
  return "quatre-vingt-" + french_below_100(n - 80, final);
}

// 1..999 (empty for 0); `final` as above (cents takes its s only at the end).
std::string french_below_1000(int64_t n, bool final) {
  const int64_t h = n / 100, r = n % 100;
  std::string s;
  if (h == 1) s = "cent";
  else if (h > 1) s = std::string(kFrSmall[size_t(h)]) + (r == 0 && final ? " cents" : " cent");
  if (r == 0) return s;
  return join(s, french_below_100(r, final));
}

}  // namespace

std::string english_number(int64_t n) {
  check(n);
  if (n == 0) return kEnSmall[0];
  const int64_t th = n / 1000, r = n % 1000;
  std::string s;
  if (th) s = english_below_1000(th) + " thousand";
  return join(s, english_below_1000(r));
}

std::string french_number(int64_t n) {
  check(n);
  if (n == 0) return kFrSmall[0];
  const int64_t th = n / 1000, r = n % 1000;
  std::string s;
  if (th == 1) s = "mille";
  else if (th > 1) s = french_below_1000(th, false) + " mille";
  return join(s, french_below_1000(r, true));
}

}  // namespace ffn::demo
