// The values and their Python semantics (src/text/jinja/value.hpp).
#include "text/jinja/value.hpp"

#include <utf8proc.h>

#include "text/specials.hpp"

namespace ffn::jinja {

Value Value::new_dict() { Value v; v.kind = Dict; v.dict = std::make_shared<ValueDict>(); return v; }

[[noreturn]] void fail(const std::string& m) { throw Fail(m); }

const char* lazy_name(const Value& v) {
  return v.lazy == Value::Generator ? "a generator (map, select, reject, reverse, unique, items)"
         : v.lazy == Value::View    ? "a dict view (.items(), .keys(), .values())"
                                    : "the loop object";
}

[[noreturn]] void refuse_lazy(const Value& v, const char* what) {
  fail(std::string("unsupported construct: ") + what + " " + lazy_name(v));
}

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

const std::string& bounded(const std::string& s) {
  if (s.size() > kMaxOutput) fail("the template built a string past 16 MiB");
  return s;
}

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

std::string from_code_points(const std::vector<char32_t>& cps, size_t from, size_t to) {
  std::string out;
  for (size_t k = from; k < std::min(to, cps.size()); ++k) append_utf8(out, cps[k]);
  return out;
}

bool py_space(char32_t c) {
  return c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

std::string py_strip(const std::string& s, bool left, bool right, const std::string* chars) {
  const std::vector<char32_t> cps = code_points(s);
  std::vector<char32_t> set;
  if (chars) set = code_points(*chars);
  auto strip = [&](char32_t c) { return chars ? std::find(set.begin(), set.end(), c) != set.end() : py_space(c); };
  size_t a = 0, b = cps.size();
  if (left) while (a < b && strip(cps[a])) ++a;
  if (right) while (b > a && strip(cps[b - 1])) --b;
  return from_code_points(cps, a, b);
}

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

}  // namespace ffn::jinja
