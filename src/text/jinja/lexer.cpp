// The lexer (src/text/jinja/lexer.hpp).
#include "text/jinja/lexer.hpp"

#include <utf8proc.h>

#include "text/jinja/value.hpp"
#include "text/specials.hpp"

namespace ffn::jinja {

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string rstrip_all(const std::string& s) { return py_strip(s, false, true); }

size_t skip_space(const std::string& s, size_t at) {
  while (at < s.size()) {
    const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(s.data() + at);
    utf8proc_int32_t c;
    const utf8proc_ssize_t len = utf8proc_iterate(p, utf8proc_ssize_t(s.size() - at), &c);
    if (len <= 0 || !py_space(char32_t(c))) break;
    at += size_t(len);
  }
  return at;
}

std::string unescape(const std::string& raw, int line) {
  // Python's .encode("ascii", "backslashreplace") first: every non-ASCII
  // character becomes its \x, \u or \U escape (so "\é" is a backslash, then é's escape).
  if (!text::valid_utf8(raw)) throw SyntaxError("a string literal is not valid UTF-8", line);
  std::string body;
  for (size_t k = 0; k < raw.size();) {
    const auto c = uint8_t(raw[k]);
    if (c < 0x80) { body += raw[k++]; continue; }
    utf8proc_int32_t cp;
    const utf8proc_ssize_t len = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(raw.data() + k),
                                                  utf8proc_ssize_t(raw.size() - k), &cp);
    char buf[16];
    if (cp < 0x100) std::snprintf(buf, sizeof buf, "\\x%02x", unsigned(cp));
    else if (cp < 0x10000) std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(cp));
    else std::snprintf(buf, sizeof buf, "\\U%08x", unsigned(cp));
    body += buf;
    k += size_t(len);
  }
  std::string out;
  for (size_t k = 0; k < body.size(); ++k) {
    if (body[k] != '\\' || k + 1 == body.size()) { out += body[k]; continue; }
    const char c = body[++k];
    auto hex = [&](int n) {
      uint32_t v = 0;
      for (int d = 0; d < n; ++d) {
        if (k + 1 >= body.size() || !std::isxdigit(static_cast<unsigned char>(body[k + 1])))
          throw SyntaxError("truncated escape in a string", line);
        const char h = body[++k];
        v = v * 16 + uint32_t(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
      }
      if (v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) throw SyntaxError("an escape outside Unicode scalar values", line);
      append_utf8(out, char32_t(v));
    };
    switch (c) {
      case '\n': break;
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'v': out += '\v'; break;
      case 'x': hex(2); break;
      case 'u': hex(4); break;
      case 'U': hex(8); break;
      case 'N': throw SyntaxError("unsupported construct: \\N{...} escapes", line);
      default:
        if (c >= '0' && c <= '7') {
          uint32_t v = uint32_t(c - '0');
          for (int d = 0; d < 2 && k + 1 < body.size() && body[k + 1] >= '0' && body[k + 1] <= '7'; ++d) v = v * 8 + uint32_t(body[++k] - '0');
          append_utf8(out, char32_t(v));
        } else {
          out += '\\';
          out += c;
        }
    }
  }
  return out;
}

std::vector<Token> lex(const std::string& raw) {
  // Newlines become \n, and one trailing newline goes (keep_trailing_newline=False).
  std::string src;
  src.reserve(raw.size());
  for (size_t k = 0; k < raw.size(); ++k) {
    if (raw[k] == '\r') { src += '\n'; if (k + 1 < raw.size() && raw[k + 1] == '\n') ++k; }
    else src += raw[k];
  }
  if (!src.empty() && src.back() == '\n') src.pop_back();

  std::vector<Token> out;
  int line = 1;
  auto count_lines = [&](size_t a, size_t b) { line += int(std::count(src.begin() + long(a), src.begin() + long(b), '\n')); };
  size_t pos = 0;
  bool line_starting = true;
  std::string pending;  // text not yet emitted
  const size_t n = src.size();
  while (pos < n) {
    size_t at = pos;
    while (true) {
      at = src.find('{', at);
      if (at == std::string::npos || at + 1 >= n) { at = std::string::npos; break; }
      const char k = src[at + 1];
      if (k == '{' || k == '%' || k == '#') break;
      ++at;
    }
    if (at == std::string::npos) {
      out.push_back({T::Data, src.substr(pos), 0, 0, line});
      break;
    }
    std::string text = src.substr(pos, at - pos);
    const char kind = src[at + 1];
    const char sign = at + 2 < n && (src[at + 2] == '-' || src[at + 2] == '+') ? src[at + 2] : 0;
    if (sign == '-') text = rstrip_all(text);
    else if (sign != '+' && kind != '{') {  // lstrip_blocks
      const size_t l = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
      if (l > 0 || line_starting) {
        const size_t e = skip_space(text, l);
        if (e == text.size()) text.resize(l);
      }
    }
    const int tag_line = line + int(std::count(src.begin() + long(pos), src.begin() + long(at), '\n'));
    if (!text.empty()) out.push_back({T::Data, text, 0, 0, line});
    line = tag_line;
    size_t p = at + 2 + (sign ? 1 : 0);
    if (kind == '#') {
      size_t e = src.find("#}", p);
      if (e == std::string::npos) throw SyntaxError("missing end of comment tag", line);
      const bool strip = e > p && src[e - 1] == '-', keep = e > p && src[e - 1] == '+';
      size_t after = e + 2;
      if (strip) after = skip_space(src, after);
      else if (!keep && after < n && src[after] == '\n') ++after;
      count_lines(p, after);
      line_starting = src[after - 1] == '\n';
      pos = after;
      continue;
    }
    // raw: {% raw %}...{% endraw %}
    if (kind == '%') {
      size_t q = p;
      while (q < n && is_ws(src[q])) ++q;
      if (src.compare(q, 3, "raw") == 0 && (q + 3 >= n || !(std::isalnum(static_cast<unsigned char>(src[q + 3])) || src[q + 3] == '_'))) {
        size_t r = q + 3;
        while (r < n && is_ws(src[r])) ++r;
        size_t body;
        if (src.compare(r, 3, "-%}") == 0) body = skip_space(src, r + 3);
        else if (src.compare(r, 2, "%}") == 0) body = r + 2;
        else throw SyntaxError("expected %} after raw", line);
        // find {%(-|+)? endraw (-|+)?%}
        size_t s = body;
        while (true) {
          s = src.find("{%", s);
          if (s == std::string::npos) throw SyntaxError("missing end of raw directive", line);
          size_t t = s + 2;
          const char rs = t < n && (src[t] == '-' || src[t] == '+') ? src[t] : 0;
          if (rs) ++t;
          while (t < n && is_ws(src[t])) ++t;
          if (src.compare(t, 6, "endraw") != 0) { s += 2; continue; }
          t += 6;
          while (t < n && is_ws(src[t])) ++t;
          size_t after;
          if (src.compare(t, 3, "+%}") == 0) after = t + 3;
          else if (src.compare(t, 3, "-%}") == 0) after = skip_space(src, t + 3);
          else if (src.compare(t, 2, "%}") == 0) { after = t + 2; if (after < n && src[after] == '\n') ++after; }
          else { s += 2; continue; }
          std::string data = src.substr(body, s - body);
          if (rs == '-') data = rstrip_all(data);
          else if (rs != '+') {
            const size_t l = data.rfind('\n') == std::string::npos ? 0 : data.rfind('\n') + 1;
            if (l > 0 && skip_space(data, l) == data.size()) data.resize(l);
          }
          if (!data.empty()) out.push_back({T::Data, data, 0, 0, line});
          count_lines(p, after);
          line_starting = src[after - 1] == '\n';
          pos = after;
          break;
        }
        continue;
      }
    }
    const bool block = kind == '%';
    out.push_back({block ? T::BlockBegin : T::VarBegin, "", 0, 0, line});
    std::vector<char> balance;
    while (true) {
      if (p >= n) throw SyntaxError(block ? "unexpected end of template: a {% tag is not closed" : "unexpected end of template: a {{ is not closed", line);
      // the end of the tag, tried first where brackets balance
      if (balance.empty()) {
        const std::string end = block ? "%}" : "}}";
        size_t after = 0;
        if (src.compare(p, 3, "-" + end) == 0) after = skip_space(src, p + 3);
        else if (block && src.compare(p, 3, "+" + end) == 0) after = p + 3;
        else if (src.compare(p, 2, end) == 0) {
          after = p + 2;
          if (block && after < n && src[after] == '\n') ++after;
        }
        if (after) {
          out.push_back({block ? T::BlockEnd : T::VarEnd, "", 0, 0, line});
          count_lines(p, after);
          line_starting = src[after - 1] == '\n';
          pos = after;
          break;
        }
      }
      const char c = src[p];
      if (is_ws(c)) { if (c == '\n') ++line; ++p; continue; }
      if (c == '0' && p + 2 < n && std::strchr("xXoObB", src[p + 1]) && std::isxdigit(static_cast<unsigned char>(src[p + 2]))) {
        const int base = (src[p + 1] | 0x20) == 'x' ? 16 : (src[p + 1] | 0x20) == 'o' ? 8 : 2;
        size_t q = p + 2;
        std::string num;
        while (q < n && (std::isxdigit(static_cast<unsigned char>(src[q])) || src[q] == '_')) { if (src[q] != '_') num += src[q]; ++q; }
        Token t{T::Int, src.substr(p, q - p), 0, 0, line};
        auto r = std::from_chars(num.data(), num.data() + num.size(), t.i, base);
        if (r.ec != std::errc() || r.ptr != num.data() + num.size()) throw SyntaxError("invalid integer literal " + t.text, line);
        out.push_back(t);
        p = q;
        continue;
      }
      if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t q = p;
        auto digits = [&] {
          const size_t s0 = q;
          while (q < n && (std::isdigit(static_cast<unsigned char>(src[q])) || (src[q] == '_' && q + 1 < n && std::isdigit(static_cast<unsigned char>(src[q + 1])) && q > s0))) ++q;
        };
        digits();
        bool is_float = false;
        const bool after_dot = p > 0 && src[p - 1] == '.';  // jinja2's (?<!\.): x.0.1 is two items
        if (!after_dot && q + 1 < n && src[q] == '.' && std::isdigit(static_cast<unsigned char>(src[q + 1]))) { ++q; digits(); is_float = true; }
        if (q < n && src[q] == 'e') {
          size_t r = q + 1;
          if (r < n && (src[r] == '+' || src[r] == '-')) ++r;
          if (r < n && std::isdigit(static_cast<unsigned char>(src[r]))) { q = r; digits(); is_float = true; }
        }
        std::string num;
        for (size_t k = p; k < q; ++k) if (src[k] != '_') num += src[k];
        if (!is_float && num.size() > 1 && num[0] == '0' && num.find_first_not_of('0') != std::string::npos)
          throw SyntaxError("leading zeros in decimal integer literals are not permitted: " + num, line);
        Token t{is_float ? T::Float : T::Int, num, 0, 0, line};
        if (is_float) t.f = std::strtod(num.c_str(), nullptr);
        else {
          auto r = std::from_chars(num.data(), num.data() + num.size(), t.i);
          if (r.ec != std::errc()) throw SyntaxError("unsupported construct: the integer " + num + " is past 64 bits", line);
        }
        out.push_back(t);
        p = q;
        continue;
      }
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t q = p;
        while (q < n && (std::isalnum(static_cast<unsigned char>(src[q])) || src[q] == '_')) ++q;
        out.push_back({T::Name, src.substr(p, q - p), 0, 0, line});
        p = q;
        continue;
      }
      if (c == '\'' || c == '"') {
        size_t q = p + 1;
        while (q < n && src[q] != c) { if (src[q] == '\\') ++q; ++q; }
        if (q >= n) throw SyntaxError("unexpected end of template: a string is not closed", line);
        out.push_back({T::String, unescape(src.substr(p + 1, q - p - 1), line), 0, 0, line});
        count_lines(p, q);
        p = q + 1;
        continue;
      }
      static const char* ops[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[", "]", "(", ")",
                                  "{", "}", ">", "<", "=", ".", ":", "|", ",", ";"};
      std::string op;
      for (const char* o : ops) if (src.compare(p, std::strlen(o), o) == 0) { op = o; break; }
      if (op.empty()) throw SyntaxError(std::string("unexpected character '") + c + "'", line);
      if (op == "(" || op == "[" || op == "{") balance.push_back(op == "(" ? ')' : op == "[" ? ']' : '}');
      else if (op == ")" || op == "]" || op == "}") {
        if (balance.empty() || balance.back() != op[0]) throw SyntaxError("unexpected '" + op + "'", line);
        balance.pop_back();
      }
      out.push_back({T::Op, op, 0, 0, line});
      p += op.size();
    }
  }
  out.push_back({T::Eof, "", 0, 0, line});
  return out;
}

}  // namespace ffn::jinja
