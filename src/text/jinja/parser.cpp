// The parser (src/text/jinja/parser.hpp).
#include "text/jinja/parser.hpp"

namespace ffn::jinja {

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
  // Items separated by commas up to `close` (a trailing comma allowed), each
  // read by item(); `close` consumed.
  template <class F>
  void comma_list(const char* close, F&& item) {
    for (bool first = true; !is_op(close); first = false) {
      if (!first) expect_op(",");
      if (is_op(close)) break;
      item();
    }
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
          comma_list("]", [&] { l->args.push_back(parse_expression(true)); });
          return l;
        }
        if (t.text == "{") {
          next();
          auto d = make(Expr::DictLit, line);
          comma_list("}", [&] {
            d->args.push_back(parse_expression(true));
            expect_op(":");
            d->args.push_back(parse_expression(true));
          });
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

Body parse_template(std::vector<Token> tokens) { return Parser(std::move(tokens)).parse_template(); }

}  // namespace ffn::jinja
