// The Jinja2 subset chat templates use (include/ffn/chat_template.hpp), run
// as jinja2 3.1 runs it in transformers' environment (trim_blocks,
// lstrip_blocks, loop controls; undefined values print as ""). Values follow
// Python: ints, floats with Python's repr, str indexed by code point, lists,
// tuples, insertion-ordered dicts. Three parts: the lexer (source → tokens,
// with jinja2's whitespace control), the parser (tokens → a tree of
// statements and expressions, in jinja2's precedence) and the interpreter.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <string_view>
#include <unordered_map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <utf8proc.h>

#include "ffn/chat_template.hpp"
#include "ffn/types.hpp"
#include "text/specials.hpp"

namespace ffn {
namespace {

// ---------------------------------------------------------------- values

struct Value;
using ValueList = std::vector<Value>;
struct ValueDict;
struct Func;

struct Value {
  enum Kind { Undefined, None, Bool, Int, Float, Str, List, Dict, Callable };
  Kind kind = Undefined;
  bool b = false, tuple = false, ns = false;  // tuple: a List printed (a, b); ns: a namespace() Dict
  // A Str that is jinja2's Markup (|safe, |escape): printed as it is (chat
  // templates do not autoescape), but markupsafe's + escapes a plain str
  // added to it (functionary-v3.1 writes tool JSON so, and transformers
  // renders the &#34;). Other operations on a Markup are refused.
  bool markup = false;
  // What Python has in place of a list or dict here: a generator (jinja2's
  // map, select, reverse, unique, items: truthy, spent by one pass), a dict
  // view (.items(), .keys(), .values()), a loop object. Only what reads the
  // same on them is allowed; printing, comparing, indexing one is refused.
  enum Lazy : uint8_t { Plain, Generator, View, Loop };
  Lazy lazy = Plain;
  int64_t i = 0;
  double f = 0;
  std::string s;  // Str: UTF-8; Undefined: the name that was not found
  std::shared_ptr<ValueList> list;
  std::shared_ptr<ValueDict> dict;
  std::shared_ptr<Func> fn;

  static Value undefined(std::string name) { Value v; v.s = std::move(name); return v; }
  static Value none() { Value v; v.kind = None; return v; }
  static Value boolean(bool x) { Value v; v.kind = Bool; v.b = x; return v; }
  static Value integer(int64_t x) { Value v; v.kind = Int; v.i = x; return v; }
  static Value real(double x) { Value v; v.kind = Float; v.f = x; return v; }
  static Value str(std::string x) { Value v; v.kind = Str; v.s = std::move(x); return v; }
  static Value of_list(ValueList x, bool tuple = false) {
    Value v; v.kind = List; v.tuple = tuple; v.list = std::make_shared<ValueList>(std::move(x)); return v;
  }
  static Value new_dict();
  bool is_number() const { return kind == Int || kind == Float || kind == Bool; }
  double number() const { return kind == Float ? f : kind == Int ? double(i) : double(b); }
};

struct ValueDict {
  std::vector<std::pair<std::string, Value>> items;
  const Value* find(const std::string& k) const {
    for (const auto& [key, v] : items) if (key == k) return &v;
    return nullptr;
  }
  void set(const std::string& k, Value v) {
    for (auto& [key, old] : items) if (key == k) { old = std::move(v); return; }
    items.emplace_back(k, std::move(v));
  }
};

Value Value::new_dict() { Value v; v.kind = Dict; v.dict = std::make_shared<ValueDict>(); return v; }

struct Interp;
struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
};
struct Func {
  std::string name;
  std::function<Value(Interp&, Args&)> call;
};

struct Fail : std::exception {  // an error while rendering; ChatTemplate adds the template's name
  std::string msg;
  explicit Fail(std::string m) : msg(std::move(m)) {}
};
[[noreturn]] void fail(const std::string& m) { throw Fail(m); }

const char* type_name(const Value& v);

const char* lazy_name(const Value& v) {
  return v.lazy == Value::Generator ? "a generator (map, select, reject, reverse, unique, items)"
         : v.lazy == Value::View    ? "a dict view (.items(), .keys(), .values())"
                                    : "the loop object";
}
[[noreturn]] void refuse_lazy(const Value& v, const char* what) {
  fail(std::string("unsupported construct: ") + what + " " + lazy_name(v));
}

// A dict's keys are strings, or integers ({512: 128}) stored as 0xFF and
// their digits: no UTF-8 text (JSON keys, template strings) holds 0xFF.
// Other key types (a float or bool equal to an int shares its key in
// Python) are refused.
std::string dict_key(const Value& k) {
  if (k.kind == Value::Str) return k.s;
  if (k.kind == Value::Int) return "\xff" + std::to_string(k.i);
  if ((k.kind == Value::List && !k.tuple) || k.kind == Value::Dict) fail(std::string("unhashable type: '") + type_name(k) + "'");
  fail(std::string("unsupported construct: a dict key of type ") + type_name(k));
}
Value key_value(const std::string& k) {
  if (!k.empty() && k[0] == '\xff') return Value::integer(std::stoll(k.substr(1)));
  return Value::str(k);
}

// Bounds on what a template can build, so that no template (or fuzzer)
// runs the process out of memory or stack: text and output past 16 MiB,
// lists past a million items, values nested past 256.
constexpr size_t kMaxOutput = size_t(16) << 20;
constexpr size_t kMaxItems = size_t(1) << 20;
constexpr int kMaxNesting = 256;

const std::string& bounded(const std::string& s) {
  if (s.size() > kMaxOutput) fail("the template built a string past 16 MiB");
  return s;
}

// The work a render may do beyond its steps: bytes and items it builds
// (strings, lists, copies for loops, comparisons in unique), at most 256 Mi
// units, so no template (or fuzzer) takes minutes or gigabytes.
constexpr size_t kItemCost = 128;  // a list item's bytes (a Value)
struct Budget {
  static inline thread_local int64_t used = 0;
  static void charge(size_t units) {
    used += int64_t(std::min<size_t>(units, size_t(1) << 40));
    if (used > (int64_t(1) << 28)) fail("the template did more than 256 Mi units of work (bytes and items built)");
  }
};

// Depth of the recursive walks over values (printing, JSON, comparison).
struct Nest {
  static inline thread_local int depth = 0;
  Nest() { if (++depth > kMaxNesting) { --depth; fail("a value nested more than 256 deep"); } }
  ~Nest() { --depth; }
  Nest(const Nest&) = delete;
};

// ---------------------------------------------------------------- text helpers (Python's str)

std::vector<char32_t> code_points(const std::string& s) {
  Budget::charge(s.size());
  std::vector<char32_t> out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
  utf8proc_ssize_t n = utf8proc_ssize_t(s.size()), at = 0;
  while (at < n) {
    utf8proc_int32_t c;
    const utf8proc_ssize_t len = utf8proc_iterate(p + at, n - at, &c);
    if (len <= 0) fail("a string is not valid UTF-8");
    out.push_back(char32_t(c));
    at += len;
  }
  return out;
}

void append_utf8(std::string& out, char32_t c) {
  utf8proc_uint8_t buf[4];
  const utf8proc_ssize_t n = utf8proc_encode_char(utf8proc_int32_t(c), buf);
  out.append(reinterpret_cast<const char*>(buf), size_t(n));
}

std::string from_code_points(const std::vector<char32_t>& cps, size_t from = 0, size_t to = SIZE_MAX) {
  std::string out;
  for (size_t k = from; k < std::min(to, cps.size()); ++k) append_utf8(out, cps[k]);
  return out;
}

// Python's str.isspace.
bool py_space(char32_t c) {
  return c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

// str.strip / lstrip / rstrip, with chars or Python's whitespace.
std::string py_strip(const std::string& s, bool left, bool right, const std::string* chars = nullptr) {
  const std::vector<char32_t> cps = code_points(s);
  std::vector<char32_t> set;
  if (chars) set = code_points(*chars);
  auto strip = [&](char32_t c) { return chars ? std::find(set.begin(), set.end(), c) != set.end() : py_space(c); };
  size_t a = 0, b = cps.size();
  if (left) while (a < b && strip(cps[a])) ++a;
  if (right) while (b > a && strip(cps[b - 1])) --b;
  return from_code_points(cps, a, b);
}

// Python's str.splitlines() (no keepends).
std::vector<std::string> split_lines(const std::string& s) {
  const std::vector<char32_t> cps = code_points(s);
  std::vector<std::string> lines;
  size_t from = 0, k = 0;
  while (k < cps.size()) {
    const char32_t c = cps[k];
    const bool brk = c == '\n' || c == '\r' || c == '\v' || c == '\f' || (c >= 0x1c && c <= 0x1e) || c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!brk) { ++k; continue; }
    lines.push_back(from_code_points(cps, from, k));
    k += (c == '\r' && k + 1 < cps.size() && cps[k + 1] == '\n') ? 2 : 1;
    from = k;
  }
  if (from < cps.size()) lines.push_back(from_code_points(cps, from));
  return lines;
}

// Python's str.upper / lower / title / capitalize: utf8proc's simple case
// mapping, which is Python's except for the characters whose full mapping
// has several characters (SpecialCasing: ß → SS, ligatures, Greek with
// ypogegrammeni); those are refused rather than mapped differently.
bool special_casing(char32_t c) {
  return c == 0xdf || c == 0x3a3 /* Σ: final σ or ς by context */ || (c >= 0x1c4 && c <= 0x1cc) || (c >= 0x1f1 && c <= 0x1f3) || c == 0x130 || c == 0x149 || c == 0x1f0 || c == 0x390 || c == 0x3b0 || c == 0x587 ||
         (c >= 0x1e96 && c <= 0x1e9a) || (c >= 0x1f50 && c <= 0x1f56 && c % 2 == 0) || (c >= 0x1f80 && c <= 0x1fff) ||
         (c >= 0xfb00 && c <= 0xfb06) || (c >= 0xfb13 && c <= 0xfb17);
}
char32_t case_map(char32_t c, bool upper, const char* what) {
  if (c < 0x80) return upper ? (c >= 'a' && c <= 'z' ? c - 32 : c) : (c >= 'A' && c <= 'Z' ? c + 32 : c);
  if (special_casing(c)) {
    char hex[16];
    std::snprintf(hex, sizeof hex, "U+%04X", unsigned(c));
    fail(std::string("unsupported construct: ") + what + " of " + hex + ", whose case mapping has several characters or depends on context");
  }
  return char32_t(upper ? utf8proc_toupper(utf8proc_int32_t(c)) : utf8proc_tolower(utf8proc_int32_t(c)));
}
std::string py_case(const std::string& s, int mode, const char* what) {  // 0 lower, 1 upper, 2 title, 3 capitalize
  std::vector<char32_t> cps = code_points(s);
  bool prev_cased = false;
  for (size_t k = 0; k < cps.size(); ++k) {
    const char32_t c = cps[k];
    if (mode == 0) cps[k] = case_map(c, false, what);
    else if (mode == 1) cps[k] = case_map(c, true, what);
    else if (mode == 3) cps[k] = case_map(c, k == 0, what);
    else {
      const auto cat = utf8proc_category(utf8proc_int32_t(c));
      const bool cased = cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
      if (cat == UTF8PROC_CATEGORY_LT) fail(std::string(what) + ": titlecase letters are not supported");
      cps[k] = case_map(c, !prev_cased, what);
      prev_cased = cased;
    }
  }
  return from_code_points(cps);
}

// Python's repr of a float.
std::string float_repr(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  std::string sci(buf, r.ptr);  // d.ddde±XX, shortest round trip
  const size_t e = sci.find('e');
  std::string mant = sci.substr(0, e);
  const int exp = std::stoi(sci.substr(e + 1));
  bool neg = false;
  if (mant[0] == '-') { neg = true; mant.erase(0, 1); }
  std::string digits;
  for (char c : mant) if (c != '.') digits += c;
  std::string out;
  if (exp >= -4 && exp < 16) {
    if (exp < 0) out = "0." + std::string(size_t(-exp - 1), '0') + digits;
    else if (size_t(exp + 1) >= digits.size()) out = digits + std::string(size_t(exp + 1) - digits.size(), '0') + ".0";
    else out = digits.substr(0, size_t(exp + 1)) + "." + digits.substr(size_t(exp + 1));
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += eb;
  }
  return neg ? "-" + out : out;
}

// Python's str.isprintable for one code point.
bool py_printable(char32_t c) {
  if (c == ' ') return true;
  switch (utf8proc_category(utf8proc_int32_t(c))) {
    case UTF8PROC_CATEGORY_CC: case UTF8PROC_CATEGORY_CF: case UTF8PROC_CATEGORY_CS: case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN: case UTF8PROC_CATEGORY_ZL: case UTF8PROC_CATEGORY_ZP: case UTF8PROC_CATEGORY_ZS:
      return false;
    default: return true;
  }
}

std::string str_repr(const std::string& s) {
  const std::vector<char32_t> cps = code_points(s);
  const bool has_single = s.find('\'') != std::string::npos, has_double = s.find('"') != std::string::npos;
  const char q = has_single && !has_double ? '"' : '\'';
  std::string out(1, q);
  for (char32_t c : cps) {
    char buf[16];
    if (c == char32_t(q) || c == '\\') { out += '\\'; out += char(c); }
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (py_printable(c)) append_utf8(out, c);
    else {
      if (c < 0x100) std::snprintf(buf, sizeof buf, "\\x%02x", unsigned(c));
      else if (c < 0x10000) std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(c));
      else std::snprintf(buf, sizeof buf, "\\U%08x", unsigned(c));
      out += buf;
    }
  }
  return out + q;
}

std::string repr(const Value& v);

// Python's str() of a value: what {{ }} prints.
std::string to_str(const Value& v) {
  switch (v.kind) {
    case Value::Undefined: return "";
    case Value::None: return "None";
    case Value::Bool: return v.b ? "True" : "False";
    case Value::Int: return std::to_string(v.i);
    case Value::Float: return float_repr(v.f);
    case Value::Str: return v.s;
    default: return repr(v);
  }
}

// markupsafe.escape of a str: & < > ' " as HTML entities.
std::string html_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '\'': out += "&#39;"; break;
      case '"': out += "&#34;"; break;
      default: out += c;
    }
  }
  return out;
}

Value markup_of(std::string s) {
  Value v = Value::str(std::move(s));
  v.markup = true;
  return v;
}

std::string repr(const Value& v) {
  Nest nest;
  if (v.lazy != Value::Plain) refuse_lazy(v, "printing");
  switch (v.kind) {
    case Value::Str: return v.markup ? "Markup(" + str_repr(v.s) + ")" : str_repr(v.s);
    case Value::List: {
      if (!v.s.empty()) return v.s;  // a range
      std::string out = v.tuple ? "(" : "[";
      for (size_t k = 0; k < v.list->size(); ++k) bounded(out += (k ? ", " : "") + repr((*v.list)[k]));
      Budget::charge(out.size());
      if (v.tuple && v.list->size() == 1) out += ",";
      return out + (v.tuple ? ")" : "]");
    }
    case Value::Dict: {
      std::string out = v.ns ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [k, x] : v.dict->items) { out += (first ? "" : ", ") + repr(key_value(k)) + ": " + repr(x); first = false; }
      return out + (v.ns ? "}>" : "}");
    }
    case Value::Callable: fail("the function " + v.fn->name + " cannot be printed");
    case Value::Undefined: fail("'" + v.s + "' is undefined");
    default: return to_str(v);
  }
}

// json.dumps(x, ensure_ascii=False, indent=indent, sort_keys=sort_keys): transformers' tojson.
struct JsonStyle {
  int indent = -1;  // < 0: one line
  bool sort_keys = false, ascii = false;
  std::string item_sep, key_sep = ": ";
};

void json_dump(const Value& v, std::string& out, const JsonStyle& st, int depth) {
  Nest nest;
  if (v.lazy != Value::Plain) refuse_lazy(v, "tojson of");
  if (v.kind == Value::List && !v.s.empty()) fail("unsupported construct: tojson of a range");
  bounded(out);
  const int indent = st.indent;
  auto newline = [&](int d) { out += '\n'; out.append(size_t(indent) * size_t(d), ' '); };
  switch (v.kind) {
    case Value::None: out += "null"; return;
    case Value::Bool: out += v.b ? "true" : "false"; return;
    case Value::Int: out += std::to_string(v.i); return;
    case Value::Float:
      out += std::isnan(v.f) ? "NaN" : std::isinf(v.f) ? (v.f > 0 ? "Infinity" : "-Infinity") : float_repr(v.f);
      return;
    case Value::Str: {
      out += '"';
      for (char32_t c : code_points(v.s)) {
        switch (c) {
          case '"': out += "\\\""; break;
          case '\\': out += "\\\\"; break;
          case '\n': out += "\\n"; break;
          case '\r': out += "\\r"; break;
          case '\t': out += "\\t"; break;
          case '\b': out += "\\b"; break;
          case '\f': out += "\\f"; break;
          default:
            if (c < 0x20 || (st.ascii && c >= 0x7f)) {
              char buf[16];
              if (c >= 0x10000) {
                const unsigned u = unsigned(c) - 0x10000;
                std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xd800 + (u >> 10), 0xdc00 + (u & 0x3ff));
              } else {
                std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(c));
              }
              out += buf;
            } else {
              append_utf8(out, c);
            }
        }
      }
      out += '"';
      return;
    }
    case Value::List: {
      if (v.list->empty()) { out += "[]"; return; }
      out += '[';
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k) out += st.item_sep;
        if (indent >= 0) newline(depth + 1);
        json_dump((*v.list)[k], out, st, depth + 1);
      }
      if (indent >= 0) newline(depth);
      out += ']';
      return;
    }
    case Value::Dict: {
      if (v.ns) fail("tojson: a namespace is not JSON serializable");
      if (v.dict->items.empty()) { out += "{}"; return; }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& it : v.dict->items) items.push_back(&it);
      if (st.sort_keys) {
        for (const auto* it : items)
          if (!it->first.empty() && it->first[0] == '\xff') fail("unsupported construct: tojson(sort_keys=true) with integer keys");
        std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
      }
      out += '{';
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) out += st.item_sep;
        if (indent >= 0) newline(depth + 1);
        json_dump(Value::str(to_str(key_value(items[k]->first))), out, st, depth + 1);
        out += st.key_sep;
        json_dump(items[k]->second, out, st, depth + 1);
      }
      if (indent >= 0) newline(depth);
      out += '}';
      return;
    }
    case Value::Undefined: fail("tojson: '" + v.s + "' is undefined (Undefined is not JSON serializable)");
    case Value::Callable: fail("tojson: the function " + v.fn->name + " is not JSON serializable");
  }
}

Value from_json(const nlohmann::ordered_json& j) {
  Nest nest;
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value::integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u > uint64_t(INT64_MAX)) fail("a JSON integer is past 2^63");
      return Value::integer(int64_t(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value::real(j.get<double>());
    case nlohmann::ordered_json::value_t::string: {
      const std::string& s = j.get_ref<const std::string&>();
      if (!text::valid_utf8(s)) fail("a JSON string is not valid UTF-8");
      return Value::str(s);
    }
    case nlohmann::ordered_json::value_t::array: {
      ValueList l;
      for (const auto& x : j) l.push_back(from_json(x));
      return Value::of_list(std::move(l));
    }
    case nlohmann::ordered_json::value_t::object: {
      Value d = Value::new_dict();
      for (const auto& [k, x] : j.items()) d.dict->set(k, from_json(x));
      return d;
    }
    default: fail("a JSON value of an unsupported type");
  }
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Value::Undefined: case Value::None: return false;
    case Value::Bool: return v.b;
    case Value::Int: return v.i != 0;
    case Value::Float: return v.f != 0;
    case Value::Str: return !v.s.empty();
    case Value::List: return v.lazy == Value::Generator || !v.list->empty();
    case Value::Dict: return v.ns || v.lazy == Value::Loop || !v.dict->items.empty();
    case Value::Callable: return true;
  }
  return false;
}

const char* type_name(const Value& v) {
  switch (v.kind) {
    case Value::Undefined: return "Undefined";
    case Value::None: return "NoneType";
    case Value::Bool: return "bool";
    case Value::Int: return "int";
    case Value::Float: return "float";
    case Value::Str: return "str";
    case Value::List: return v.tuple ? "tuple" : "list";
    case Value::Dict: return v.ns ? "Namespace" : "dict";
    case Value::Callable: return "function";
  }
  return "?";
}

bool equal(const Value& a, const Value& b) {
  Nest nest;
  if (a.lazy != Value::Plain) refuse_lazy(a, "comparing");
  if (b.lazy != Value::Plain) refuse_lazy(b, "comparing");
  if ((a.kind == Value::List && !a.s.empty()) || (b.kind == Value::List && !b.s.empty()))
    fail("unsupported construct: comparing a range");
  if (a.is_number() && b.is_number()) {
    if (a.kind != Value::Float && b.kind != Value::Float) return (a.kind == Value::Int ? a.i : a.b) == (b.kind == Value::Int ? b.i : b.b);
    return a.number() == b.number();
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::Undefined: case Value::None: return true;
    case Value::Str: return a.s == b.s;
    case Value::List:
      if (a.tuple != b.tuple || a.list->size() != b.list->size()) return false;
      for (size_t k = 0; k < a.list->size(); ++k) if (!equal((*a.list)[k], (*b.list)[k])) return false;
      return true;
    case Value::Dict:
      if (a.ns || b.ns) return a.dict == b.dict;
      if (a.dict->items.size() != b.dict->items.size()) return false;
      for (const auto& [k, x] : a.dict->items) {
        const Value* y = b.dict->find(k);
        if (!y || !equal(x, *y)) return false;
      }
      return true;
    case Value::Callable: return a.fn == b.fn;
    default: return false;
  }
}

// a < b in Python (numbers, strings by code point, lists lexicographically).
bool less(const Value& a, const Value& b) {
  Nest nest;
  if (a.lazy != Value::Plain) refuse_lazy(a, "comparing");
  if (b.lazy != Value::Plain) refuse_lazy(b, "comparing");
  if (a.is_number() && b.is_number()) {
    if (a.kind != Value::Float && b.kind != Value::Float) return (a.kind == Value::Int ? a.i : a.b) < (b.kind == Value::Int ? b.i : b.b);
    return a.number() < b.number();
  }
  if (a.kind == Value::Str && b.kind == Value::Str) return a.s < b.s;  // UTF-8 byte order is code point order
  if (a.kind == Value::List && b.kind == Value::List && a.tuple == b.tuple) {
    for (size_t k = 0; k < std::min(a.list->size(), b.list->size()); ++k) {
      if (!equal((*a.list)[k], (*b.list)[k])) return less((*a.list)[k], (*b.list)[k]);
    }
    return a.list->size() < b.list->size();
  }
  if (a.kind == Value::Undefined) fail("'" + a.s + "' is undefined");
  if (b.kind == Value::Undefined) fail("'" + b.s + "' is undefined");
  fail(std::string("'<' not supported between instances of '") + type_name(a) + "' and '" + type_name(b) + "'");
}

// The items a for loop, list or join walks: a list's items, a dict's keys, a string's characters.
ValueList iterate(const Value& v) {
  if (v.lazy == Value::Loop) refuse_lazy(v, "iterating");
  if (v.kind == Value::Str && v.markup) fail("unsupported construct: iterating a Markup string (|safe, |escape)");
  if (v.lazy == Value::Generator) {  // one pass spends it
    Budget::charge(kItemCost * v.list->size());
    ValueList items = std::move(*v.list);
    v.list->clear();
    return items;
  }
  Budget::charge(kItemCost * (v.kind == Value::List ? v.list->size() : v.kind == Value::Dict ? v.dict->items.size() : 0));
  switch (v.kind) {
    case Value::Undefined: return {};
    case Value::List: return *v.list;
    case Value::Dict: {
      if (v.ns) fail("a namespace is not iterable");
      ValueList keys;
      for (const auto& it : v.dict->items) keys.push_back(key_value(it.first));
      return keys;
    }
    case Value::Str: {
      ValueList chars;
      const std::vector<char32_t> cps = code_points(v.s);
      if (cps.size() > kMaxItems) fail("iterating a string of more than a million characters");
      for (char32_t c : cps) { std::string one; append_utf8(one, c); chars.push_back(Value::str(one)); }
      return chars;
    }
    default: fail(std::string("'") + type_name(v) + "' object is not iterable");
  }
}

int64_t checked(__int128 x) {
  if (x > INT64_MAX || x < INT64_MIN) fail("unsupported construct: an integer past 64 bits");
  return int64_t(x);
}

int64_t as_int(const Value& v, const char* what) {
  if (v.kind == Value::Int) return v.i;
  if (v.kind == Value::Bool) return v.b;
  fail(std::string(what) + ": expected an integer, got " + type_name(v));
}

// ---------------------------------------------------------------- lexer

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

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// Python's str.rstrip() / the \s* after a "-%}", on UTF-8 text.
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

// Python's "unicode-escape" decoding of a string literal's body (jinja2's rule).
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

// ---------------------------------------------------------------- tree

struct Expr;
using ExprP = std::unique_ptr<Expr>;
struct Expr {
  enum Kind { Literal, Name, Attr, Item, Slice, Call, Filter, Test, Unary, Binary, And, Or, Not, Cond, ListLit, TupleLit, DictLit, Compare };
  Kind kind;
  int line = 0;
  Value value;                    // Literal
  std::string name;               // Name, Attr, Filter, Test; Unary and Binary: the operator
  std::vector<ExprP> args;        // operands, call and filter arguments, list items, dict keys and values in pairs
  std::vector<std::string> kwnames;  // Call, Filter, Test: names of the keyword arguments (the last ones in args)
  std::vector<std::string> ops;   // Compare: the operators between args
  bool negated = false;           // Test: "is not"
  int depth = 1;                  // levels of this tree (at most 200)
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;
struct Stmt {
  enum Kind { Text, Print, If, For, Set, SetBlock, Macro, Break, Continue, Generation };
  Kind kind;
  int line = 0;
  std::string text;                              // Text; Macro: its name
  ExprP expr;                                    // Print, Set value, For iterable
  std::vector<std::pair<ExprP, Body>> branches;  // If: (condition or null for else, body)
  std::vector<std::string> targets;              // For, Set (names); Set: "ns.attr" is {ns, attr} with attr set
  std::string attr;                              // Set ns.attr
  ExprP filter;                                  // For ... if filter
  Body body, else_body;                          // For, SetBlock, Macro, Generation
  std::vector<std::string> params;               // Macro
  std::vector<ExprP> defaults;                   // Macro: defaults of the last params
};

struct ParseLimits {
  int depth = 0;
};

class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : t_(std::move(toks)) {}

  Body parse_template() {
    Body body = parse_body({});
    if (peek().type != T::Eof) throw SyntaxError("unexpected '" + describe(peek()) + "'", peek().line);
    return body;
  }

 private:
  std::vector<Token> t_;
  size_t at_ = 0;
  int depth_ = 0;
  int loops_ = 0;  // for loops around the statement being parsed (a macro's body starts from none)

  struct Depth {
    Parser& p;
    explicit Depth(Parser& q, int line) : p(q) { if (++p.depth_ > 200) throw SyntaxError("the template nests more than 200 deep", line); }
    ~Depth() { --p.depth_; }
  };

  const Token& peek(size_t k = 0) const { return t_[std::min(at_ + k, t_.size() - 1)]; }
  Token next() { const Token& t = peek(); if (at_ < t_.size() - 1) ++at_; return t; }
  static std::string describe(const Token& t) {
    switch (t.type) {
      case T::Eof: return "end of template";
      case T::BlockEnd: return "%}";
      case T::VarEnd: return "}}";
      case T::BlockBegin: return "{%";
      case T::VarBegin: return "{{";
      case T::Data: return "text";
      default: return t.text;
    }
  }
  bool is_op(const char* o, size_t k = 0) const { return peek(k).type == T::Op && peek(k).text == o; }
  bool is_name(const char* nm, size_t k = 0) const { return peek(k).type == T::Name && peek(k).text == nm; }
  void expect_op(const char* o) {
    if (!is_op(o)) throw SyntaxError(std::string("expected '") + o + "', got '" + describe(peek()) + "'", peek().line);
    next();
  }
  std::string expect_name() {
    if (peek().type != T::Name) throw SyntaxError("expected a name, got '" + describe(peek()) + "'", peek().line);
    return next().text;
  }
  void expect_block_end() {
    if (peek().type != T::BlockEnd) throw SyntaxError("expected '%}', got '" + describe(peek()) + "'", peek().line);
    next();
  }

  // Statements until a {% tag %} whose name is in `ends` (left unconsumed, after its {%).
  Body parse_body(const std::vector<std::string>& ends) {
    Body body;
    while (true) {
      const Token& t = peek();
      if (t.type == T::Eof) {
        if (!ends.empty()) {
          std::string want;
          for (const auto& e : ends) want += (want.empty() ? "" : " or ") + e;
          throw SyntaxError("unexpected end of template: expected {% " + want + " %}", t.line);
        }
        return body;
      }
      if (t.type == T::Data) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Text; s->text = t.text; s->line = t.line;
        body.push_back(std::move(s));
        next();
        continue;
      }
      if (t.type == T::VarBegin) {
        next();
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Print; s->line = t.line;
        s->expr = parse_tuple(true);
        if (peek().type != T::VarEnd) throw SyntaxError("expected '}}', got '" + describe(peek()) + "'", peek().line);
        next();
        body.push_back(std::move(s));
        continue;
      }
      if (t.type != T::BlockBegin) throw SyntaxError("unexpected '" + describe(t) + "'", t.line);
      const Token& kw = peek(1);
      if (kw.type != T::Name) throw SyntaxError("expected a statement name after {%", kw.line);
      if (std::find(ends.begin(), ends.end(), kw.text) != ends.end()) { next(); return body; }
      if (kw.text.rfind("end", 0) == 0 || kw.text == "elif" || kw.text == "else") {
        std::string want;
        for (const auto& e : ends) want += (want.empty() ? "" : " or ") + e;
        throw SyntaxError("unexpected {% " + kw.text + " %}" + (want.empty() ? std::string() : "; expected {% " + want + " %}"), kw.line);
      }
      next();
      body.push_back(parse_statement());
    }
  }

  std::unique_ptr<Stmt> parse_statement() {
    const Token kw = next();
    Depth d(*this, kw.line);
    auto s = std::make_unique<Stmt>();
    s->line = kw.line;
    const std::string& k = kw.text;
    if (k == "if") {
      s->kind = Stmt::If;
      ExprP cond = parse_tuple(false, false);  // (jinja2: no "a if b else c" as an if's test)
      expect_block_end();
      while (true) {
        Body b = parse_body({"elif", "else", "endif"});
        s->branches.emplace_back(std::move(cond), std::move(b));
        const std::string e = next().text;
        if (e == "elif") { cond = parse_tuple(false, false); expect_block_end(); continue; }
        if (e == "else") {
          expect_block_end();
          s->branches.emplace_back(nullptr, parse_body({"endif"}));
          next();
        }
        expect_block_end();
        break;
      }
    } else if (k == "for") {
      s->kind = Stmt::For;
      s->targets = parse_targets();
      if (!is_name("in")) throw SyntaxError("expected 'in' in a for loop, got '" + describe(peek()) + "'", peek().line);
      next();
      s->expr = parse_tuple(false, false);
      if (is_name("if")) { next(); s->filter = parse_tuple(false, true); }
      if (is_name("recursive")) throw SyntaxError("unsupported construct: recursive for loops", peek().line);
      expect_block_end();
      ++loops_;
      try { s->body = parse_body({"endfor", "else"}); } catch (...) { --loops_; throw; }
      --loops_;
      if (next().text == "else") { expect_block_end(); s->else_body = parse_body({"endfor"}); next(); }
      expect_block_end();
    } else if (k == "set") {
      if (peek().type == T::Name && is_op(".", 1)) {
        s->kind = Stmt::Set;
        s->targets = {next().text};
        next();
        s->attr = expect_name();
        expect_op("=");
        s->expr = parse_tuple(false, true);
        expect_block_end();
      } else {
        std::vector<std::string> targets = parse_targets();
        if (is_op("=")) {
          next();
          s->kind = Stmt::Set;
          s->targets = std::move(targets);
          s->expr = parse_tuple(false, true);
          expect_block_end();
        } else {
          if (targets.size() != 1) throw SyntaxError("a block set takes one name", kw.line);
          if (is_op("|")) throw SyntaxError("unsupported construct: filters on a block set", kw.line);
          s->kind = Stmt::SetBlock;
          s->targets = std::move(targets);
          expect_block_end();
          s->body = parse_body({"endset"});
          next();
          expect_block_end();
        }
      }
    } else if (k == "macro") {
      s->kind = Stmt::Macro;
      s->text = expect_name();
      expect_op("(");
      while (!is_op(")")) {
        if (!s->params.empty()) expect_op(",");
        if (is_op(")")) break;
        s->params.push_back(expect_name());
        if (is_op("=")) { next(); s->defaults.push_back(parse_expression(true)); }
        else if (!s->defaults.empty()) throw SyntaxError("a macro parameter without a default follows one with a default", kw.line);
      }
      next();
      expect_block_end();
      const int outer_loops = loops_;
      loops_ = 0;
      try { s->body = parse_body({"endmacro"}); } catch (...) { loops_ = outer_loops; throw; }
      loops_ = outer_loops;
      next();
      expect_block_end();
    } else if (k == "break" || k == "continue") {
      s->kind = k == "break" ? Stmt::Break : Stmt::Continue;
      if (loops_ == 0) throw SyntaxError("'" + k + "' outside a loop", kw.line);
      expect_block_end();
    } else if (k == "generation") {  // transformers' AssistantTracker: renders its body
      s->kind = Stmt::Generation;
      expect_block_end();
      s->body = parse_body({"endgeneration"});
      next();
      expect_block_end();
    } else {
      static const char* known[] = {"include", "import", "from", "extends", "block", "call", "filter", "with",
                                    "autoescape", "do", "trans", "raw"};
      for (const char* n : known)
        if (k == n) throw SyntaxError("unsupported construct: {% " + k + " %}", kw.line);
      throw SyntaxError("unknown tag '" + k + "'", kw.line);
    }
    return s;
  }

  std::vector<std::string> parse_targets() {
    std::vector<std::string> names;
    const bool paren = is_op("(");
    if (paren) next();
    names.push_back(expect_name());
    while (is_op(",")) {
      next();
      if (peek().type != T::Name) break;
      names.push_back(expect_name());
    }
    if (paren) expect_op(")");
    return names;
  }

  ExprP make(Expr::Kind k, int line) { auto e = std::make_unique<Expr>(); e->kind = k; e->line = line; return e; }
  // A node's depth, from its operands': chains (a + b + ..., x|f|g|...) are
  // built in loops, not by recursion, so the parser's own depth does not
  // see them; evaluating and freeing the tree recurses once per level.
  ExprP& sized(ExprP& e) {
    int d = 0;
    for (const auto& a : e->args)
      if (a) d = std::max(d, a->depth);
    e->depth = d + 1;
    if (e->depth > 200) throw SyntaxError("an expression nests more than 200 deep", e->line);
    return e;
  }

  // expr, expr, ... as a tuple (jinja2's parse_tuple); `condexpr` allows "a if b else c".
  ExprP parse_tuple(bool in_print, bool condexpr = true) {
    (void)in_print;
    const int line = peek().line;
    ExprP first = condexpr ? parse_expression(true) : parse_or();
    if (!is_op(",")) return first;
    auto t = make(Expr::TupleLit, line);
    t->args.push_back(std::move(first));
    while (is_op(",")) {
      next();
      if (peek().type == T::BlockEnd || peek().type == T::VarEnd || is_op(")") || is_name("in") || is_name("if")) break;
      t->args.push_back(condexpr ? parse_expression(true) : parse_or());
    }
    return t;
  }

  ExprP parse_expression(bool condexpr) {
    Depth d(*this, peek().line);
    return condexpr ? parse_condexpr() : parse_or();
  }

  ExprP parse_condexpr() {
    const int line = peek().line;
    ExprP e = parse_or();
    while (is_name("if")) {
      next();
      auto c = make(Expr::Cond, line);
      ExprP cond = parse_or();
      ExprP other = nullptr;
      if (is_name("else")) { next(); other = parse_condexpr(); }
      c->args.push_back(std::move(cond));
      c->args.push_back(std::move(e));
      c->args.push_back(std::move(other));
      e = std::move(sized(c));
    }
    return e;
  }

  // Left-associative chains, operand (op operand)*: or, and, and the arithmetic levels.
  ExprP left_chain(ExprP (Parser::*operand)(), std::initializer_list<const char*> ops, Expr::Kind kind) {
    ExprP e = (this->*operand)();
    while (true) {
      const char* op = nullptr;
      for (const char* o : ops)
        if (kind == Expr::Binary ? is_op(o) : is_name(o)) { op = o; break; }
      if (!op) return e;
      const int line = next().line;
      auto n = make(kind, line);
      n->name = op;
      n->args.push_back(std::move(e));
      n->args.push_back((this->*operand)());
      e = std::move(sized(n));
    }
  }
  ExprP parse_or() { return left_chain(&Parser::parse_and, {"or"}, Expr::Or); }
  ExprP parse_and() { return left_chain(&Parser::parse_not, {"and"}, Expr::And); }
  ExprP parse_not() {
    if (is_name("not")) {
      const int line = next().line;
      Depth d(*this, line);
      auto o = make(Expr::Not, line);
      o->args.push_back(parse_not());
      return std::move(sized(o));
    }
    return parse_compare();
  }
  ExprP parse_compare() {
    const int line = peek().line;
    ExprP e = parse_math1();
    ExprP cmp;
    while (true) {
      std::string op;
      if (peek().type == T::Op && (peek().text == "==" || peek().text == "!=" || peek().text == "<" || peek().text == ">" ||
                                   peek().text == "<=" || peek().text == ">=")) op = next().text;
      else if (is_name("in")) { next(); op = "in"; }
      else if (is_name("not") && is_name("in", 1)) { next(); next(); op = "notin"; }
      else break;
      if (!cmp) { cmp = make(Expr::Compare, line); cmp->args.push_back(std::move(e)); }
      cmp->ops.push_back(op);
      cmp->args.push_back(parse_math1());
    }
    return cmp ? std::move(sized(cmp)) : std::move(e);
  }
  ExprP parse_math1() { return left_chain(&Parser::parse_concat, {"+", "-"}, Expr::Binary); }
  ExprP parse_concat() { return left_chain(&Parser::parse_math2, {"~"}, Expr::Binary); }
  ExprP parse_math2() { return left_chain(&Parser::parse_pow, {"*", "/", "//", "%"}, Expr::Binary); }
  ExprP parse_pow() { return left_chain(&Parser::parse_filtered, {"**"}, Expr::Binary); }
  ExprP parse_filtered() { return parse_unary(true); }
  ExprP parse_unary(bool with_filter) {
    const int line = peek().line;
    Depth d(*this, line);
    ExprP e;
    if (is_op("-") || is_op("+")) {
      auto u = make(Expr::Unary, line);
      u->name = next().text;
      u->args.push_back(parse_unary(false));
      e = std::move(sized(u));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprP parse_primary() {
    const Token& t = peek();
    const int line = t.line;
    auto lit = [&](Value v) { auto e = make(Expr::Literal, line); e->value = std::move(v); return e; };
    switch (t.type) {
      case T::Name: {
        const std::string n = next().text;
        if (n == "true" || n == "True") return lit(Value::boolean(true));
        if (n == "false" || n == "False") return lit(Value::boolean(false));
        if (n == "none" || n == "None") return lit(Value::none());
        auto e = make(Expr::Name, line);
        e->name = n;
        return e;
      }
      case T::String: {
        std::string s = next().text;
        while (peek().type == T::String) s += next().text;
        return lit(Value::str(std::move(s)));
      }
      case T::Int: return lit(Value::integer(next().i));
      case T::Float: return lit(Value::real(next().f));
      case T::Op:
        if (t.text == "(") {
          next();
          if (is_op(")")) { next(); return make(Expr::TupleLit, line); }
          ExprP e = parse_expression(true);
          if (is_op(",")) {
            auto tup = make(Expr::TupleLit, line);
            tup->args.push_back(std::move(e));
            while (is_op(",")) { next(); if (is_op(")")) break; tup->args.push_back(parse_expression(true)); }
            e = std::move(sized(tup));
          }
          expect_op(")");
          return e;
        }
        if (t.text == "[") {
          next();
          auto l = make(Expr::ListLit, line);
          while (!is_op("]")) {
            if (!l->args.empty()) expect_op(",");
            if (is_op("]")) break;
            l->args.push_back(parse_expression(true));
          }
          next();
          return l;
        }
        if (t.text == "{") {
          next();
          auto d = make(Expr::DictLit, line);
          while (!is_op("}")) {
            if (!d->args.empty()) expect_op(",");
            if (is_op("}")) break;
            d->args.push_back(parse_expression(true));
            expect_op(":");
            d->args.push_back(parse_expression(true));
          }
          next();
          return d;
        }
        [[fallthrough]];
      default: throw SyntaxError("unexpected '" + describe(t) + "'", line);
    }
  }

  void parse_call_args(Expr& e) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (is_op(")")) break;
      if (is_op("*") || is_op("**")) throw SyntaxError("unsupported construct: *args and **kwargs in a call", peek().line);
      if (peek().type == T::Name && is_op("=", 1)) {
        e.kwnames.push_back(next().text);
        next();
        e.args.push_back(parse_expression(true));
      } else {
        if (!e.kwnames.empty()) throw SyntaxError("a positional argument follows a keyword argument", peek().line);
        e.args.push_back(parse_expression(true));
      }
    }
    next();
  }

  ExprP parse_postfix(ExprP e) {
    while (true) {
      const int line = peek().line;
      if (is_op(".")) {
        next();
        if (peek().type == T::Name) {
          auto a = make(Expr::Attr, line);
          a->name = next().text;
          a->args.push_back(std::move(e));
          e = std::move(sized(a));
        } else if (peek().type == T::Int) {
          auto a = make(Expr::Item, line);
          a->args.push_back(std::move(e));
          auto idx = make(Expr::Literal, line);
          idx->value = Value::integer(next().i);
          a->args.push_back(std::move(idx));
          e = std::move(sized(a));
        } else {
          throw SyntaxError("expected a name after '.'", line);
        }
      } else if (is_op("[")) {
        next();
        // a slice a:b:c (any part may be missing) or an index
        ExprP parts[3];
        bool slice = false;
        int part = 0;
        while (!is_op("]")) {
          if (is_op(":")) {
            next();
            slice = true;
            if (++part > 2) throw SyntaxError("a slice takes at most three parts", line);
            continue;
          }
          if (parts[part]) throw SyntaxError("expected ']' or ':' in a subscript", line);
          parts[part] = parse_expression(true);
          if (!slice && is_op(",")) throw SyntaxError("unsupported construct: a tuple subscript", line);
        }
        next();
        if (slice) {
          auto s = make(Expr::Slice, line);
          s->args.push_back(std::move(e));
          for (auto& p : parts) s->args.push_back(std::move(p));
          e = std::move(sized(s));
        } else {
          if (!parts[0]) throw SyntaxError("an empty subscript", line);
          auto a = make(Expr::Item, line);
          a->args.push_back(std::move(e));
          a->args.push_back(std::move(parts[0]));
          e = std::move(sized(a));
        }
      } else if (is_op("(")) {
        auto c = make(Expr::Call, line);
        c->args.push_back(std::move(e));
        parse_call_args(*c);
        e = std::move(sized(c));
      } else {
        return e;
      }
    }
  }

  ExprP parse_filter_expr(ExprP e) {
    while (true) {
      const int line = peek().line;
      if (is_op("|")) {
        next();
        auto f = make(Expr::Filter, line);
        f->name = expect_name();
        while (is_op(".")) { next(); f->name += "." + expect_name(); }
        f->args.push_back(std::move(e));
        if (is_op("(")) parse_call_args(*f);
        e = std::move(sized(f));
      } else if (is_name("is")) {
        next();
        auto t = make(Expr::Test, line);
        if (is_name("not")) { next(); t->negated = true; }
        t->name = expect_name();
        while (is_op(".")) { next(); t->name += "." + expect_name(); }
        t->args.push_back(std::move(e));
        const Token& a = peek();
        if (is_op("(")) parse_call_args(*t);
        else if ((a.type == T::Name || a.type == T::String || a.type == T::Int || a.type == T::Float || is_op("[") || is_op("{")) &&
                 !is_name("else") && !is_name("or") && !is_name("and")) {
          if (is_name("is")) throw SyntaxError("you cannot chain multiple tests with is", line);
          t->args.push_back(parse_postfix(parse_primary()));
        }
        e = std::move(sized(t));
      } else if (is_op("(")) {
        auto c = make(Expr::Call, line);
        c->args.push_back(std::move(e));
        parse_call_args(*c);
        e = std::move(sized(c));
      } else {
        return e;
      }
    }
  }
};

}  // namespace

// ---------------------------------------------------------------- interpreter

struct ChatTemplate::Program {
  Body body;
};

namespace {

constexpr int64_t kMaxSteps = 1'000'000;  // a prompt past it would be past any model's context
constexpr int kMaxCallDepth = 100;

struct BreakSignal {};
struct ContinueSignal {};

// A scope's variables: a few names each, searched in order (no allocation
// when a loop's scope is cleared for its next iteration).
struct Frame {
  std::vector<std::pair<std::string, Value>> vars;
  Value& operator[](const std::string& name) {
    for (auto& [n, v] : vars) if (n == name) return v;
    return vars.emplace_back(name, Value()).second;
  }
  const Value* find(const std::string& name) const {
    for (const auto& [n, v] : vars) if (n == name) return &v;
    return nullptr;
  }
  void clear() { vars.clear(); }
};

struct Interp {
  std::vector<Frame> frames;  // innermost last; frames[0]: the template's globals
  std::string* out = nullptr;
  int64_t steps = 0;
  int call_depth = 0;
  int line = 0;
  std::tm now{};

  void step() {
    if (++steps > kMaxSteps) fail("the template ran past a million steps (a loop that does not end?)");
  }
  void emit(const std::string& s) {
    if (out->size() + s.size() > kMaxOutput) fail("the template wrote past 16 MiB");
    *out += s;
  }

  Value lookup(const std::string& name) const {
    for (size_t k = frames.size(); k-- > 0;) {
      if (const Value* v = frames[k].find(name)) return *v;
    }
    return Value::undefined(name);
  }

  // ------------------------------------------------ attribute and item lookup

  static Value generator(ValueList l) {
    Value v = Value::of_list(std::move(l));
    v.lazy = Value::Generator;
    return v;
  }
  static Value view(ValueList l) {
    Value v = Value::of_list(std::move(l));
    v.lazy = Value::View;
    return v;
  }

  static Value make_fn(std::string name, std::function<Value(Interp&, Args&)> f) {
    Value v;
    v.kind = Value::Callable;
    v.fn = std::make_shared<Func>(Func{std::move(name), std::move(f)});
    return v;
  }

  Value getattr(const Value& obj, const std::string& name) {
    if (obj.kind == Value::Undefined) fail("'" + obj.s + "' is undefined");
    if (obj.lazy == Value::Generator || obj.lazy == Value::View) refuse_lazy(obj, "an attribute of");
    if (obj.kind == Value::Dict) {
      if (!obj.ns && obj.lazy == Value::Plain) {
        if (Value m = dict_method(obj, name); m.kind != Value::Undefined) return m;
      }
      if (const Value* v = obj.dict->find(name)) return *v;
      return Value::undefined(std::string(obj.ns ? "namespace" : "dict object") + "' has no attribute '" + name);
    }
    if (obj.kind == Value::Str) {
      if (Value m = str_method(obj, name); m.kind != Value::Undefined) return m;
    }
    return Value::undefined(std::string(type_name(obj)) + " object' has no attribute '" + name);
  }

  Value getitem(const Value& obj, const Value& key) {
    if (obj.kind == Value::Undefined) fail("'" + obj.s + "' is undefined");
    if (obj.lazy == Value::Generator || obj.lazy == Value::View) refuse_lazy(obj, "indexing");
    if (obj.lazy == Value::Loop && key.kind == Value::Str) return getattr(obj, key.s);
    if (obj.kind == Value::Dict && !obj.ns) {
      if (key.kind == Value::Str) {
        if (const Value* v = obj.dict->find(key.s)) return *v;
        if (Value m = dict_method(obj, key.s); m.kind != Value::Undefined) return m;
        return Value::undefined("dict object' has no attribute '" + key.s);
      }
      if (key.kind == Value::Undefined) return Value::undefined("dict object' has no element Undefined");
      if (const Value* v = obj.dict->find(dict_key(key))) return *v;
      return Value::undefined("dict object' has no element " + repr(key));
    }
    if (obj.kind == Value::List || obj.kind == Value::Str) {
      if (key.kind == Value::Int || key.kind == Value::Bool) {
        const int64_t k = as_int(key, "index");
        if (obj.kind == Value::List) {
          const int64_t n = int64_t(obj.list->size());
          const int64_t j = k < 0 ? k + n : k;
          if (j < 0 || j >= n) return Value::undefined(std::string(type_name(obj)) + " object' has no element " + std::to_string(k));
          return (*obj.list)[size_t(j)];
        }
        const std::vector<char32_t> cps = code_points(obj.s);
        const int64_t n = int64_t(cps.size());
        const int64_t j = k < 0 ? k + n : k;
        if (j < 0 || j >= n) return Value::undefined("str object' has no element " + std::to_string(k));
        return Value::str(from_code_points(cps, size_t(j), size_t(j) + 1));
      }
      if (key.kind == Value::Str) return getattr(obj, key.s);
      return Value::undefined(std::string(type_name(obj)) + " object' has no element " + repr(key));
    }
    if (key.kind == Value::Str) return getattr(obj, key.s);
    return Value::undefined(std::string(type_name(obj)) + " object' has no element " + repr(key));
  }

  static void slice_bounds(int64_t n, const Value& a, const Value& b, const Value& c, int64_t& start, int64_t& stop, int64_t& stepv) {
    stepv = c.kind == Value::None || c.kind == Value::Undefined ? 1 : as_int(c, "slice step");
    if (stepv == 0) fail("slice step cannot be zero");
    auto adjust = [&](const Value& v, int64_t dflt, bool is_start) {
      if (v.kind == Value::None || v.kind == Value::Undefined) return dflt;
      int64_t x = as_int(v, "slice index");
      if (x < 0) x += n;
      if (stepv > 0) return std::clamp<int64_t>(x, 0, n);
      (void)is_start;
      return std::clamp<int64_t>(x, -1, n - 1);
    };
    start = adjust(a, stepv > 0 ? 0 : n - 1, true);
    stop = adjust(b, stepv > 0 ? n : -1, false);
  }

  Value slice(const Value& obj, const Value& a, const Value& b, const Value& c) {
    if (obj.kind != Value::List && obj.kind != Value::Str) {
      if (obj.kind == Value::Undefined) fail("'" + obj.s + "' is undefined");
      fail(std::string("'") + type_name(obj) + "' object is not subscriptable with a slice");
    }
    if (obj.kind == Value::List && !obj.s.empty()) fail("unsupported construct: a slice of a range");
    if (obj.lazy != Value::Plain) refuse_lazy(obj, "a slice of");
    std::vector<char32_t> cps;
    int64_t n;
    if (obj.kind == Value::Str) { cps = code_points(obj.s); n = int64_t(cps.size()); }
    else n = int64_t(obj.list->size());
    int64_t start, stop, st;
    slice_bounds(n, a, b, c, start, stop, st);
    if (obj.kind == Value::Str) {
      std::string s;
      for (int64_t k = start; st > 0 ? k < stop : k > stop; k += st) append_utf8(s, cps[size_t(k)]);
      return Value::str(s);
    }
    ValueList l;
    Budget::charge(kItemCost * size_t(n));
    for (int64_t k = start; st > 0 ? k < stop : k > stop; k += st) l.push_back((*obj.list)[size_t(k)]);
    return Value::of_list(std::move(l), obj.tuple);
  }

  // ------------------------------------------------ methods

  static void arity(const Args& a, size_t lo, size_t hi, const std::string& what) {
    if (!a.kw.empty()) fail(what + "() takes no keyword arguments");
    if (a.pos.size() < lo || a.pos.size() > hi) fail(what + "() takes " + std::to_string(lo) + (hi > lo ? " to " + std::to_string(hi) : "") + " arguments, got " + std::to_string(a.pos.size()));
  }
  static const std::string& str_arg(const Value& v, const std::string& what) {
    if (v.kind != Value::Str) fail(what + ": expected a string, got " + type_name(v));
    return v.s;
  }

  // ---- dict's methods, one function each, dispatched by name (dict_method's table)
  struct DictCall {
    const Value& obj;
    const std::string& name;
  };

  Value dict_items(DictCall& c) {
    auto& [obj, name] = c;
    auto d = obj.dict;
    return make_fn("dict.items", [d](Interp&, Args& a) {
      arity(a, 0, 0, "items");
      ValueList l;
      for (const auto& [k, v] : d->items) l.push_back(Value::of_list({key_value(k), v}, true));
      return view(std::move(l));
    });
  }

  Value dict_keys(DictCall& c) {
    auto& [obj, name] = c;
    auto d = obj.dict;
    return make_fn("dict.keys", [d](Interp&, Args& a) {
      arity(a, 0, 0, "keys");
      ValueList l;
      for (const auto& it : d->items) l.push_back(key_value(it.first));
      return view(std::move(l));
    });
  }

  Value dict_values(DictCall& c) {
    auto& [obj, name] = c;
    auto d = obj.dict;
    return make_fn("dict.values", [d](Interp&, Args& a) {
      arity(a, 0, 0, "values");
      ValueList l;
      for (const auto& it : d->items) l.push_back(it.second);
      return view(std::move(l));
    });
  }

  Value dict_get(DictCall& c) {
    auto& [obj, name] = c;
    auto d = obj.dict;
    return make_fn("dict.get", [d](Interp&, Args& a) {
      arity(a, 1, 2, "get");
      if (const Value* v = d->find(dict_key(a.pos[0]))) return *v;
      return a.pos.size() > 1 ? a.pos[1] : Value::none();
    });
  }

  Value dict_method(const Value& obj, const std::string& name) {
    static const std::unordered_map<std::string_view, Value (Interp::*)(DictCall&)> kDictMethods = {
        {"items", &Interp::dict_items},
        {"keys", &Interp::dict_keys},
        {"values", &Interp::dict_values},
        {"get", &Interp::dict_get}};
    DictCall c{obj, name};
    if (const auto it = kDictMethods.find(name); it != kDictMethods.end()) return (this->*it->second)(c);

    // update, pop, clear, ...: the immutable sandbox makes them undefined (jinja2's unsafe undefined)
    static const char* mutating[] = {"update", "pop", "popitem", "setdefault", "clear", "copy", "fromkeys"};
    for (const char* m : mutating)
      if (name == m) fail("unsupported construct: the dict method " + name + " (the template environment is immutable)");
    return Value::undefined("");
  }

  // startswith and endswith on s.
  static std::function<Value(Interp&, Args&)> prefix_test(const std::string& s, bool start) {
    return [s, start](Interp&, Args& a) {
      arity(a, 1, 1, start ? "startswith" : "endswith");
      std::vector<std::string> options;
      if (a.pos[0].kind == Value::List && a.pos[0].tuple) for (const auto& x : *a.pos[0].list) options.push_back(str_arg(x, "startswith"));
      else options.push_back(str_arg(a.pos[0], start ? "startswith" : "endswith"));
      for (const auto& p : options) {
        if (p.size() <= s.size() && (start ? s.compare(0, p.size(), p) == 0 : s.compare(s.size() - p.size(), p.size(), p) == 0))
          return Value::boolean(true);
      }
      return Value::boolean(false);
    };
  }

  // ---- str's methods, one function each, dispatched by name (str_method's table)
  struct StrCall {
    const Value& obj;
    const std::string& name;
    const std::string& s;  // the string
  };

  Value str_startswith(StrCall& c) {
    auto& [obj, name, s] = c;
    return make_fn("str.startswith", prefix_test(s, true));
  }

  Value str_endswith(StrCall& c) {
    auto& [obj, name, s] = c;
    return make_fn("str.endswith", prefix_test(s, false));
  }

  Value str_strip(StrCall& c) {
    auto& [obj, name, s] = c;
    return make_fn("str." + name, [s, name](Interp&, Args& a) {
      arity(a, 0, 1, name);
      const bool has = !a.pos.empty() && a.pos[0].kind != Value::None;
      const std::string* chars = has ? &str_arg(a.pos[0], name) : nullptr;
      return Value::str(py_strip(s, name != "rstrip", name != "lstrip", chars));
    });
  }

  Value str_split(StrCall& c) {
    auto& [obj, name, s] = c;
    return make_fn("str." + name, [s, name](Interp&, Args& a) {
      if (a.kw.size() > 0) {
        for (auto& [k, v] : a.kw) {
          if (k == "sep" && a.pos.empty()) a.pos.push_back(v);
          else if (k == "maxsplit") { while (a.pos.size() < 1) a.pos.push_back(Value::none()); a.pos.push_back(v); }
          else fail(name + "() got an unexpected keyword argument '" + k + "'");
        }
        a.kw.clear();
      }
      arity(a, 0, 2, name);
      const int64_t maxsplit = a.pos.size() > 1 ? as_int(a.pos[1], "maxsplit") : -1;
      ValueList parts;
      if (a.pos.empty() || a.pos[0].kind == Value::None) {
        const std::vector<char32_t> cps = code_points(s);
        std::vector<std::pair<size_t, size_t>> words;
        size_t k = 0;
        while (k < cps.size()) {
          while (k < cps.size() && py_space(cps[k])) ++k;
          if (k == cps.size()) break;
          size_t e = k;
          while (e < cps.size() && !py_space(cps[e])) ++e;
          words.emplace_back(k, e);
          k = e;
        }
        // Past maxsplit splits the rest is one piece, with its outer whitespace (Python's rule).
        if (maxsplit >= 0 && int64_t(words.size()) > maxsplit) {
          if (name == "split") {
            const size_t from = words[size_t(maxsplit)].first;
            const size_t end = cps.size();
            words.resize(size_t(maxsplit));
            for (auto& w : words) parts.push_back(Value::str(from_code_points(cps, w.first, w.second)));
            parts.push_back(Value::str(from_code_points(cps, from, end)));
            return Value::of_list(std::move(parts));
          }
          const size_t keep = words.size() - size_t(maxsplit);
          const size_t begin = 0;
          parts.push_back(Value::str(from_code_points(cps, begin, words[keep - 1].second)));
          for (size_t w = keep; w < words.size(); ++w) parts.push_back(Value::str(from_code_points(cps, words[w].first, words[w].second)));
          return Value::of_list(std::move(parts));
        }
        for (auto& w : words) parts.push_back(Value::str(from_code_points(cps, w.first, w.second)));
        return Value::of_list(std::move(parts));
      }
      const std::string& sep = str_arg(a.pos[0], name);
      if (sep.empty()) fail(name + "(): empty separator");
      std::vector<std::string> pieces;
      size_t from = 0;
      while (true) {
        const size_t at = s.find(sep, from);
        if (at == std::string::npos) { pieces.push_back(s.substr(from)); break; }
        pieces.push_back(s.substr(from, at - from));
        from = at + sep.size();
      }
      if (maxsplit >= 0 && int64_t(pieces.size()) > maxsplit + 1) {
        std::vector<std::string> joined;
        if (name == "split") {
          joined.assign(pieces.begin(), pieces.begin() + maxsplit);
          std::string rest;
          for (size_t k = size_t(maxsplit); k < pieces.size(); ++k) rest += (k > size_t(maxsplit) ? sep : "") + pieces[k];
          joined.push_back(rest);
        } else {
          const size_t keep = pieces.size() - size_t(maxsplit);
          std::string rest;
          for (size_t k = 0; k < keep; ++k) rest += (k ? sep : "") + pieces[k];
          joined.push_back(rest);
          joined.insert(joined.end(), pieces.begin() + long(keep), pieces.end());
        }
        pieces = std::move(joined);
      }
      for (auto& p : pieces) parts.push_back(Value::str(p));
      return Value::of_list(std::move(parts));
    });
  }

  Value str_upper(StrCall& c) {
    auto& [obj, name, s] = c;
    const int mode = name == "lower" ? 0 : name == "upper" ? 1 : name == "title" ? 2 : 3;
    return make_fn("str." + name, [s, name, mode](Interp&, Args& a) {
      arity(a, 0, 0, name);
      return Value::str(py_case(mode == 3 ? py_case(s, 0, "capitalize") : s, mode, name.c_str()));
    });
  }

  Value str_replace(StrCall& c) {
    auto& [obj, name, s] = c;
    return make_fn("str.replace", [s](Interp&, Args& a) {
      arity(a, 2, 3, "replace");
      const std::string& from = str_arg(a.pos[0], "replace");
      const std::string& to = str_arg(a.pos[1], "replace");
      int64_t count = a.pos.size() > 2 ? as_int(a.pos[2], "replace") : -1;
      return Value::str(replace_all(s, from, to, count));
    });
  }

  Value str_find(StrCall& c) {
    auto& [obj, name, s] = c;
    return make_fn("str." + name, [s, name](Interp&, Args& a) {
      arity(a, 1, 1, name);
      const std::string& sub = str_arg(a.pos[0], name);
      if (name == "count") {
        if (sub.empty()) return Value::integer(int64_t(code_points(s).size()) + 1);
        int64_t c = 0;
        for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++c;
        return Value::integer(c);
      }
      const size_t at = name == "rfind" ? s.rfind(sub) : s.find(sub);
      if (at == std::string::npos) {
        if (name == "index") fail("substring not found");
        return Value::integer(-1);
      }
      return Value::integer(int64_t(code_points(s.substr(0, at)).size()));
    });
  }

  Value str_join(StrCall& c) {
    auto& [obj, name, s] = c;
    return make_fn("str.join", [s](Interp&, Args& a) {
      arity(a, 1, 1, "join");
      std::string out;
      bool first = true;
      for (const Value& x : iterate(a.pos[0])) { bounded(out += (first ? "" : s) + str_arg(x, "join")); first = false; }
      return Value::str(out);
    });
  }

  Value str_isdigit(StrCall& c) {
    auto& [obj, name, s] = c;
    return make_fn("str." + name, [s, name](Interp&, Args& a) {
      arity(a, 0, 0, name);
      const std::vector<char32_t> cps = code_points(s);
      if (cps.empty()) return Value::boolean(false);
      bool ok = true, cased = false;
      for (char32_t c : cps) {
        const auto cat = utf8proc_category(utf8proc_int32_t(c));
        if (name == "isdigit") ok &= cat == UTF8PROC_CATEGORY_ND;
        else if (name == "isspace") ok &= py_space(c);
        else if (name == "isalpha") ok &= cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
        else if (name == "isupper") { ok &= cat != UTF8PROC_CATEGORY_LL; cased |= cat == UTF8PROC_CATEGORY_LU; }
        else { ok &= cat != UTF8PROC_CATEGORY_LU && cat != UTF8PROC_CATEGORY_LT; cased |= cat == UTF8PROC_CATEGORY_LL; }
      }
      if (name == "isupper" || name == "islower") ok &= cased;
      return Value::boolean(ok);
    });
  }

  Value str_splitlines(StrCall& c) {
    auto& [obj, name, s] = c;
    return make_fn("str.splitlines", [s](Interp&, Args& a) {
      arity(a, 0, 0, "splitlines");
      ValueList l;
      for (auto& x : split_lines(s)) l.push_back(Value::str(x));
      return Value::of_list(std::move(l));
    });
  }

  Value str_format(StrCall& c) {
    auto& [obj, name, s] = c;
    // str.format with plain fields: {}, {0}, {name}, {{ and }}; a format
    // spec, a conversion or an attribute inside a field is refused.
    return make_fn("str.format", [s](Interp&, Args& a) {
      std::string out;
      size_t auto_index = 0;
      bool numbered = false, automatic = false;
      for (size_t k = 0; k < s.size(); ++k) {
        const char c = s[k];
        if (c == '}') {
          if (k + 1 < s.size() && s[k + 1] == '}') { out += '}'; ++k; continue; }
          fail("Single '}' encountered in format string");
        }
        if (c != '{') { out += c; continue; }
        if (k + 1 < s.size() && s[k + 1] == '{') { out += '{'; ++k; continue; }
        const size_t end = s.find('}', k);
        if (end == std::string::npos) fail("Single '{' encountered in format string");
        const std::string field = s.substr(k + 1, end - k - 1);
        k = end;
        if (field.find_first_of(":!.[{") != std::string::npos)
          fail("unsupported construct: str.format with a format spec, conversion or attribute ({" + field + "})");
        const Value* v = nullptr;
        if (field.empty() || std::isdigit(static_cast<unsigned char>(field[0]))) {
          size_t index = auto_index;
          if (field.empty()) { automatic = true; ++auto_index; }
          else {
            numbered = true;
            if (field.find_first_not_of("0123456789") != std::string::npos || field.size() > 6)
              fail("unsupported construct: str.format field {" + field + "}");
            index = size_t(std::stoul(field));
          }
          if (automatic && numbered) fail("cannot switch between automatic field numbering and manual field specification");
          if (index >= a.pos.size()) fail("Replacement index " + std::to_string(index) + " out of range for positional args tuple");
          v = &a.pos[index];
        } else {
          for (const auto& [kname, kv] : a.kw) if (kname == field) v = &kv;
          if (!v) fail("'" + field + "'");
        }
        if (v->lazy != Value::Plain) refuse_lazy(*v, "str.format of");
        out += to_str(*v);
        bounded(out);
      }
      Budget::charge(out.size());
      return Value::str(out);
    });
  }

  Value str_method(const Value& obj, const std::string& name) {
    if (obj.markup) fail("unsupported construct: the method " + name + " of a Markup string (|safe, |escape)");
    const std::string s = obj.s;
    static const std::unordered_map<std::string_view, Value (Interp::*)(StrCall&)> kStrMethods = {
        {"startswith", &Interp::str_startswith},
        {"endswith", &Interp::str_endswith},
        {"strip", &Interp::str_strip},
        {"lstrip", &Interp::str_strip},
        {"rstrip", &Interp::str_strip},
        {"split", &Interp::str_split},
        {"rsplit", &Interp::str_split},
        {"upper", &Interp::str_upper},
        {"lower", &Interp::str_upper},
        {"title", &Interp::str_upper},
        {"capitalize", &Interp::str_upper},
        {"replace", &Interp::str_replace},
        {"find", &Interp::str_find},
        {"count", &Interp::str_find},
        {"rfind", &Interp::str_find},
        {"index", &Interp::str_find},
        {"join", &Interp::str_join},
        {"isdigit", &Interp::str_isdigit},
        {"isspace", &Interp::str_isdigit},
        {"isalpha", &Interp::str_isdigit},
        {"isupper", &Interp::str_isdigit},
        {"islower", &Interp::str_isdigit},
        {"splitlines", &Interp::str_splitlines},
        {"format", &Interp::str_format}};
    StrCall c{obj, name, s};
    if (const auto it = kStrMethods.find(name); it != kStrMethods.end()) return (this->*it->second)(c);

    static const char* other[] = {"format_map", "partition", "rpartition", "center", "ljust",
                                  "rjust", "zfill", "expandtabs", "encode", "swapcase", "casefold", "translate",
                                  "removeprefix", "removesuffix", "rindex", "isalnum", "isnumeric", "isdecimal",
                                  "istitle", "isidentifier", "isprintable", "isascii"};
    for (const char* m : other)
      if (name == m) return make_fn("str." + name, [name](Interp&, Args&) -> Value { fail("unsupported construct: the string method " + name + "()"); });
    return Value::undefined("");
  }

  // Python's int(s) (real: float(s)) syntax: surrounding whitespace, a sign,
  // ASCII digits with single underscores between them (real: a point, an
  // exponent, inf, nan); `out` gets the text strtod / from_chars read.
  // Non-ASCII digits (int('１２') is 12) are refused, not misread.
  static bool py_number(const std::string& s, bool real, std::string& out) {
    const std::string t = py_strip(s, true, true);
    for (unsigned char c : t)
      if (c >= 0x80) fail("unsupported construct: int or float of a string with non-ASCII characters");
    out.clear();
    size_t k = 0;
    if (k < t.size() && (t[k] == '+' || t[k] == '-')) out += t[k++];
    if (real) {
      std::string w;
      for (size_t j = k; j < t.size(); ++j) w += char(std::tolower(static_cast<unsigned char>(t[j])));
      if (w == "inf" || w == "infinity" || w == "nan") { out += w; return true; }
    }
    auto digits = [&](bool need) {
      const size_t start = k;
      while (k < t.size() && std::isdigit(static_cast<unsigned char>(t[k]))) {
        out += t[k++];
        if (k + 1 < t.size() && t[k] == '_' && std::isdigit(static_cast<unsigned char>(t[k + 1]))) ++k;
      }
      return !need || k > start;
    };
    const bool int_part = digits(false) && !out.empty() && std::isdigit(static_cast<unsigned char>(out.back()));
    if (!real) return int_part && k == t.size();
    bool frac = false;
    if (k < t.size() && t[k] == '.') {
      out += t[k++];
      frac = digits(false) && std::isdigit(static_cast<unsigned char>(out.back()));
    }
    if (!int_part && !frac) return false;
    if (k < t.size() && (t[k] == 'e' || t[k] == 'E')) {
      out += t[k++];
      if (k < t.size() && (t[k] == '+' || t[k] == '-')) out += t[k++];
      if (!digits(true)) return false;
    }
    return k == t.size();
  }

  static std::string replace_all(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
    if (from.empty()) {
      // Python inserts `to` around every character
      const std::vector<char32_t> cps = code_points(s);
      std::string out;
      int64_t done = 0;
      for (size_t k = 0; k <= cps.size(); ++k) {
        if (count < 0 || done < count) { out += to; ++done; }
        if (k < cps.size()) append_utf8(out, cps[k]);
        bounded(out);
      }
      return out;
    }
    std::string out;
    size_t at = 0;
    int64_t done = 0;
    Budget::charge(s.size());
    while (count < 0 || done < count) {
      const size_t f = s.find(from, at);
      if (f == std::string::npos) break;
      bounded(out += s.substr(at, f - at) + to);
      Budget::charge(f - at + to.size());
      at = f + from.size();
      ++done;
    }
    return out + s.substr(at);
  }

  // ------------------------------------------------ operators

  Value binary(const std::string& op, const Value& a, const Value& b) {
    if (op == "~") {
      std::string r = to_str(a) + to_str(b);
      Budget::charge(r.size());
      return Value::str(bounded(r));
    }
    auto undefined_check = [&] {
      if (a.kind == Value::Undefined) fail("'" + a.s + "' is undefined");
      if (b.kind == Value::Undefined) fail("'" + b.s + "' is undefined");
    };
    undefined_check();
    if (a.lazy != Value::Plain) refuse_lazy(a, ("operator " + op + " on").c_str());
    if (b.lazy != Value::Plain) refuse_lazy(b, ("operator " + op + " on").c_str());
    if (op != "+" && ((a.kind == Value::Str && a.markup) || (b.kind == Value::Str && b.markup)))
      fail("unsupported construct: operator " + op + " on a Markup string (|safe, |escape)");
    if ((a.kind == Value::List && !a.s.empty()) || (b.kind == Value::List && !b.s.empty()))
      fail("unsupported construct: operator " + op + " on a range");
    auto type_error = [&]() -> Value {
      fail("unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" + type_name(b) + "'");
    };
    const bool ints = (a.kind == Value::Int || a.kind == Value::Bool) && (b.kind == Value::Int || b.kind == Value::Bool);
    const bool nums = a.is_number() && b.is_number();
    if (op == "+") {
      if (ints) return Value::integer(checked(__int128(as_int(a, "+")) + as_int(b, "+")));
      if (nums) return Value::real(a.number() + b.number());
      if (a.kind == Value::Str && b.kind == Value::Str) {
        Budget::charge(a.s.size() + b.s.size());
        // Markup + str escapes the str (markupsafe's __add__ and __radd__).
        if (a.markup || b.markup)
          return markup_of(bounded((a.markup ? a.s : html_escape(a.s)) + (b.markup ? b.s : html_escape(b.s))));
        return Value::str(bounded(a.s + b.s));
      }
      if (a.kind == Value::List && b.kind == Value::List && a.tuple == b.tuple) {
        if (a.list->size() + b.list->size() > kMaxItems) fail("the template built a list past a million items");
        Budget::charge(kItemCost * (a.list->size() + b.list->size()));
        ValueList l = *a.list;
        l.insert(l.end(), b.list->begin(), b.list->end());
        return Value::of_list(std::move(l), a.tuple);
      }
      return type_error();
    }
    if (op == "-") {
      if (ints) return Value::integer(checked(__int128(as_int(a, "-")) - as_int(b, "-")));
      if (nums) return Value::real(a.number() - b.number());
      return type_error();
    }
    if (op == "*") {
      if (ints) return Value::integer(checked(__int128(as_int(a, "*")) * as_int(b, "*")));
      if (nums) return Value::real(a.number() * b.number());
      const Value* seq = a.kind == Value::Str || a.kind == Value::List ? &a : b.kind == Value::Str || b.kind == Value::List ? &b : nullptr;
      const Value* cnt = seq == &a ? &b : &a;
      if (seq && (cnt->kind == Value::Int || cnt->kind == Value::Bool)) {
        const int64_t k = std::max<int64_t>(0, as_int(*cnt, "*"));
        const size_t unit = seq->kind == Value::Str ? seq->s.size() : seq->list->size();
        Budget::charge(unit * size_t(std::min<int64_t>(k, int64_t(kMaxOutput))));
        if (unit && uint64_t(k) > (seq->kind == Value::Str ? kMaxOutput : kMaxItems) / unit)
          fail("the template built a repeated sequence past 16 MiB or a million items");
        if (seq->kind == Value::Str) {
          std::string s;
          for (int64_t r = 0; r < k; ++r) s += seq->s;
          return Value::str(s);
        }
        ValueList l;
        for (int64_t r = 0; r < k; ++r) l.insert(l.end(), seq->list->begin(), seq->list->end());
        return Value::of_list(std::move(l), seq->tuple);
      }
      return type_error();
    }
    if (op == "/") {
      if (!nums) return type_error();
      if (b.number() == 0) fail(ints ? "division by zero" : "float division by zero");
      return Value::real(a.number() / b.number());
    }
    if (op == "//" || op == "%") {
      if (!nums) {
        if (op == "%" && a.kind == Value::Str) fail("unsupported construct: % string formatting");
        return type_error();
      }
      if (ints) {
        const int64_t x = as_int(a, op.c_str()), y = as_int(b, op.c_str());
        if (y == 0) fail(op == "//" ? "integer division or modulo by zero" : "integer modulo by zero");
        if (x == INT64_MIN && y == -1) fail("an integer past 64 bits");
        int64_t q = x / y, r = x % y;
        if (r != 0 && ((r < 0) != (y < 0))) { q -= 1; r += y; }
        return Value::integer(op == "//" ? q : r);
      }
      const double x = a.number(), y = b.number();
      if (y == 0) fail(op == "//" ? "float floor division by zero" : "float modulo");
      double r = std::fmod(x, y);
      if (r != 0 && ((r < 0) != (y < 0))) r += y;
      else if (r == 0) r = std::copysign(0.0, y);
      if (op == "%") return Value::real(r);
      double q = (x - r) / y;
      if (q != 0) { double fq = std::floor(q); if (q - fq > 0.5) fq += 1; q = fq; }
      else q = std::copysign(0.0, x / y);
      return Value::real(q);
    }
    if (op == "**") {
      if (ints) {
        const int64_t x = as_int(a, "**"), y = as_int(b, "**");
        if (y < 0) {
          if (x == 0) fail("0.0 cannot be raised to a negative power");
          return Value::real(std::pow(double(x), double(y)));
        }
        __int128 r = 1;
        for (int64_t k = 0; k < y; ++k) {
          r *= x;
          if (r > INT64_MAX || r < INT64_MIN) fail("an integer past 64 bits");
          if (x == 0 || x == 1) break;
          if (x == -1) { r = (y % 2) ? -1 : 1; break; }
        }
        return Value::integer(int64_t(r));
      }
      if (nums) {
        const double x = a.number(), y = b.number(), r = std::pow(x, y);
        if (x == 0 && y < 0) fail("0.0 cannot be raised to a negative power");
        if (std::isinf(r) && std::isfinite(x) && std::isfinite(y)) fail("(34, 'Numerical result out of range')");
        if (std::isnan(r) && !std::isnan(x) && !std::isnan(y)) fail("unsupported construct: a negative number to a fractional power (complex)");
        return Value::real(r);
      }
      return type_error();
    }
    fail("unknown operator " + op);
  }

  bool contains(const Value& hay, const Value& needle) {
    if (hay.lazy == Value::Generator || hay.lazy == Value::Loop) refuse_lazy(hay, "'in' on");
    if (hay.kind == Value::Dict && hay.lazy != Value::Plain) refuse_lazy(hay, "'in' on");
    switch (hay.kind) {
      case Value::Str:
        if (needle.kind != Value::Str) fail(std::string("'in <string>' requires string as left operand, not ") + type_name(needle));
        return hay.s.find(needle.s) != std::string::npos;
      case Value::List:
        for (const Value& x : *hay.list) if (equal(x, needle)) return true;
        return false;
      case Value::Dict:
        if (hay.ns) fail("argument of type 'Namespace' is not iterable");
        if (needle.kind == Value::List && !needle.tuple) fail("unhashable type: 'list'");
        if (needle.kind == Value::Dict) fail(std::string("unhashable type: '") + type_name(needle) + "'");
        return needle.kind != Value::Undefined && hay.dict->find(dict_key(needle)) != nullptr;
      case Value::Undefined: return false;
      default: fail(std::string("argument of type '") + type_name(hay) + "' is not iterable");
    }
  }

  bool compare(const std::string& op, const Value& a, const Value& b) {
    if (op == "==") return equal(a, b);
    if (op == "!=") return !equal(a, b);
    if (op == "<") return less(a, b);
    if (op == ">") return less(b, a);
    if (op == "<=") return less(a, b) || equal(a, b);
    if (op == ">=") return less(b, a) || equal(a, b);
    if (op == "in") return contains(b, a);
    return !contains(b, a);
  }

  // ------------------------------------------------ expressions

  Args eval_args(const Expr& e, size_t first) {
    Args a;
    const size_t nkw = e.kwnames.size();
    const size_t npos = e.args.size() - first - nkw;
    for (size_t k = 0; k < npos; ++k) a.pos.push_back(eval(*e.args[first + k]));
    for (size_t k = 0; k < nkw; ++k) a.kw.emplace_back(e.kwnames[k], eval(*e.args[first + npos + k]));
    return a;
  }

  Value eval(const Expr& e) {
    step();
    line = e.line;
    switch (e.kind) {
      case Expr::Literal: return e.value;
      case Expr::Name: return lookup(e.name);
      case Expr::Attr: return getattr(eval(*e.args[0]), e.name);
      case Expr::Item: {
        Value obj = eval(*e.args[0]);
        if (obj.kind == Value::Str && obj.markup) fail("unsupported construct: indexing a Markup string (|safe, |escape)");
        return getitem(obj, eval(*e.args[1]));
      }
      case Expr::Slice: {
        Value obj = eval(*e.args[0]);
        if (obj.kind == Value::Str && obj.markup) fail("unsupported construct: slicing a Markup string (|safe, |escape)");
        Value parts[3];
        for (int k = 0; k < 3; ++k) parts[k] = e.args[size_t(k) + 1] ? eval(*e.args[size_t(k) + 1]) : Value::none();
        return slice(obj, parts[0], parts[1], parts[2]);
      }
      case Expr::Call: {
        Value f = eval(*e.args[0]);
        Args a = eval_args(e, 1);
        if (f.kind == Value::Undefined) {
          if (e.args[0]->kind == Expr::Name) {
            for (const char* g : {"cycler", "joiner", "lipsum"})
              if (f.s == g) fail("unsupported construct: " + f.s + "()");
            fail("'" + f.s + "' is undefined");
          }
          if (e.args[0]->kind == Expr::Attr) fail("unsupported construct: the method " + e.args[0]->name + "() on " + describe_obj(*e.args[0]));
          fail("'" + f.s + "' is undefined");
        }
        if (f.kind != Value::Callable) fail(std::string("'") + type_name(f) + "' object is not callable");
        if (++call_depth > kMaxCallDepth) fail("calls nest more than 100 deep");
        Value r = f.fn->call(*this, a);
        --call_depth;
        return r;
      }
      case Expr::Filter: return apply_filter(e);
      case Expr::Test: {
        const bool r = apply_test(e);
        return Value::boolean(e.negated ? !r : r);
      }
      case Expr::Unary: {
        Value v = eval(*e.args[0]);
        if (v.kind == Value::Undefined) fail("'" + v.s + "' is undefined");
        if (e.name == "+") { if (!v.is_number()) fail(std::string("bad operand type for unary +: '") + type_name(v) + "'"); return v.kind == Value::Bool ? Value::integer(v.b) : v; }
        if (v.kind == Value::Int || v.kind == Value::Bool) return Value::integer(checked(-__int128(as_int(v, "-"))));
        if (v.kind == Value::Float) return Value::real(-v.f);
        fail(std::string("bad operand type for unary -: '") + type_name(v) + "'");
      }
      case Expr::Binary: {
        Value a = eval(*e.args[0]);
        Value b = eval(*e.args[1]);
        line = e.line;
        return binary(e.name, a, b);
      }
      case Expr::And: {
        Value a = eval(*e.args[0]);
        return truthy(a) ? eval(*e.args[1]) : a;
      }
      case Expr::Or: {
        Value a = eval(*e.args[0]);
        return truthy(a) ? a : eval(*e.args[1]);
      }
      case Expr::Not: return Value::boolean(!truthy(eval(*e.args[0])));
      case Expr::Cond:
        if (truthy(eval(*e.args[0]))) return eval(*e.args[1]);
        return e.args[2] ? eval(*e.args[2]) : Value::undefined("the conditional expression's missing else");
      case Expr::ListLit: case Expr::TupleLit: {
        ValueList l;
        for (const auto& x : e.args) l.push_back(eval(*x));
        return Value::of_list(std::move(l), e.kind == Expr::TupleLit);
      }
      case Expr::DictLit: {
        Value d = Value::new_dict();
        for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
          Value key = eval(*e.args[k]);
          d.dict->set(dict_key(key), eval(*e.args[k + 1]));
        }
        return d;
      }
      case Expr::Compare: {
        Value a = eval(*e.args[0]);
        for (size_t k = 0; k < e.ops.size(); ++k) {
          Value b = eval(*e.args[k + 1]);
          if (!compare(e.ops[k], a, b)) return Value::boolean(false);
          a = std::move(b);
        }
        return Value::boolean(true);
      }
    }
    fail("unknown expression");
  }

  static std::string describe_obj(const Expr& attr) {
    return attr.args[0]->kind == Expr::Name ? "'" + attr.args[0]->name + "'" : "a value";
  }

  // ------------------------------------------------ filters and tests

  struct Bound {  // arguments bound to a filter's parameters by position or name
    std::vector<Value> v;
    std::vector<bool> given;
  };
  static Bound bind(const std::string& what, Args& a, const std::vector<const char*>& params) {
    Bound b;
    b.v.resize(params.size());
    b.given.assign(params.size(), false);
    if (a.pos.size() > params.size()) fail(what + " takes at most " + std::to_string(params.size()) + " arguments");
    for (size_t k = 0; k < a.pos.size(); ++k) { b.v[k] = a.pos[k]; b.given[k] = true; }
    for (auto& [name, v] : a.kw) {
      size_t k = 0;
      while (k < params.size() && name != params[k]) ++k;
      if (k == params.size()) fail(what + " got an unexpected keyword argument '" + name + "'");
      if (b.given[k]) fail(what + " got multiple values for argument '" + name + "'");
      b.v[k] = v;
      b.given[k] = true;
    }
    return b;
  }

  Value attribute_path(const Value& item, const std::string& path) {
    Value v = item;
    size_t from = 0;
    while (true) {
      const size_t dot = path.find('.', from);
      const std::string part = path.substr(from, dot == std::string::npos ? std::string::npos : dot - from);
      bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
      v = digits ? getitem(v, Value::integer(std::stoll(part))) : getitem(v, Value::str(part));
      if (dot == std::string::npos) return v;
      from = dot + 1;
    }
  }

  // select/reject/selectattr/rejectattr: a test by name with arguments.
  bool run_test(const std::string& name, const Value& v, const std::vector<Value>& args) {
    Args a;
    a.pos = args;
    return test(name, v, a);
  }

  // ---- the filters, one function each, dispatched by name (apply_filter's table)
  struct FilterCall {
    Value& v;  // the filtered value
    Args& a;   // the filter's arguments
    const std::string& f;     // its name
    const std::string& what;  // "the filter NAME", for messages
    const Expr& e;
  };

  Value filter_trim(FilterCall& c) {
    auto& [v, a, f, what, e] = c;
    Bound b = bind(what, a, {"chars"});
    const bool has = b.given[0] && b.v[0].kind != Value::None;
    const std::string chars = has ? str_arg(b.v[0], what) : "";
    return Value::str(py_strip(to_str(v), true, true, has ? &chars : nullptr));
  }

  Value filter_tojson(FilterCall& c) {
    auto& [v, a, f, what, e] = c;
    Bound b = bind(what, a, {"ensure_ascii", "indent", "separators", "sort_keys"});
    JsonStyle st;
    st.ascii = b.given[0] && truthy(b.v[0]);
    if (b.given[1] && b.v[1].kind != Value::None) {
      if (b.v[1].kind == Value::Str) fail("unsupported construct: tojson(indent=<a string>)");
      const int64_t k = as_int(b.v[1], "tojson indent");
      if (k > 64) fail("unsupported construct: tojson(indent=) past 64");
      st.indent = int(std::max<int64_t>(k, 0));
    }
    st.item_sep = st.indent >= 0 ? "," : ", ";
    if (b.given[2] && b.v[2].kind != Value::None) {
      const Value& sep = b.v[2];
      if (sep.kind != Value::List || sep.list->size() != 2 || (*sep.list)[0].kind != Value::Str || (*sep.list)[1].kind != Value::Str)
        fail(what + ": separators must be two strings");
      st.item_sep = (*sep.list)[0].s;
      st.key_sep = (*sep.list)[1].s;
    }
    st.sort_keys = b.given[3] && truthy(b.v[3]);
    std::string out;
    json_dump(v, out, st, 0);
    Budget::charge(out.size());
    return Value::str(out);
  }

  Value filter_length(FilterCall& c) {
    auto& [v, a, f, what, e] = c;
    bind(what, a, {});
    switch (v.kind) {
      case Value::Undefined: return Value::integer(0);
      case Value::Str: return Value::integer(int64_t(code_points(v.s).size()));
      case Value::List:
        if (v.lazy == Value::Generator) fail("object of type 'generator' has no len()");
        return Value::integer(int64_t(v.list->size()));
      case Value::Dict:
        if (v.lazy == Value::Loop) refuse_lazy(v, "the length of");
        if (!v.ns) return Value::integer(int64_t(v.dict->items.size()));
        [[fallthrough]];
      default: fail(std::string("object of type '") + type_name(v) + "' has no len()");
    }
  }

  Value filter_list(FilterCall& c) {
    auto& [v, a, f, what, e] = c;
 bind(what, a, {}); return Value::of_list(iterate(v));
  }

  Value filter_string(FilterCall& c) {
    auto& [v, a, f, what, e] = c;
 bind(what, a, {}); return v.kind == Value::Str ? v : Value::str(to_str(v));
  }

  // Markup (chat templates do not autoescape: printed as it is; + escapes a str added to it).
  Value filter_safe(FilterCall& c) {
    auto& [v, a, f, what, e] = c;
 bind(what, a, {}); return v.kind == Value::Str && v.markup ? v : markup_of(to_str(v));
  }

  Value filter_e(FilterCall& c) {
    auto& [v, a, f, what, e] = c;
 bind(what, a, {}); return v.kind == Value::Str && v.markup ? v : markup_of(html_escape(to_str(v)));
  }

  Value filter_forceescape(FilterCall& c) {
    auto& [v, a, f, what, e] = c;
 bind(what, a, {}); return markup_of(html_escape(to_str(v)));
  }

  Value filter_join(FilterCall& c) {
    auto& [v, a, f, what, e] = c;
    Bound b = bind(what, a, {"d", "attribute"});
    const std::string sep = b.given[0] ? to_str(b.v[0]) : "";
    std::string out;
    bool first = true;
    for (Value x : iterate(v)) {
      if (b.given[1] && b.v[1].kind != Value::None) x = attribute_path(x, to_str(b.v[1]));
      bounded(out += (first ? "" : sep) + to_str(x));
      first = false;
    }
    return Value::str(out);
  }

  Value filter_first(FilterCall& c) {
    auto& [v, a, f, what, e] = c;
    bind(what, a, {});
    if (v.lazy == Value::Generator) {
      if (f == "last") fail("'generator' object is not reversible");
      if (v.list->empty()) return Value::undefined("No first item, sequence was empty.");
      Value x = v.list->front();
      v.list->erase(v.list->begin());
      return x;
    }
    ValueList l = iterate(v);
    if (l.empty()) return Value::undefined("No " + f + " item, sequence was empty.");
    return f == "first" ? l.front() : l.back();
  }

  Value filter_reverse(FilterCall& c) {
    auto& [v, a, f, what, e] = c;
    bind(what, a, {});
    if (v.kind == Value::Str) { std::vector<char32_t> c = code_points(v.s); std::reverse(c.begin(), c.end()); return Value::str(from_code_points(c)); }
    if (v.lazy == Value::Generator) fail("'generator' object is not reversible");
    ValueList l = iterate(v);
    std::reverse(l.begin(), l.end());
    return generator(std::move(l));
  }

  Value filter_select(FilterCall& c) {
    auto& [v, a, f, what, e] = c;
    const bool attr = f == "selectattr" || f == "rejectattr", keep = f == "select" || f == "selectattr";
    std::string path;
    if (attr) {
      if (a.pos.empty()) fail(what + " needs an attribute name");
      path = str_arg(a.pos[0], what);
      a.pos.erase(a.pos.begin());
    }
    if (!a.kw.empty()) fail(what + " takes no keyword arguments");
    ValueList out;
    for (const Value& x : truthy(v) ? iterate(v) : ValueList{}) {
      const Value item = attr ? attribute_path_soft(x, path) : x;
      bool r;
      if (a.pos.empty()) r = truthy(item);
      else {
        const std::string test_name = str_arg(a.pos[0], what);
        r = run_test(test_name, item, std::vector<Value>(a.pos.begin() + 1, a.pos.end()));
      }
      if (r == keep) out.push_back(x);
    }
    return generator(std::move(out));
  }

  Value filter_map(FilterCall& c) {
    auto& [v, a, f, what, e] = c;
    ValueList out;
    if (a.pos.empty()) {
      Bound b = bind(what, a, {"attribute", "default"});
      if (!b.given[0]) fail(what + " needs a filter name or attribute=");
      const std::string path = str_arg(b.v[0], what);
      for (const Value& x : truthy(v) ? iterate(v) : ValueList{}) {
        Value y = attribute_path_soft(x, path);
        if (y.kind == Value::Undefined && b.given[1] && b.v[1].kind != Value::None) y = b.v[1];
        out.push_back(y);
      }
      return generator(std::move(out));
    }
    if (a.pos.empty()) fail(what + " needs a filter name or attribute=");
    const std::string name = str_arg(a.pos[0], what);
    std::vector<Value> rest(a.pos.begin() + 1, a.pos.end());
    for (const Value& x : truthy(v) ? iterate(v) : ValueList{}) out.push_back(call_filter(name, x, rest, a.kw, e.line));
    return generator(std::move(out));
  }

  Value filter_lower(FilterCall& c) {
    auto& [v, a, f, what, e] = c;
    bind(what, a, {});
    const std::string s = to_str(v);
    if (f == "lower") return Value::str(py_case(s, 0, "lower"));
    if (f == "upper") return Value::str(py_case(s, 1, "upper"));
    if (f == "capitalize") return Value::str(py_case(py_case(s, 0, "capitalize"), 3, "capitalize"));
    // jinja2's do_title: split at runs of [-\s({[<], each piece's first character upper, the rest lower
    const std::vector<char32_t> cps = code_points(s);
    auto sep = [](char32_t c) { return c == '-' || py_space(c) || c == '(' || c == '{' || c == '[' || c == '<'; };
    std::string res;
    size_t k = 0;
    while (k < cps.size()) {
      size_t e = k;
      const bool is_sep = sep(cps[k]);
      while (e < cps.size() && sep(cps[e]) == is_sep) ++e;
      res += py_case(from_code_points(cps, k, k + 1), 1, "title") + py_case(from_code_points(cps, k + 1, e), 0, "title");
      k = e;
    }
    return Value::str(res);
  }

  Value filter_default(FilterCall& c) {
    auto& [v, a, f, what, e] = c;
    Bound b = bind(what, a, {"default_value", "boolean"});
    const Value dflt = b.given[0] ? b.v[0] : Value::str("");
    const bool boolean = b.given[1] && truthy(b.v[1]);
    if (v.kind == Value::Undefined || (boolean && !truthy(v))) return dflt;
    return v;
  }

  Value filter_replace(FilterCall& c) {
    auto& [v, a, f, what, e] = c;
    Bound b = bind(what, a, {"old", "new", "count"});
    if (!b.given[0] || !b.given[1]) fail(what + " needs old and new");
    const int64_t count = b.given[2] && b.v[2].kind != Value::None ? as_int(b.v[2], what.c_str()) : -1;
    return Value::str(replace_all(to_str(v), to_str(b.v[0]), to_str(b.v[1]), count));
  }

  Value filter_int(FilterCall& c) {
    auto& [v, a, f, what, e] = c;
    Bound b = bind(what, a, {"default", "base"});
    const Value dflt = b.given[0] ? b.v[0] : Value::integer(0);
    if (b.given[1]) fail("unsupported construct: int(base=...)");
    if (v.kind == Value::Int) return v;
    if (v.kind == Value::Bool) return Value::integer(v.b);
    if (v.kind == Value::Float) {
      if (!std::isfinite(v.f) || std::fabs(v.f) >= 9.2e18) return dflt;
      return Value::integer(int64_t(v.f));
    }
    if (v.kind == Value::Str) {
      // jinja2: int(s), else int(float(s)), else the default
      std::string t;
      if (py_number(v.s, false, t)) {
        int64_t x;
        auto r = std::from_chars(t.data() + (t[0] == '+'), t.data() + t.size(), x);
        if (r.ec != std::errc()) fail("unsupported construct: an integer past 64 bits");
        return Value::integer(x);
      }
      if (py_number(v.s, true, t)) {
        const double d = std::strtod(t.c_str(), nullptr);
        if (!std::isfinite(d)) return dflt;
        if (std::fabs(d) >= 9.2e18) fail("unsupported construct: an integer past 64 bits");
        return Value::integer(int64_t(d));
      }
      return dflt;
    }
    return dflt;
  }

  Value filter_float(FilterCall& c) {
    auto& [v, a, f, what, e] = c;
    Bound b = bind(what, a, {"default"});
    const Value dflt = b.given[0] ? b.v[0] : Value::real(0.0);
    if (v.is_number()) return Value::real(v.number());
    std::string t;
    if (v.kind == Value::Str && py_number(v.s, true, t)) return Value::real(std::strtod(t.c_str(), nullptr));
    return dflt;
  }

  Value filter_abs(FilterCall& c) {
    auto& [v, a, f, what, e] = c;
    bind(what, a, {});
    if (v.kind == Value::Int || v.kind == Value::Bool) { const __int128 x = as_int(v, "abs"); return Value::integer(checked(x < 0 ? -x : x)); }
    if (v.kind == Value::Float) return Value::real(std::fabs(v.f));
    fail(std::string("bad operand type for abs(): '") + type_name(v) + "'");
  }

  Value filter_round(FilterCall& c) {
    auto& [v, a, f, what, e] = c;
    Bound b = bind(what, a, {"precision", "method"});
    const int64_t p = b.given[0] ? as_int(b.v[0], "round") : 0;
    const std::string method = b.given[1] ? str_arg(b.v[1], what) : "common";
    if (!v.is_number()) fail(what + ": expected a number");
    const double x = v.number();
    if (method != "common" && method != "ceil" && method != "floor") fail(what + ": method must be common, ceil or floor");
    if (method == "common") {
      if (p != 0) fail("unsupported construct: round(precision) with a non-zero precision");
      if (v.kind != Value::Float) return Value::integer(as_int(v, "round"));  // round(int, 0) is the int
      return Value::real(std::nearbyint(x));  // Python's round: half to even
    }
    if (p != 0) fail("unsupported construct: round(precision) with a non-zero precision");
    return Value::real(method == "ceil" ? std::ceil(x) : std::floor(x));
  }

  Value filter_items(FilterCall& c) {
    auto& [v, a, f, what, e] = c;
    bind(what, a, {});
    if (v.kind == Value::Undefined) return Value::of_list({});
    if (v.kind != Value::Dict || v.ns || v.lazy != Value::Plain) fail(what + ": expected a mapping, got " + type_name(v));
    Args none;
    Value items = dict_method(v, "items").fn->call(*this, none);
    items.lazy = Value::Generator;
    return items;
  }

  Value filter_dictsort(FilterCall& c) {
    auto& [v, a, f, what, e] = c;
    Bound b = bind(what, a, {"case_sensitive", "by", "reverse"});
    if (v.kind != Value::Dict || v.ns) fail(what + ": expected a mapping, got " + type_name(v));
    const std::string by = b.given[1] ? to_str(b.v[1]) : "key";
    if (by != "key" && by != "value") fail("You can only sort by either \"key\" or \"value\"");
    const bool by_value = by == "value";
    const bool rev = b.given[2] && truthy(b.v[2]);
    const bool cs = b.given[0] && truthy(b.v[0]);
    ValueList l;
    for (const auto& [k, x] : v.dict->items) l.push_back(Value::of_list({key_value(k), x}, true));
    auto key = [&](const Value& pair) {
      Value k = (*pair.list)[by_value ? 1 : 0];
      if (!cs && k.kind == Value::Str) k = Value::str(py_case(k.s, 0, "dictsort"));
      return k;
    };
    std::stable_sort(l.begin(), l.end(), [&](const Value& x, const Value& y) { return rev ? less(key(y), key(x)) : less(key(x), key(y)); });
    return Value::of_list(std::move(l));
  }

  Value filter_sort(FilterCall& c) {
    auto& [v, a, f, what, e] = c;
    Bound b = bind(what, a, {"reverse", "case_sensitive", "attribute"});
    const bool rev = b.given[0] && truthy(b.v[0]), cs = b.given[1] && truthy(b.v[1]);
    ValueList l = iterate(v);
    const std::string path = b.given[2] && b.v[2].kind != Value::None ? to_str(b.v[2]) : "";
    auto key = [&](const Value& x) {
      Value k = path.empty() ? x : attribute_path(x, path);
      if (!cs && k.kind == Value::Str) k = Value::str(py_case(k.s, 0, "sort"));
      return k;
    };
    std::stable_sort(l.begin(), l.end(), [&](const Value& x, const Value& y) { return rev ? less(key(y), key(x)) : less(key(x), key(y)); });
    return Value::of_list(std::move(l));
  }

  Value filter_unique(FilterCall& c) {
    auto& [v, a, f, what, e] = c;
    Bound b = bind(what, a, {"case_sensitive", "attribute"});
    const bool cs = b.given[0] && truthy(b.v[0]);
    const std::string path = b.given[1] && b.v[1].kind != Value::None ? to_str(b.v[1]) : "";
    ValueList out, seen;
    for (const Value& x : iterate(v)) {
      Value k = path.empty() ? x : attribute_path(x, path);
      if (!cs && k.kind == Value::Str) k = Value::str(py_case(k.s, 0, "unique"));
      bool dup = false;
      Budget::charge(seen.size() + 1);
      for (const Value& s : seen) if (equal(s, k)) { dup = true; break; }
      if (!dup) { seen.push_back(k); out.push_back(x); }
    }
    return generator(std::move(out));
  }

  Value filter_sum(FilterCall& c) {
    auto& [v, a, f, what, e] = c;
    Bound b = f == "sum" ? bind(what, a, {"attribute", "start"}) : bind(what, a, {"case_sensitive", "attribute"});
    const size_t attr_at = f == "sum" ? 0 : 1;
    const std::string path = b.given[attr_at] && b.v[attr_at].kind != Value::None ? to_str(b.v[attr_at]) : "";
    ValueList l = iterate(v);
    if (f == "sum") {
      Value acc = b.given[1] ? b.v[1] : Value::integer(0);
      if (acc.kind == Value::Str) fail("sum() can't sum strings [use ''.join(seq) instead]");
      for (const Value& x : l) acc = binary("+", acc, path.empty() ? x : attribute_path(x, path));
      return acc;
    }
    if (l.empty()) return Value::undefined("No aggregated item, sequence was empty.");
    const bool cs = b.given[0] && truthy(b.v[0]);
    auto key = [&](const Value& x) {
      Value k = path.empty() ? x : attribute_path(x, path);
      if (!cs && k.kind == Value::Str) k = Value::str(py_case(k.s, 0, f.c_str()));
      return k;
    };
    Value best = l[0];
    for (size_t k = 1; k < l.size(); ++k) {
      if (f == "min" ? less(key(l[k]), key(best)) : less(key(best), key(l[k]))) best = l[k];
    }
    return best;
  }

  Value filter_indent(FilterCall& c) {
    auto& [v, a, f, what, e] = c;
    Bound b = bind(what, a, {"width", "first", "blank"});
    std::string pad = "    ";
    if (b.given[0] && b.v[0].kind != Value::Str && as_int(b.v[0], "indent") > 1024) fail("unsupported construct: indent past 1024");
    if (b.given[0]) pad = b.v[0].kind == Value::Str ? b.v[0].s : std::string(size_t(std::clamp<int64_t>(as_int(b.v[0], "indent"), 0, 1024)), ' ');
    const bool first = b.given[1] && truthy(b.v[1]), blank = b.given[2] && truthy(b.v[2]);
    if (v.kind != Value::Str) fail(std::string("can only concatenate str (not \"") + type_name(v) + "\") to indent");
    // jinja2's do_indent: s + "\n" split by str.splitlines, joined back
    const std::vector<std::string> lines = split_lines(to_str(v) + "\n");
    std::string rv;
    if (blank) {
      for (size_t k = 0; k < lines.size(); ++k) bounded(rv += (k ? "\n" + pad : "") + lines[k]);
    } else {
      rv = lines.empty() ? "" : lines[0];
      for (size_t k = 1; k < lines.size(); ++k) bounded(rv += "\n" + (lines[k].empty() ? "" : pad) + lines[k]);
    }
    return Value::str(first ? pad + rv : rv);
  }

  Value filter_wordcount(FilterCall& c) {
    auto& [v, a, f, what, e] = c;
    bind(what, a, {});
    // jinja2: len(re.findall(r"\w+", s))
    int64_t n = 0;
    bool in = false;
    for (char32_t c : code_points(to_str(v))) {
      const auto cat = utf8proc_category(utf8proc_int32_t(c));
      const bool w = c == '_' || (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) || cat == UTF8PROC_CATEGORY_ND ||
                     cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_NO;
      if (w && !in) ++n;
      in = w;
    }
    return Value::integer(n);
  }

  Value filter_center(FilterCall& c) {
    auto& [v, a, f, what, e] = c;
    Bound b = bind(what, a, {"width"});
    const int64_t width = b.given[0] ? as_int(b.v[0], "center") : 80;
    const std::vector<char32_t> cps = code_points(to_str(v));
    const int64_t n = int64_t(cps.size());
    if (width <= n) return Value::str(to_str(v));
    if (width > 1 << 20) fail("center: a width past 2^20");
    const int64_t marg = width - n;
    const int64_t left = marg / 2 + (marg & width & 1);
    return Value::str(std::string(size_t(left), ' ') + to_str(v) + std::string(size_t(marg - left), ' '));
  }

  Value apply_filter(const Expr& e) {
    Value v = eval(*e.args[0]);
    Args a = eval_args(e, 1);
    line = e.line;
    const std::string& f = e.name;
    const std::string what = "the filter " + f;
    if (v.kind == Value::Str && v.markup && f != "safe" && f != "e" && f != "escape" && f != "forceescape" &&
        f != "string" && f != "length" && f != "count" && f != "tojson" && f != "default" && f != "d")
      fail("unsupported construct: the filter " + f + " on a Markup string (|safe, |escape)");
    static const std::unordered_map<std::string_view, Value (Interp::*)(FilterCall&)> kFilters = {
        {"trim", &Interp::filter_trim},
        {"tojson", &Interp::filter_tojson},
        {"length", &Interp::filter_length},
        {"count", &Interp::filter_length},
        {"list", &Interp::filter_list},
        {"string", &Interp::filter_string},
        {"safe", &Interp::filter_safe},
        {"e", &Interp::filter_e},
        {"escape", &Interp::filter_e},
        {"forceescape", &Interp::filter_forceescape},
        {"join", &Interp::filter_join},
        {"first", &Interp::filter_first},
        {"last", &Interp::filter_first},
        {"reverse", &Interp::filter_reverse},
        {"select", &Interp::filter_select},
        {"reject", &Interp::filter_select},
        {"selectattr", &Interp::filter_select},
        {"rejectattr", &Interp::filter_select},
        {"map", &Interp::filter_map},
        {"lower", &Interp::filter_lower},
        {"upper", &Interp::filter_lower},
        {"capitalize", &Interp::filter_lower},
        {"title", &Interp::filter_lower},
        {"default", &Interp::filter_default},
        {"d", &Interp::filter_default},
        {"replace", &Interp::filter_replace},
        {"int", &Interp::filter_int},
        {"float", &Interp::filter_float},
        {"abs", &Interp::filter_abs},
        {"round", &Interp::filter_round},
        {"items", &Interp::filter_items},
        {"dictsort", &Interp::filter_dictsort},
        {"sort", &Interp::filter_sort},
        {"unique", &Interp::filter_unique},
        {"sum", &Interp::filter_sum},
        {"min", &Interp::filter_sum},
        {"max", &Interp::filter_sum},
        {"indent", &Interp::filter_indent},
        {"wordcount", &Interp::filter_wordcount},
        {"center", &Interp::filter_center}};
    FilterCall c{v, a, f, what, e};
    if (const auto it = kFilters.find(f); it != kFilters.end()) return (this->*it->second)(c);

    static const char* known[] = {"attr", "batch", "filesizeformat", "format", "groupby", "pprint", "random", "slice",
                                  "striptags", "truncate", "urlencode", "urlize", "wordwrap", "xmlattr", "min", "max"};
    for (const char* k : known)
      if (f == k) fail("unsupported construct: the filter " + f);
    fail("unsupported construct: the filter " + f + " (not a jinja2 filter this renderer knows)");
  }

  Value attribute_path_soft(const Value& item, const std::string& path) {
    if (item.kind == Value::Undefined) return item;
    return attribute_path(item, path);
  }

  Value call_filter(const std::string& name, const Value& v, const std::vector<Value>& args,
                    const std::vector<std::pair<std::string, Value>>& kw, int at) {
    Expr e;
    e.kind = Expr::Filter;
    e.name = name;
    e.line = at;
    auto literal = [](const Value& x) {
      auto l = std::make_unique<Expr>();
      l->kind = Expr::Literal;
      l->value = x;
      return l;
    };
    e.args.push_back(literal(v));
    for (const Value& x : args) e.args.push_back(literal(x));
    for (const auto& [k, x] : kw) {
      e.kwnames.push_back(k);
      e.args.push_back(literal(x));
    }
    return apply_filter(e);
  }

  bool apply_test(const Expr& e) {
    Value v = eval(*e.args[0]);
    Args a = eval_args(e, 1);
    line = e.line;
    return test(e.name, v, a);
  }

  // ---- the tests, one function each, dispatched by name (test's table)
  struct TestCall {
    const Value& v;
    Args& a;
    const std::string& name;
    const std::string& what;  // "the test NAME", for messages
    Value one() const {  // the test's one argument
      if (!a.kw.empty()) fail(what + " takes no keyword arguments");
      if (a.pos.size() != 1) fail(what + " takes one argument");
      return a.pos[0];
    }
    void none() const {
      if (!a.pos.empty() || !a.kw.empty()) fail(what + " takes no arguments");
    }
  };

  bool test_defined(TestCall& c) {
    auto& [v, a, name, what] = c;
 c.none(); return v.kind != Value::Undefined;
  }

  bool test_undefined(TestCall& c) {
    auto& [v, a, name, what] = c;
 c.none(); return v.kind == Value::Undefined;
  }

  bool test_none(TestCall& c) {
    auto& [v, a, name, what] = c;
 c.none(); return v.kind == Value::None;
  }

  bool test_string(TestCall& c) {
    auto& [v, a, name, what] = c;
 c.none(); return v.kind == Value::Str;
  }

  bool test_number(TestCall& c) {
    auto& [v, a, name, what] = c;
 c.none(); return v.is_number();
  }

  bool test_integer(TestCall& c) {
    auto& [v, a, name, what] = c;
 c.none(); return v.kind == Value::Int;
  }

  bool test_float(TestCall& c) {
    auto& [v, a, name, what] = c;
 c.none(); return v.kind == Value::Float;
  }

  bool test_boolean(TestCall& c) {
    auto& [v, a, name, what] = c;
 c.none(); return v.kind == Value::Bool;
  }

  bool test_true(TestCall& c) {
    auto& [v, a, name, what] = c;
 c.none(); return v.kind == Value::Bool && v.b;
  }

  bool test_false(TestCall& c) {
    auto& [v, a, name, what] = c;
 c.none(); return v.kind == Value::Bool && !v.b;
  }

  bool test_mapping(TestCall& c) {
    auto& [v, a, name, what] = c;
 c.none(); return v.kind == Value::Dict && !v.ns;
  }

  bool test_iterable(TestCall& c) {
    auto& [v, a, name, what] = c;
    c.none();
    if (v.lazy == Value::Loop) refuse_lazy(v, "the test iterable on");
    return v.kind == Value::Str || v.kind == Value::List || (v.kind == Value::Dict && !v.ns) || v.kind == Value::Undefined;
  }

  bool test_sequence(TestCall& c) {
    auto& [v, a, name, what] = c;
 c.none(); return v.kind == Value::Str || v.kind == Value::List || (v.kind == Value::Dict && !v.ns) || v.kind == Value::Undefined;
  }

  bool test_callable(TestCall& c) {
    auto& [v, a, name, what] = c;
 c.none(); return v.kind == Value::Callable || v.kind == Value::Undefined;
  }

  bool test_lower(TestCall& c) {
    auto& [v, a, name, what] = c;
    c.none();
    if (v.kind != Value::Str) fail(what + ": expected a string");
    Args no;
    return truthy(str_method(v, name == "lower" ? "islower" : "isupper").fn->call(*this, no));
  }

  bool test_odd(TestCall& c) {
    auto& [v, a, name, what] = c;
 c.none(); const int64_t x = as_int(v, what.c_str()); return (((x % 2) + 2) % 2 == 1) == (name == "odd");
  }

  bool test_divisibleby(TestCall& c) {
    auto& [v, a, name, what] = c;
    const int64_t d = as_int(c.one(), what.c_str());
    if (d == 0) fail("integer division or modulo by zero");
    return d == -1 || as_int(v, what.c_str()) % d == 0;  // (INT64_MIN % -1 traps)
  }

  bool test_equalto(TestCall& c) {
    auto& [v, a, name, what] = c;
    return compare("==", v, c.one());
  }

  bool test_ne(TestCall& c) {
    auto& [v, a, name, what] = c;
    return compare("!=", v, c.one());
  }

  bool test_lt(TestCall& c) {
    auto& [v, a, name, what] = c;
    return compare("<", v, c.one());
  }

  bool test_le(TestCall& c) {
    auto& [v, a, name, what] = c;
    return compare("<=", v, c.one());
  }

  bool test_gt(TestCall& c) {
    auto& [v, a, name, what] = c;
    return compare(">", v, c.one());
  }

  bool test_ge(TestCall& c) {
    auto& [v, a, name, what] = c;
    return compare(">=", v, c.one());
  }

  bool test_in(TestCall& c) {
    auto& [v, a, name, what] = c;
    return contains(c.one(), v);
  }

  bool test_sameas(TestCall& c) {
    auto& [v, a, name, what] = c;
    const Value o = c.one();
    if (v.kind != o.kind) return false;
    switch (v.kind) {
      case Value::None: case Value::Undefined: return true;
      case Value::Bool: return v.b == o.b;
      case Value::List: return v.list == o.list;
      case Value::Dict: return v.dict == o.dict;
      case Value::Callable: return v.fn == o.fn;
      case Value::Int: return v.i == o.i && v.i >= -5 && v.i <= 256;  // CPython's small-int cache
      default: fail("unsupported construct: sameas on a " + std::string(type_name(v)));
    }
  }

  bool test_escaped(TestCall& c) {
    auto& [v, a, name, what] = c;
    fail("unsupported construct: the test " + name);
  }

  bool test(const std::string& name, const Value& v, Args& a) {
    const std::string what = "the test " + name;
    if (name != "defined" && v.lazy != Value::Plain && name != "undefined" && name != "none" && name != "iterable")
      refuse_lazy(v, ("the test " + name + " on").c_str());
    static const std::unordered_map<std::string_view, bool (Interp::*)(TestCall&)> kTests = {
        {"defined", &Interp::test_defined},
        {"undefined", &Interp::test_undefined},
        {"none", &Interp::test_none},
        {"string", &Interp::test_string},
        {"number", &Interp::test_number},
        {"integer", &Interp::test_integer},
        {"float", &Interp::test_float},
        {"boolean", &Interp::test_boolean},
        {"true", &Interp::test_true},
        {"false", &Interp::test_false},
        {"mapping", &Interp::test_mapping},
        {"iterable", &Interp::test_iterable},
        {"sequence", &Interp::test_sequence},
        {"callable", &Interp::test_callable},
        {"lower", &Interp::test_lower},
        {"upper", &Interp::test_lower},
        {"odd", &Interp::test_odd},
        {"even", &Interp::test_odd},
        {"divisibleby", &Interp::test_divisibleby},
        {"equalto", &Interp::test_equalto},
        {"eq", &Interp::test_equalto},
        {"==", &Interp::test_equalto},
        {"ne", &Interp::test_ne},
        {"!=", &Interp::test_ne},
        {"lt", &Interp::test_lt},
        {"lessthan", &Interp::test_lt},
        {"<", &Interp::test_lt},
        {"le", &Interp::test_le},
        {"<=", &Interp::test_le},
        {"gt", &Interp::test_gt},
        {"greaterthan", &Interp::test_gt},
        {">", &Interp::test_gt},
        {"ge", &Interp::test_ge},
        {">=", &Interp::test_ge},
        {"in", &Interp::test_in},
        {"sameas", &Interp::test_sameas},
        {"escaped", &Interp::test_escaped},
        {"filter", &Interp::test_escaped},
        {"test", &Interp::test_escaped}};
    TestCall c{v, a, name, what};
    if (const auto it = kTests.find(name); it != kTests.end()) return (this->*it->second)(c);

    fail("unsupported construct: the test " + name + " (not a jinja2 test this renderer knows)");
  }

  // ------------------------------------------------ statements

  void assign(const std::vector<std::string>& targets, const Value& v) {
    if (targets.size() == 1) { frames.back()[targets[0]] = v; return; }
    ValueList items = iterate(v);
    if (items.size() != targets.size())
      fail("cannot unpack " + std::to_string(items.size()) + " values into " + std::to_string(targets.size()) + " names");
    for (size_t k = 0; k < targets.size(); ++k) frames.back()[targets[k]] = items[k];
  }

  void run(const Body& body) {
    for (const auto& s : body) exec(*s);
  }

  void exec(const Stmt& s) {
    step();
    line = s.line;
    switch (s.kind) {
      case Stmt::Text: emit(s.text); return;
      case Stmt::Print: {
        Value v = eval(*s.expr);
        if (v.kind == Value::Callable) fail("the function " + v.fn->name + " cannot be printed (call it)");
        emit(to_str(v));
        return;
      }
      case Stmt::If:
        for (const auto& [cond, body] : s.branches) {
          if (!cond || truthy(eval(*cond))) { run(body); return; }
        }
        return;
      case Stmt::For: exec_for(s); return;
      case Stmt::Set: {
        Value v = eval(*s.expr);
        line = s.line;
        if (!s.attr.empty()) {
          Value ns = lookup(s.targets[0]);
          if (ns.kind != Value::Dict || !ns.ns) fail("can only set attributes on a namespace, not on '" + s.targets[0] + "'");
          ns.dict->set(s.attr, v);
          return;
        }
        assign(s.targets, v);
        return;
      }
      case Stmt::SetBlock: {
        std::string* saved = out;
        std::string captured;
        out = &captured;
        try { run(s.body); } catch (...) { out = saved; throw; }
        out = saved;
        frames.back()[s.targets[0]] = Value::str(captured);
        return;
      }
      case Stmt::Macro: {
        // The scopes around the definition (a loop's variables) go with it; the globals are read at the call.
        const Stmt* def = &s;
        auto closure = std::make_shared<const std::vector<Frame>>(frames.begin() + 1, frames.end());
        frames.back()[s.text] = make_fn(s.text, [def, closure](Interp& in, Args& a) { return in.call_macro(*def, *closure, a); });
        return;
      }
      case Stmt::Break: throw BreakSignal{};
      case Stmt::Continue: throw ContinueSignal{};
      case Stmt::Generation: {  // a call block in transformers: its own scope
        frames.emplace_back();
        try { run(s.body); } catch (...) { frames.pop_back(); throw; }
        frames.pop_back();
        return;
      }
    }
  }

  Value call_macro(const Stmt& def, const std::vector<Frame>& closure, Args& a) {
    if (a.pos.size() > def.params.size())
      fail("unsupported construct: macro '" + def.text + "' called with more than its " + std::to_string(def.params.size()) + " parameters (varargs)");
    Frame local;
    std::vector<bool> given(def.params.size(), false);
    for (size_t k = 0; k < a.pos.size(); ++k) { local[def.params[k]] = a.pos[k]; given[k] = true; }
    for (auto& [name, v] : a.kw) {
      auto it = std::find(def.params.begin(), def.params.end(), name);
      if (it == def.params.end()) fail("unsupported construct: macro '" + def.text + "' called with the keyword '" + name + "' it does not declare (kwargs)");
      const size_t k = size_t(it - def.params.begin());
      if (given[k]) fail("macro '" + def.text + "' got multiple values for argument '" + name + "'");
      local[name] = v;
      given[k] = true;
    }
    const size_t first_default = def.params.size() - def.defaults.size();
    std::vector<Frame> saved = std::move(frames);
    frames.clear();
    frames.push_back(saved.front());
    frames.insert(frames.end(), closure.begin(), closure.end());
    if (!local.find("varargs")) local["varargs"] = Value::of_list({}, true);
    if (!local.find("kwargs")) local["kwargs"] = Value::new_dict();
    frames.push_back(std::move(local));
    std::string* saved_out = out;
    std::string captured;
    out = &captured;
    try {
      for (size_t k = 0; k < def.params.size(); ++k) {
        if (given[k]) continue;
        frames.back()[def.params[k]] = k >= first_default ? eval(*def.defaults[k - first_default]) : Value::undefined(def.params[k]);
      }
      run(def.body);
    } catch (...) {
      out = saved_out;
      frames = std::move(saved);
      throw;
    }
    out = saved_out;
    // the macro cannot change the caller's variables, but a namespace it was given can change (shared)
    frames = std::move(saved);
    return Value::str(captured);
  }

  void exec_for(const Stmt& s) {
    Value iterable = eval(*s.expr);
    ValueList items = iterate(iterable);
    if (s.filter) {
      ValueList kept;
      for (const Value& x : items) {
        frames.emplace_back();
        try { assign(s.targets, x); } catch (...) { frames.pop_back(); throw; }
        const bool keep = [&] {
          try { return truthy(eval(*s.filter)); } catch (...) { frames.pop_back(); throw; }
        }();
        frames.pop_back();
        if (keep) kept.push_back(x);
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      if (!s.else_body.empty()) {
        frames.emplace_back();
        try { run(s.else_body); } catch (...) { frames.pop_back(); throw; }
        frames.pop_back();
      }
      return;
    }
    const int64_t n = int64_t(items.size());
    frames.emplace_back();
    // One loop object, advanced in place each iteration (as jinja2's LoopContext is).
    Value loop = Value::new_dict();
    loop.lazy = Value::Loop;
    auto& d = *loop.dict;
    for (const char* k : {"index", "index0", "revindex", "revindex0", "first", "last", "length", "depth", "depth0",
                          "previtem", "nextitem", "cycle"})
      d.items.emplace_back(k, Value());
    d.items[6].second = Value::integer(n);
    d.items[7].second = Value::integer(1);
    d.items[8].second = Value::integer(0);
    const std::weak_ptr<ValueDict> live = loop.dict;  // (the function lives in the dict: no owning cycle)
    d.items[11].second = make_fn("loop.cycle", [live](Interp&, Args& a) {
      const auto dict = live.lock();
      if (!dict) fail("loop.cycle called after its loop");
      if (a.pos.empty()) fail("no items for cycling given");
      return a.pos[size_t(dict->items[1].second.i % int64_t(a.pos.size()))];
    });
    try {
      for (int64_t k = 0; k < n; ++k) {
        step();
        d.items[0].second = Value::integer(k + 1);
        d.items[1].second = Value::integer(k);
        d.items[2].second = Value::integer(n - k);
        d.items[3].second = Value::integer(n - k - 1);
        d.items[4].second = Value::boolean(k == 0);
        d.items[5].second = Value::boolean(k == n - 1);
        d.items[9].second = k > 0 ? items[size_t(k - 1)] : Value::undefined("there is no previous item");
        d.items[10].second = k + 1 < n ? items[size_t(k + 1)] : Value::undefined("there is no next item");
        frames.back().clear();
        frames.back()["loop"] = loop;
        assign(s.targets, items[size_t(k)]);
        try {
          run(s.body);
        } catch (const ContinueSignal&) {
          continue;
        } catch (const BreakSignal&) {
          break;
        }
      }
    } catch (...) {
      frames.pop_back();
      throw;
    }
    frames.pop_back();
  }
};

}  // namespace

// ---------------------------------------------------------------- ChatTemplate

ChatTemplate::ChatTemplate(const std::string& text, const std::string& name) : name_(name) {
  if (!text::valid_utf8(text)) throw Error(name + ": the template is not valid UTF-8");
  try {
    auto p = std::make_shared<Program>();
    p->body = Parser(lex(text)).parse_template();
    program_ = std::move(p);
  } catch (const SyntaxError& e) {
    throw Error(name + ": line " + std::to_string(e.line) + ": " + e.msg);
  }
}

std::string ChatTemplate::render_json(const std::string& messages_json, const ChatRenderOptions& opts) const {
  nlohmann::ordered_json messages, vars;
  try {
    messages = nlohmann::ordered_json::parse(messages_json);
    if (!opts.variables_json.empty()) vars = nlohmann::ordered_json::parse(opts.variables_json);
  } catch (const nlohmann::json::exception& e) {
    throw Error(name_ + ": the messages are not valid JSON: " + std::string(e.what()));
  }
  if (!messages.is_array()) throw Error(name_ + ": the messages must be a JSON array of {\"role\", \"content\"} objects");
  for (size_t k = 0; k < messages.size(); ++k) {
    const auto& m = messages[k];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      throw Error(name_ + ": message " + std::to_string(k) + " must be an object with a string \"role\"");
  }
  if (!vars.is_null() && !vars.is_object()) throw Error(name_ + ": the variables must be a JSON object");
  if (vars.is_object() && vars.contains("messages")) throw Error(name_ + ": the variables must not set messages");
  Interp in;
  std::string out;
  in.out = &out;
  Budget::used = 0;
  Nest::depth = 0;
  if (opts.now) in.now = *opts.now;
  else {
    const std::time_t t = std::time(nullptr);
    localtime_r(&t, &in.now);
  }
  try {
    Frame globals;
    globals["messages"] = from_json(messages);
    globals["add_generation_prompt"] = Value::boolean(opts.add_generation_prompt);
    globals["tools"] = Value::none();
    globals["documents"] = Value::none();
    if (opts.bos_token) globals["bos_token"] = Value::str(*opts.bos_token);
    if (opts.eos_token) globals["eos_token"] = Value::str(*opts.eos_token);
    if (vars.is_object())
      for (const auto& [k, v] : vars.items()) globals[k] = from_json(v);
    globals["raise_exception"] = Interp::make_fn("raise_exception", [](Interp&, Args& a) -> Value {
      fail("raise_exception: " + (a.pos.empty() ? std::string() : to_str(a.pos[0])));
    });
    globals["strftime_now"] = Interp::make_fn("strftime_now", [](Interp& in, Args& a) {
      if (a.pos.size() != 1 || a.pos[0].kind != Value::Str) fail("strftime_now takes one format string");
      // datetime.now() is naive: %Z and %z are empty.
      std::string f;
      const std::string& given = a.pos[0].s;
      for (size_t k = 0; k < given.size(); ++k) {
        if (given[k] != '%') { f += given[k]; continue; }
        if (k + 1 == given.size()) fail("unsupported construct: strftime_now with a lone % at the end");
        const char c = given[++k];
        if (!std::strchr("aAbBdHIjmMpSUwWyYZz%eyFTDRrcxXuVGgCnth", c)) fail(std::string("unsupported construct: strftime_now's directive %") + c);
        if (c != 'Z' && c != 'z') { f += '%'; f += c; }
      }
      char buf[512];
      const size_t len = std::strftime(buf, sizeof buf, f.c_str(), &in.now);
      if (len == 0 && !f.empty()) fail("strftime_now: the formatted date is empty or past 512 bytes");
      return Value::str(std::string(buf, len));
    });
    globals["namespace"] = Interp::make_fn("namespace", [](Interp&, Args& a) {
      Value ns = Value::new_dict();
      ns.ns = true;
      for (const Value& p : a.pos) {
        if (p.kind != Value::Dict) fail("namespace() takes keyword arguments or a dict");
        for (const auto& [k, v] : p.dict->items) ns.dict->set(k, v);
      }
      for (const auto& [k, v] : a.kw) ns.dict->set(k, v);
      return ns;
    });
    globals["range"] = Interp::make_fn("range", [](Interp&, Args& a) {
      if (!a.kw.empty() || a.pos.empty() || a.pos.size() > 3) fail("range takes 1 to 3 integer arguments");
      int64_t start = 0, stop, st = 1;
      if (a.pos.size() == 1) stop = as_int(a.pos[0], "range");
      else { start = as_int(a.pos[0], "range"); stop = as_int(a.pos[1], "range"); }
      if (a.pos.size() == 3) st = as_int(a.pos[2], "range");
      if (st == 0) fail("range() arg 3 must not be zero");
      const __int128 count = st > 0 ? (stop > start ? (__int128(stop) - start + st - 1) / st : 0)
                                    : (start > stop ? (__int128(start) - stop - st - 1) / -st : 0);
      if (count > 100000) fail("range() larger than 100000 items (the environment's limit)");
      ValueList l;
      Budget::charge(kItemCost * size_t(count));
      for (__int128 k = 0; k < count; ++k) l.push_back(Value::integer(int64_t(start + k * st)));
      Value r = Value::of_list(std::move(l));
      r.s = "range(" + std::to_string(start) + ", " + std::to_string(stop) + (st != 1 ? ", " + std::to_string(st) : "") + ")";
      return r;
    });
    globals["dict"] = Interp::make_fn("dict", [](Interp&, Args& a) {
      if (!a.pos.empty()) fail("unsupported construct: dict() with positional arguments");
      Value d = Value::new_dict();
      for (const auto& [k, v] : a.kw) d.dict->set(k, v);
      return d;
    });
    in.frames.push_back(std::move(globals));
    in.run(program_->body);
  } catch (const Fail& e) {
    throw Error(name_ + ": line " + std::to_string(in.line) + ": " + e.msg);
  } catch (const BreakSignal&) {
    throw Error(name_ + ": line " + std::to_string(in.line) + ": 'break' outside a loop");
  } catch (const ContinueSignal&) {
    throw Error(name_ + ": line " + std::to_string(in.line) + ": 'continue' outside a loop");
  }
  return out;
}

std::string chat_messages_json(const std::vector<ChatMessage>& messages) {
  nlohmann::ordered_json j = nlohmann::ordered_json::array();
  for (const auto& m : messages) j.push_back({{"role", m.role}, {"content", m.content}});
  return j.dump();
}

std::string check_chat_messages(const std::string& messages_json, bool join_text_parts) {
  using ojson = nlohmann::ordered_json;
  const ojson m = ojson::parse(messages_json, nullptr, false);  // (discarded, not thrown, when invalid)
  if (m.is_discarded()) throw Error("messages: not valid JSON");
  if (!m.is_array()) throw Error("messages: expected a list of {\"role\", \"content\"} objects");
  if (m.empty()) throw Error("messages: the list is empty");
  ojson out = ojson::array();
  for (size_t i = 0; i < m.size(); ++i) {
    const std::string at = "messages[" + std::to_string(i) + "]";
    const ojson& x = m[i];
    if (!x.is_object()) throw Error(at + ": expected an object with \"role\" and \"content\"");
    const auto role = x.find("role");
    if (role == x.end() || !role->is_string()) throw Error(at + ".role: expected a string");
    const std::string r = role->get<std::string>();
    if (r != "system" && r != "developer" && r != "user" && r != "assistant" && r != "tool")
      throw Error(at + ".role: expected system, developer, user, assistant or tool, got \"" + r + "\"");
    const auto content = x.find("content");
    ojson msg = x;  // other fields (name, tool_calls, tool_call_id ...) pass to the template as they are
    const bool calls = r == "assistant" && x.contains("tool_calls") && !x["tool_calls"].is_null();
    if (content == x.end() || content->is_null()) {
      if (!calls) throw Error(at + ".content: required: a string or a list of text parts");
    } else if (content->is_array()) {
      std::string text;
      for (size_t k = 0; k < content->size(); ++k) {
        const ojson& p = (*content)[k];
        if (!p.is_object() || !p.contains("type") || p["type"] != "text" || !p.contains("text") || !p["text"].is_string())
          throw Error(at + ".content[" + std::to_string(k) + "]: expected {\"type\": \"text\", \"text\": \"...\"} (text only)");
        text += (k ? "\n" : "") + p["text"].get<std::string>();
      }
      if (join_text_parts) msg["content"] = text;
    } else if (!content->is_string()) {
      throw Error(at + ".content: expected a string or a list of text parts, got " + std::string(content->type_name()));
    }
    out.push_back(std::move(msg));
  }
  try {
    return out.dump();
  } catch (const ojson::type_error&) {
    throw Error("messages: a string is not valid UTF-8");
  }
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages, const ChatRenderOptions& opts) const {
  for (const auto& m : messages)
    if (!text::valid_utf8(m.role) || !text::valid_utf8(m.content)) throw Error(name_ + ": a message is not valid UTF-8");
  return render_json(chat_messages_json(messages), opts);
}

}  // namespace ffn
