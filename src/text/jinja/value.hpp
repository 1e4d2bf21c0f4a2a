// The values of the Jinja2 subset chat templates use (src/text/jinja.cpp):
// Python's ints, floats (with Python's repr), str indexed by code point,
// lists, tuples, insertion-ordered dicts, Markup; the text helpers of
// Python's str; the limits a render runs within.
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

#include "ffn/types.hpp"

namespace ffn::jinja {

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

[[noreturn]] void fail(const std::string& m);

const char* type_name(const Value& v);

const char* lazy_name(const Value& v);

[[noreturn]] void refuse_lazy(const Value& v, const char* what);

// A dict's keys are strings, or integers ({512: 128}) stored as 0xFF and
// their digits: no UTF-8 text (JSON keys, template strings) holds 0xFF.
// Other key types (a float or bool equal to an int shares its key in
// Python) are refused.
std::string dict_key(const Value& k);

Value key_value(const std::string& k);

// Bounds on what a template can build, so that no template (or fuzzer)
// runs the process out of memory or stack: text and output past 16 MiB,
// lists past a million items, values nested past 256.
constexpr size_t kMaxOutput = size_t(16) << 20;

constexpr size_t kMaxItems = size_t(1) << 20;

constexpr int kMaxNesting = 256;

const std::string& bounded(const std::string& s);

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

std::vector<char32_t> code_points(const std::string& s);

void append_utf8(std::string& out, char32_t c);

std::string from_code_points(const std::vector<char32_t>& cps, size_t from = 0, size_t to = SIZE_MAX);

// Python's str.isspace.
bool py_space(char32_t c);

// str.strip / lstrip / rstrip, with chars or Python's whitespace.
std::string py_strip(const std::string& s, bool left, bool right, const std::string* chars = nullptr);

// Python's str.splitlines() (no keepends).
std::vector<std::string> split_lines(const std::string& s);

// Python's str.upper / lower / title / capitalize: utf8proc's simple case
// mapping, which is Python's except for the characters whose full mapping
// has several characters (SpecialCasing: ß → SS, ligatures, Greek with
// ypogegrammeni); those are refused rather than mapped differently.
bool special_casing(char32_t c);

char32_t case_map(char32_t c, bool upper, const char* what);

std::string py_case(const std::string& s, int mode, const char* what);

// Python's repr of a float.
std::string float_repr(double x);

// Python's str.isprintable for one code point.
bool py_printable(char32_t c);

std::string str_repr(const std::string& s);

std::string repr(const Value& v);

// Python's str() of a value: what {{ }} prints.
std::string to_str(const Value& v);

// markupsafe.escape of a str: & < > ' " as HTML entities.
std::string html_escape(const std::string& s);

Value markup_of(std::string s);

std::string repr(const Value& v);

// json.dumps(x, ensure_ascii=False, indent=indent, sort_keys=sort_keys): transformers' tojson.
struct JsonStyle {
  int indent = -1;  // < 0: one line
  bool sort_keys = false, ascii = false;
  std::string item_sep, key_sep = ": ";
};

void json_dump(const Value& v, std::string& out, const JsonStyle& st, int depth);

Value from_json(const nlohmann::ordered_json& j);

bool truthy(const Value& v);

const char* type_name(const Value& v);

bool equal(const Value& a, const Value& b);

// a < b in Python (numbers, strings by code point, lists lexicographically).
bool less(const Value& a, const Value& b);

// The items a for loop, list or join walks: a list's items, a dict's keys, a string's characters.
ValueList iterate(const Value& v);

int64_t checked(__int128 x);

int64_t as_int(const Value& v, const char* what);

}  // namespace ffn::jinja
