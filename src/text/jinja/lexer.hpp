// The lexer: template source to tokens, with jinja2's whitespace control
// (trim_blocks, lstrip_blocks, "-" markers).
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>


namespace ffn::jinja {

enum class T { Data, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, Eof };

struct Token {
  T type;
  std::string text;  // Data, Name, String (unescaped), Op
  int64_t i = 0;
  double f = 0;
  int line = 1;
};

struct SyntaxError : std::exception {
  std::string msg;
  int line;
  SyntaxError(std::string m, int l) : msg(std::move(m)), line(l) {}
};

bool is_ws(char c);

// Python's str.rstrip() / the \s* after a "-%}", on UTF-8 text.
std::string rstrip_all(const std::string& s);

size_t skip_space(const std::string& s, size_t at);

// Python's "unicode-escape" decoding of a string literal's body (jinja2's rule).
std::string unescape(const std::string& raw, int line);

std::vector<Token> lex(const std::string& raw);

}  // namespace ffn::jinja
