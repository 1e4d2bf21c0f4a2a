// Number words for `ffn demo translate`: the cardinal numbers 0..999,999
// written out in English (American style: "three hundred seventy-one", no
// "and", no commas) and in French (the traditional spelling: "trois cent
// soixante et onze"; "et un" / "et onze" in 21..71 but not 81 or 91;
// soixante-dix, quatre-vingts, quatre-vingt-dix; "cents" and "quatre-vingts"
// take their s only at the end of the number, not before "mille"; "mille" is
// invariable and "un mille" is "mille"). tests/tools/test_number_words.py
// checks them against the num2words package (36,000 numbers covering every
// three-digit group at both places).
#pragma once

#include <cstdint>
#include <string>

namespace ffn::demo {

constexpr int64_t kMaxNumberWords = 999999;

// Throws Error for n outside 0..kMaxNumberWords.
std::string english_number(int64_t n);
std::string french_number(int64_t n);

}  // namespace ffn::demo
