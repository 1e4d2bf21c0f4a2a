// The tests ("is divisibleby", "is defined", ...; src/text/jinja/runtime.hpp), one function each, found by name.
#include "text/jinja/runtime.hpp"

namespace ffn::jinja {

bool Interp::apply_test(const Expr& e) {
  Value v = eval(*e.args[0]);
  Args a = eval_args(e, 1);
  line = e.line;
  return test(e.name, v, a);
}

bool Interp::test_defined(TestCall& c) {
  const Value& v = c.v;
 c.none(); return v.kind != Value::Undefined;
}

bool Interp::test_undefined(TestCall& c) {
  const Value& v = c.v;
 c.none(); return v.kind == Value::Undefined;
}

bool Interp::test_none(TestCall& c) {
  const Value& v = c.v;
 c.none(); return v.kind == Value::None;
}

bool Interp::test_string(TestCall& c) {
  const Value& v = c.v;
 c.none(); return v.kind == Value::Str;
}

bool Interp::test_number(TestCall& c) {
  const Value& v = c.v;
 c.none(); return v.is_number();
}

bool Interp::test_integer(TestCall& c) {
  const Value& v = c.v;
 c.none(); return v.kind == Value::Int;
}

bool Interp::test_float(TestCall& c) {
  const Value& v = c.v;
 c.none(); return v.kind == Value::Float;
}

bool Interp::test_boolean(TestCall& c) {
  const Value& v = c.v;
 c.none(); return v.kind == Value::Bool;
}

bool Interp::test_true(TestCall& c) {
  const Value& v = c.v;
 c.none(); return v.kind == Value::Bool && v.b;
}

bool Interp::test_false(TestCall& c) {
  const Value& v = c.v;
 c.none(); return v.kind == Value::Bool && !v.b;
}

bool Interp::test_mapping(TestCall& c) {
  const Value& v = c.v;
 c.none(); return v.kind == Value::Dict && !v.ns;
}

bool Interp::test_iterable(TestCall& c) {
  const Value& v = c.v;
  c.none();
  if (v.lazy == Value::Loop) refuse_lazy(v, "the test iterable on");
  return v.kind == Value::Str || v.kind == Value::List || (v.kind == Value::Dict && !v.ns) || v.kind == Value::Undefined;
}

bool Interp::test_sequence(TestCall& c) {
  const Value& v = c.v;
 c.none(); return v.kind == Value::Str || v.kind == Value::List || (v.kind == Value::Dict && !v.ns) || v.kind == Value::Undefined;
}

bool Interp::test_callable(TestCall& c) {
  const Value& v = c.v;
 c.none(); return v.kind == Value::Callable || v.kind == Value::Undefined;
}

bool Interp::test_lower(TestCall& c) {
  const Value& v = c.v;
  const std::string& name = c.name;
  const std::string& what = c.what;
  c.none();
  if (v.kind != Value::Str) fail(what + ": expected a string");
  Args no;
  return truthy(str_method(v, name == "lower" ? "islower" : "isupper").fn->call(*this, no));
}

bool Interp::test_odd(TestCall& c) {
  const Value& v = c.v;
  const std::string& name = c.name;
  const std::string& what = c.what;
 c.none(); const int64_t x = as_int(v, what.c_str()); return (((x % 2) + 2) % 2 == 1) == (name == "odd");
}

bool Interp::test_divisibleby(TestCall& c) {
  const Value& v = c.v;
  const std::string& what = c.what;
  const int64_t d = as_int(c.one(), what.c_str());
  if (d == 0) fail("integer division or modulo by zero");
  return d == -1 || as_int(v, what.c_str()) % d == 0;  // (INT64_MIN % -1 traps)
}

bool Interp::test_equalto(TestCall& c) {
  const Value& v = c.v;
  return compare("==", v, c.one());
}

bool Interp::test_ne(TestCall& c) {
  const Value& v = c.v;
  return compare("!=", v, c.one());
}

bool Interp::test_lt(TestCall& c) {
  const Value& v = c.v;
  return compare("<", v, c.one());
}

bool Interp::test_le(TestCall& c) {
  const Value& v = c.v;
  return compare("<=", v, c.one());
}

bool Interp::test_gt(TestCall& c) {
  const Value& v = c.v;
  return compare(">", v, c.one());
}

bool Interp::test_ge(TestCall& c) {
  const Value& v = c.v;
  return compare(">=", v, c.one());
}

bool Interp::test_in(TestCall& c) {
  const Value& v = c.v;
  return contains(c.one(), v);
}

bool Interp::test_sameas(TestCall& c) {
  const Value& v = c.v;
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

bool Interp::test_escaped(TestCall& c) {
  const std::string& name = c.name;
  fail("unsupported construct: the test " + name);
}

bool Interp::test(const std::string& name, const Value& v, Args& a) {
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

}  // namespace ffn::jinja
