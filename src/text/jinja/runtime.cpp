// The interpreter (src/text/jinja/runtime.hpp): lookups, operators, expressions, statements.
#include "text/jinja/runtime.hpp"

#include <utf8proc.h>

namespace ffn::jinja {

void Interp::step() {
  if (++steps > kMaxSteps) fail("the template ran past a million steps (a loop that does not end?)");
}

void Interp::emit(const std::string& s) {
  if (out->size() + s.size() > kMaxOutput) fail("the template wrote past 16 MiB");
  *out += s;
}

Value Interp::lookup(const std::string& name) const {
  for (size_t k = frames.size(); k-- > 0;) {
    if (const Value* v = frames[k].find(name)) return *v;
  }
  return Value::undefined(name);
}

Value Interp::generator(ValueList l) {
  Value v = Value::of_list(std::move(l));
  v.lazy = Value::Generator;
  return v;
}

Value Interp::view(ValueList l) {
  Value v = Value::of_list(std::move(l));
  v.lazy = Value::View;
  return v;
}

Value Interp::make_fn(std::string name, std::function<Value(Interp&, Args&)> f) {
  Value v;
  v.kind = Value::Callable;
  v.fn = std::make_shared<Func>(Func{std::move(name), std::move(f)});
  return v;
}

Value Interp::getattr(const Value& obj, const std::string& name) {
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

Value Interp::getitem(const Value& obj, const Value& key) {
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

void Interp::slice_bounds(int64_t n, const Value& a, const Value& b, const Value& c, int64_t& start, int64_t& stop, int64_t& stepv) {
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

Value Interp::slice(const Value& obj, const Value& a, const Value& b, const Value& c) {
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

void Interp::arity(const Args& a, size_t lo, size_t hi, const std::string& what) {
  if (!a.kw.empty()) fail(what + "() takes no keyword arguments");
  if (a.pos.size() < lo || a.pos.size() > hi) fail(what + "() takes " + std::to_string(lo) + (hi > lo ? " to " + std::to_string(hi) : "") + " arguments, got " + std::to_string(a.pos.size()));
}

Value Interp::binary(const std::string& op, const Value& a, const Value& b) {
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

bool Interp::contains(const Value& hay, const Value& needle) {
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

bool Interp::compare(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return equal(a, b);
  if (op == "!=") return !equal(a, b);
  if (op == "<") return less(a, b);
  if (op == ">") return less(b, a);
  if (op == "<=") return less(a, b) || equal(a, b);
  if (op == ">=") return less(b, a) || equal(a, b);
  if (op == "in") return contains(b, a);
  return !contains(b, a);
}

Args Interp::eval_args(const Expr& e, size_t first) {
  Args a;
  const size_t nkw = e.kwnames.size();
  const size_t npos = e.args.size() - first - nkw;
  for (size_t k = 0; k < npos; ++k) a.pos.push_back(eval(*e.args[first + k]));
  for (size_t k = 0; k < nkw; ++k) a.kw.emplace_back(e.kwnames[k], eval(*e.args[first + npos + k]));
  return a;
}

Value Interp::eval(const Expr& e) {
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

std::string Interp::describe_obj(const Expr& attr) {
  return attr.args[0]->kind == Expr::Name ? "'" + attr.args[0]->name + "'" : "a value";
}

void Interp::assign(const std::vector<std::string>& targets, const Value& v) {
  if (targets.size() == 1) { frames.back()[targets[0]] = v; return; }
  ValueList items = iterate(v);
  if (items.size() != targets.size())
    fail("cannot unpack " + std::to_string(items.size()) + " values into " + std::to_string(targets.size()) + " names");
  for (size_t k = 0; k < targets.size(); ++k) frames.back()[targets[k]] = items[k];
}

void Interp::run(const Body& body) {
  for (const auto& s : body) exec(*s);
}

void Interp::exec(const Stmt& s) {
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

Value Interp::call_macro(const Stmt& def, const std::vector<Frame>& closure, Args& a) {
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

void Interp::exec_for(const Stmt& s) {
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

}  // namespace ffn::jinja
