// The interpreter: runs a template's tree on its variables, as jinja2 3.1
// does in transformers' environment. Its filters and tests
// (src/text/jinja/filters.cpp) and str's and dict's methods
// (src/text/jinja/methods.cpp) are member functions found by name in tables.
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

#include "text/jinja/parser.hpp"
#include "text/jinja/value.hpp"

namespace ffn::jinja {

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
  void step();
  void emit(const std::string& s);
  Value lookup(const std::string& name) const;

  // ------------------------------------------------ attribute and item lookup
  static Value generator(ValueList l);
  static Value view(ValueList l);
  static Value make_fn(std::string name, std::function<Value(Interp&, Args&)> f);
  Value getattr(const Value& obj, const std::string& name);
  Value getitem(const Value& obj, const Value& key);
  static void slice_bounds(int64_t n, const Value& a, const Value& b, const Value& c, int64_t& start, int64_t& stop, int64_t& stepv);
  Value slice(const Value& obj, const Value& a, const Value& b, const Value& c);

  // ------------------------------------------------ methods
  static void arity(const Args& a, size_t lo, size_t hi, const std::string& what);
  static const std::string& str_arg(const Value& v, const std::string& what);

  // ---- dict's methods, one function each, dispatched by name (dict_method's table)
  struct DictCall {
    const Value& obj;
    const std::string& name;
  };
  Value dict_items(DictCall& c);
  Value dict_keys(DictCall& c);
  Value dict_values(DictCall& c);
  Value dict_get(DictCall& c);
  Value dict_method(const Value& obj, const std::string& name);

  // startswith and endswith on s.
  static std::function<Value(Interp&, Args&)> prefix_test(const std::string& s, bool start);

  // ---- str's methods, one function each, dispatched by name (str_method's table)
  struct StrCall {
    const Value& obj;
    const std::string& name;
    const std::string& s;  // the string
  };
  Value str_startswith(StrCall& c);
  Value str_endswith(StrCall& c);
  Value str_strip(StrCall& c);
  Value str_split(StrCall& c);
  Value str_upper(StrCall& c);
  Value str_replace(StrCall& c);
  Value str_find(StrCall& c);
  Value str_join(StrCall& c);
  Value str_isdigit(StrCall& c);
  Value str_splitlines(StrCall& c);
  Value str_format(StrCall& c);
  Value str_method(const Value& obj, const std::string& name);

  // Python's int(s) (real: float(s)) syntax: surrounding whitespace, a sign,
  // ASCII digits with single underscores between them (real: a point, an
  // exponent, inf, nan); `out` gets the text strtod / from_chars read.
  // Non-ASCII digits (int('１２') is 12) are refused, not misread.
  static bool py_number(const std::string& s, bool real, std::string& out);
  static std::string replace_all(const std::string& s, const std::string& from, const std::string& to, int64_t count);

  // ------------------------------------------------ operators
  Value binary(const std::string& op, const Value& a, const Value& b);
  bool contains(const Value& hay, const Value& needle);
  bool compare(const std::string& op, const Value& a, const Value& b);

  // ------------------------------------------------ expressions
  Args eval_args(const Expr& e, size_t first);
  Value eval(const Expr& e);
  static std::string describe_obj(const Expr& attr);

  // ------------------------------------------------ filters and tests
  struct Bound {  // arguments bound to a filter's parameters by position or name
    std::vector<Value> v;
    std::vector<bool> given;
  };
  static Bound bind(const std::string& what, Args& a, const std::vector<const char*>& params);
  Value attribute_path(const Value& item, const std::string& path);

  // select/reject/selectattr/rejectattr: a test by name with arguments.
  bool run_test(const std::string& name, const Value& v, const std::vector<Value>& args);

  // ---- the filters, one function each, dispatched by name (apply_filter's table)
  struct FilterCall {
    Value& v;  // the filtered value
    Args& a;   // the filter's arguments
    const std::string& f;     // its name
    const std::string& what;  // "the filter NAME", for messages
    const Expr& e;
  };
  Value filter_trim(FilterCall& c);
  Value filter_tojson(FilterCall& c);
  Value filter_length(FilterCall& c);
  Value filter_list(FilterCall& c);
  Value filter_string(FilterCall& c);

  // Markup (chat templates do not autoescape: printed as it is; + escapes a str added to it).
  Value filter_safe(FilterCall& c);
  Value filter_e(FilterCall& c);
  Value filter_forceescape(FilterCall& c);
  Value filter_join(FilterCall& c);
  Value filter_first(FilterCall& c);
  Value filter_reverse(FilterCall& c);
  Value filter_select(FilterCall& c);
  Value filter_map(FilterCall& c);
  Value filter_lower(FilterCall& c);
  Value filter_default(FilterCall& c);
  Value filter_replace(FilterCall& c);
  Value filter_int(FilterCall& c);
  Value filter_float(FilterCall& c);
  Value filter_abs(FilterCall& c);
  Value filter_round(FilterCall& c);
  Value filter_items(FilterCall& c);
  Value filter_dictsort(FilterCall& c);
  Value filter_sort(FilterCall& c);
  Value filter_unique(FilterCall& c);
  Value filter_sum(FilterCall& c);
  Value filter_indent(FilterCall& c);
  Value filter_wordcount(FilterCall& c);
  Value filter_center(FilterCall& c);
  Value apply_filter(const Expr& e);
  Value attribute_path_soft(const Value& item, const std::string& path);
  Value call_filter(const std::string& name, const Value& v, const std::vector<Value>& args,
                    const std::vector<std::pair<std::string, Value>>& kw, int at);
  bool apply_test(const Expr& e);

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
  bool test_defined(TestCall& c);
  bool test_undefined(TestCall& c);
  bool test_none(TestCall& c);
  bool test_string(TestCall& c);
  bool test_number(TestCall& c);
  bool test_integer(TestCall& c);
  bool test_float(TestCall& c);
  bool test_boolean(TestCall& c);
  bool test_true(TestCall& c);
  bool test_false(TestCall& c);
  bool test_mapping(TestCall& c);
  bool test_iterable(TestCall& c);
  bool test_sequence(TestCall& c);
  bool test_callable(TestCall& c);
  bool test_lower(TestCall& c);
  bool test_odd(TestCall& c);
  bool test_divisibleby(TestCall& c);
  bool test_equalto(TestCall& c);
  bool test_ne(TestCall& c);
  bool test_lt(TestCall& c);
  bool test_le(TestCall& c);
  bool test_gt(TestCall& c);
  bool test_ge(TestCall& c);
  bool test_in(TestCall& c);
  bool test_sameas(TestCall& c);
  bool test_escaped(TestCall& c);
  bool test(const std::string& name, const Value& v, Args& a);

  // ------------------------------------------------ statements
  void assign(const std::vector<std::string>& targets, const Value& v);
  void run(const Body& body);
  void exec(const Stmt& s);
  Value call_macro(const Stmt& def, const std::vector<Frame>& closure, Args& a);
  void exec_for(const Stmt& s);
};

}  // namespace ffn::jinja
