// The tree of a template (statements and expressions) and the parser that
// makes it from the lexer's tokens, in jinja2's precedence.
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

#include "text/jinja/lexer.hpp"
#include "text/jinja/value.hpp"

namespace ffn::jinja {

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

// The tree of a whole template; SyntaxError at the first token out of place.
Body parse_template(std::vector<Token> tokens);

}  // namespace ffn::jinja
