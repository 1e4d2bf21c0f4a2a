// The filters (src/text/jinja/runtime.hpp), one function each, found by name; the tests are in tests.cpp.
#include "text/jinja/runtime.hpp"

#include <utf8proc.h>

namespace ffn::jinja {

Interp::Bound Interp::bind(const std::string& what, Args& a, const std::vector<const char*>& params) {
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

Value Interp::attribute_path(const Value& item, const std::string& path) {
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

bool Interp::run_test(const std::string& name, const Value& v, const std::vector<Value>& args) {
  Args a;
  a.pos = args;
  return test(name, v, a);
}

Value Interp::filter_trim(FilterCall& c) {
  Value& v = c.v;
  Args& a = c.a;
  const std::string& what = c.what;
  Bound b = bind(what, a, {"chars"});
  const bool has = b.given[0] && b.v[0].kind != Value::None;
  const std::string chars = has ? str_arg(b.v[0], what) : "";
  return Value::str(py_strip(to_str(v), true, true, has ? &chars : nullptr));
}

Value Interp::filter_tojson(FilterCall& c) {
  Value& v = c.v;
  Args& a = c.a;
  const std::string& what = c.what;
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

Value Interp::filter_length(FilterCall& c) {
  Value& v = c.v;
  Args& a = c.a;
  const std::string& what = c.what;
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

Value Interp::filter_list(FilterCall& c) {
  Value& v = c.v;
  Args& a = c.a;
  const std::string& what = c.what;
 bind(what, a, {}); return Value::of_list(iterate(v));
}

Value Interp::filter_string(FilterCall& c) {
  Value& v = c.v;
  Args& a = c.a;
  const std::string& what = c.what;
 bind(what, a, {}); return v.kind == Value::Str ? v : Value::str(to_str(v));
}

Value Interp::filter_safe(FilterCall& c) {
  Value& v = c.v;
  Args& a = c.a;
  const std::string& what = c.what;
 bind(what, a, {}); return v.kind == Value::Str && v.markup ? v : markup_of(to_str(v));
}

Value Interp::filter_e(FilterCall& c) {
  Value& v = c.v;
  Args& a = c.a;
  const std::string& what = c.what;
 bind(what, a, {}); return v.kind == Value::Str && v.markup ? v : markup_of(html_escape(to_str(v)));
}

Value Interp::filter_forceescape(FilterCall& c) {
  Value& v = c.v;
  Args& a = c.a;
  const std::string& what = c.what;
 bind(what, a, {}); return markup_of(html_escape(to_str(v)));
}

Value Interp::filter_join(FilterCall& c) {
  Value& v = c.v;
  Args& a = c.a;
  const std::string& what = c.what;
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

Value Interp::filter_first(FilterCall& c) {
  Value& v = c.v;
  Args& a = c.a;
  const std::string& f = c.f;
  const std::string& what = c.what;
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

Value Interp::filter_reverse(FilterCall& c) {
  Value& v = c.v;
  Args& a = c.a;
  const std::string& what = c.what;
  bind(what, a, {});
  if (v.kind == Value::Str) { std::vector<char32_t> c = code_points(v.s); std::reverse(c.begin(), c.end()); return Value::str(from_code_points(c)); }
  if (v.lazy == Value::Generator) fail("'generator' object is not reversible");
  ValueList l = iterate(v);
  std::reverse(l.begin(), l.end());
  return generator(std::move(l));
}

Value Interp::filter_select(FilterCall& c) {
  Value& v = c.v;
  Args& a = c.a;
  const std::string& f = c.f;
  const std::string& what = c.what;
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

Value Interp::filter_map(FilterCall& c) {
  Value& v = c.v;
  Args& a = c.a;
  const std::string& what = c.what;
  const Expr& e = c.e;
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

Value Interp::filter_lower(FilterCall& c) {
  Value& v = c.v;
  Args& a = c.a;
  const std::string& f = c.f;
  const std::string& what = c.what;
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

Value Interp::filter_default(FilterCall& c) {
  Value& v = c.v;
  Args& a = c.a;
  const std::string& what = c.what;
  Bound b = bind(what, a, {"default_value", "boolean"});
  const Value dflt = b.given[0] ? b.v[0] : Value::str("");
  const bool boolean = b.given[1] && truthy(b.v[1]);
  if (v.kind == Value::Undefined || (boolean && !truthy(v))) return dflt;
  return v;
}

Value Interp::filter_replace(FilterCall& c) {
  Value& v = c.v;
  Args& a = c.a;
  const std::string& what = c.what;
  Bound b = bind(what, a, {"old", "new", "count"});
  if (!b.given[0] || !b.given[1]) fail(what + " needs old and new");
  const int64_t count = b.given[2] && b.v[2].kind != Value::None ? as_int(b.v[2], what.c_str()) : -1;
  return Value::str(replace_all(to_str(v), to_str(b.v[0]), to_str(b.v[1]), count));
}

Value Interp::filter_int(FilterCall& c) {
  Value& v = c.v;
  Args& a = c.a;
  const std::string& what = c.what;
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

Value Interp::filter_float(FilterCall& c) {
  Value& v = c.v;
  Args& a = c.a;
  const std::string& what = c.what;
  Bound b = bind(what, a, {"default"});
  const Value dflt = b.given[0] ? b.v[0] : Value::real(0.0);
  if (v.is_number()) return Value::real(v.number());
  std::string t;
  if (v.kind == Value::Str && py_number(v.s, true, t)) return Value::real(std::strtod(t.c_str(), nullptr));
  return dflt;
}

Value Interp::filter_abs(FilterCall& c) {
  Value& v = c.v;
  Args& a = c.a;
  const std::string& what = c.what;
  bind(what, a, {});
  if (v.kind == Value::Int || v.kind == Value::Bool) { const __int128 x = as_int(v, "abs"); return Value::integer(checked(x < 0 ? -x : x)); }
  if (v.kind == Value::Float) return Value::real(std::fabs(v.f));
  fail(std::string("bad operand type for abs(): '") + type_name(v) + "'");
}

Value Interp::filter_round(FilterCall& c) {
  Value& v = c.v;
  Args& a = c.a;
  const std::string& what = c.what;
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

Value Interp::filter_items(FilterCall& c) {
  Value& v = c.v;
  Args& a = c.a;
  const std::string& what = c.what;
  bind(what, a, {});
  if (v.kind == Value::Undefined) return Value::of_list({});
  if (v.kind != Value::Dict || v.ns || v.lazy != Value::Plain) fail(what + ": expected a mapping, got " + type_name(v));
  Args none;
  Value items = dict_method(v, "items").fn->call(*this, none);
  items.lazy = Value::Generator;
  return items;
}

Value Interp::filter_dictsort(FilterCall& c) {
  Value& v = c.v;
  Args& a = c.a;
  const std::string& what = c.what;
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

Value Interp::filter_sort(FilterCall& c) {
  Value& v = c.v;
  Args& a = c.a;
  const std::string& what = c.what;
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

Value Interp::filter_unique(FilterCall& c) {
  Value& v = c.v;
  Args& a = c.a;
  const std::string& what = c.what;
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

Value Interp::filter_sum(FilterCall& c) {
  Value& v = c.v;
  Args& a = c.a;
  const std::string& f = c.f;
  const std::string& what = c.what;
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

Value Interp::filter_indent(FilterCall& c) {
  Value& v = c.v;
  Args& a = c.a;
  const std::string& what = c.what;
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

Value Interp::filter_wordcount(FilterCall& c) {
  Value& v = c.v;
  Args& a = c.a;
  const std::string& what = c.what;
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

Value Interp::filter_center(FilterCall& c) {
  Value& v = c.v;
  Args& a = c.a;
  const std::string& what = c.what;
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

Value Interp::apply_filter(const Expr& e) {
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

Value Interp::attribute_path_soft(const Value& item, const std::string& path) {
  if (item.kind == Value::Undefined) return item;
  return attribute_path(item, path);
}

Value Interp::call_filter(const std::string& name, const Value& v, const std::vector<Value>& args,
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

}  // namespace ffn::jinja
