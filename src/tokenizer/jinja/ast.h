#pragma once
// The Jinja subset's syntax tree: expressions and statements, each with its source line for errors.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace nibble::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,    // value
    kName,       // name
    kList,       // items
    kTuple,      // items
    kDict,       // items as key, value pairs (even, odd)
    kAttribute,  // object.name  (items[0] = object)
    kIndex,      // object[items[1]]
    kSlice,      // object[items[1]:items[2]:items[3]] (null pointers for omitted parts)
    kCall,       // items[0](items[1..]), keyword names in `keywords` aligned with the tail of items
    kFilter,     // items[0] | name(items[1..])
    kTest,       // items[0] is [not] name(items[1..]); `negated`
    kUnary,      // op items[0]: "not", "-", "+"
    kBinary,     // items[0] op items[1]
    kConditional,  // items[1] if items[0] else items[2] (items[2] may be null)
  };
  Kind kind;
  int line = 0;
  Value value;
  std::string name;  // name / attribute / filter / test / operator
  bool negated = false;
  std::vector<ExprPtr> items;
  std::vector<std::string> keywords;  // kCall / kFilter / kTest: names of trailing keyword arguments
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  enum class Kind { kText, kOutput, kIf, kFor, kSet, kSetBlock, kMacro, kBreak, kContinue };
  Kind kind;
  int line = 0;
  std::string text;                  // kText
  ExprPtr expr;                      // kOutput / kFor iterable / kSet value
  // kIf: conditions[i] guards bodies[i]; an extra trailing body is the else branch.
  std::vector<ExprPtr> conditions;
  std::vector<Body> bodies;
  // kFor: targets (one, or several to unpack), optional filter in conditions[0], body in bodies[0],
  // else in bodies[1]. kSet: targets (several to unpack a sequence), or targets[0] and `attribute` for
  // ns.attr. kSetBlock: targets[0] (and `attribute`). kMacro: name in
  // targets[0], parameter names in targets[1..] with defaults (null = required) in conditions.
  std::vector<std::string> targets;
  std::string attribute;
};

}  // namespace nibble::jinja
