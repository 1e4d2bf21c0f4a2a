// str's and dict's methods (src/text/jinja/runtime.hpp), one function each, found by name.
#include "text/jinja/runtime.hpp"

#include <utf8proc.h>

namespace ffn::jinja {

const std::string& Interp::str_arg(const Value& v, const std::string& what) {
  if (v.kind != Value::Str) fail(what + ": expected a string, got " + type_name(v));
  return v.s;
}

Value Interp::dict_items(DictCall& c) {
  const Value& obj = c.obj;
  auto d = obj.dict;
  return make_fn("dict.items", [d](Interp&, Args& a) {
    arity(a, 0, 0, "items");
    ValueList l;
    for (const auto& [k, v] : d->items) l.push_back(Value::of_list({key_value(k), v}, true));
    return view(std::move(l));
  });
}

Value Interp::dict_keys(DictCall& c) {
  const Value& obj = c.obj;
  auto d = obj.dict;
  return make_fn("dict.keys", [d](Interp&, Args& a) {
    arity(a, 0, 0, "keys");
    ValueList l;
    for (const auto& it : d->items) l.push_back(key_value(it.first));
    return view(std::move(l));
  });
}

Value Interp::dict_values(DictCall& c) {
  const Value& obj = c.obj;
  auto d = obj.dict;
  return make_fn("dict.values", [d](Interp&, Args& a) {
    arity(a, 0, 0, "values");
    ValueList l;
    for (const auto& it : d->items) l.push_back(it.second);
    return view(std::move(l));
  });
}

Value Interp::dict_get(DictCall& c) {
  const Value& obj = c.obj;
  auto d = obj.dict;
  return make_fn("dict.get", [d](Interp&, Args& a) {
    arity(a, 1, 2, "get");
    if (const Value* v = d->find(dict_key(a.pos[0]))) return *v;
    return a.pos.size() > 1 ? a.pos[1] : Value::none();
  });
}

Value Interp::dict_method(const Value& obj, const std::string& name) {
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

std::function<Value(Interp&, Args&)> Interp::prefix_test(const std::string& s, bool start) {
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

Value Interp::str_startswith(StrCall& c) {
  const std::string& s = c.s;
  return make_fn("str.startswith", prefix_test(s, true));
}

Value Interp::str_endswith(StrCall& c) {
  const std::string& s = c.s;
  return make_fn("str.endswith", prefix_test(s, false));
}

Value Interp::str_strip(StrCall& c) {
  const std::string& name = c.name;
  const std::string& s = c.s;
  return make_fn("str." + name, [s, name](Interp&, Args& a) {
    arity(a, 0, 1, name);
    const bool has = !a.pos.empty() && a.pos[0].kind != Value::None;
    const std::string* chars = has ? &str_arg(a.pos[0], name) : nullptr;
    return Value::str(py_strip(s, name != "rstrip", name != "lstrip", chars));
  });
}

Value Interp::str_split(StrCall& c) {
  const std::string& name = c.name;
  const std::string& s = c.s;
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

Value Interp::str_upper(StrCall& c) {
  const std::string& name = c.name;
  const std::string& s = c.s;
  const int mode = name == "lower" ? 0 : name == "upper" ? 1 : name == "title" ? 2 : 3;
  return make_fn("str." + name, [s, name, mode](Interp&, Args& a) {
    arity(a, 0, 0, name);
    return Value::str(py_case(mode == 3 ? py_case(s, 0, "capitalize") : s, mode, name.c_str()));
  });
}

Value Interp::str_replace(StrCall& c) {
  const std::string& s = c.s;
  return make_fn("str.replace", [s](Interp&, Args& a) {
    arity(a, 2, 3, "replace");
    const std::string& from = str_arg(a.pos[0], "replace");
    const std::string& to = str_arg(a.pos[1], "replace");
    int64_t count = a.pos.size() > 2 ? as_int(a.pos[2], "replace") : -1;
    return Value::str(replace_all(s, from, to, count));
  });
}

Value Interp::str_find(StrCall& c) {
  const std::string& name = c.name;
  const std::string& s = c.s;
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

Value Interp::str_join(StrCall& c) {
  const std::string& s = c.s;
  return make_fn("str.join", [s](Interp&, Args& a) {
    arity(a, 1, 1, "join");
    std::string out;
    bool first = true;
    for (const Value& x : iterate(a.pos[0])) { bounded(out += (first ? "" : s) + str_arg(x, "join")); first = false; }
    return Value::str(out);
  });
}

Value Interp::str_isdigit(StrCall& c) {
  const std::string& name = c.name;
  const std::string& s = c.s;
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

Value Interp::str_splitlines(StrCall& c) {
  const std::string& s = c.s;
  return make_fn("str.splitlines", [s](Interp&, Args& a) {
    arity(a, 0, 0, "splitlines");
    ValueList l;
    for (auto& x : split_lines(s)) l.push_back(Value::str(x));
    return Value::of_list(std::move(l));
  });
}

Value Interp::str_format(StrCall& c) {
  const std::string& s = c.s;
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

Value Interp::str_method(const Value& obj, const std::string& name) {
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

bool Interp::py_number(const std::string& s, bool real, std::string& out) {
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

std::string Interp::replace_all(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
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

}  // namespace ffn::jinja
