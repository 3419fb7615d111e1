// Recursive-descent parser for MIL text. The grammar is flat: nothing nests
// deeper than a literal inside an attribute, so there is no unbounded recursion on any input.
// Syntax only: names, shapes and op signatures are checked later by the simulator; literals are
// checked here (element count, value type, integer/float range) because only the text knows them.
#include "mil/parser.h"

#include <cmath>
#include <string>

#include "common/error.h"
#include "mil/lexer.h"
#include "mil/numbers.h"

namespace orion::mil {

namespace {

SrcLoc loc_of(const Token& t) { return SrcLoc{t.line, t.column}; }

bool is_opset(std::string_view s) { return s == "ios16" || s == "ios17" || s == "ios18"; }

bool valid_version(std::string_view s) {  // digits '.' digits
  size_t dot = s.find('.');
  if (dot == std::string_view::npos || dot == 0 || dot + 1 == s.size()) return false;
  for (size_t i = 0; i < s.size(); ++i)
    if (i != dot && (s[i] < '0' || s[i] > '9')) return false;
  return true;
}

int64_t numel_saturated(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) {
    if (d == 0) return 0;
    n = n > INT64_MAX / d ? INT64_MAX : n * d;
  }
  return n;
}

bool lookup_dtype(std::string_view s, DType* out) {
  static const DType all[] = {DType::fp16, DType::fp32, DType::int8, DType::uint8, DType::int16, DType::uint16,
                              DType::int32, DType::uint32, DType::uint64, DType::bool_, DType::string,
                              DType::int4, DType::uint1, DType::uint2, DType::uint3, DType::uint4, DType::uint6};
  if (s.size() < 4 || s.size() > 6) return false;
  for (DType t : all)
    if (s == dtype_name(t)) {
      *out = t;
      return true;
    }
  return false;
}

// Type spelled as written (used for the buildInfo dict type, which is kept as text).
std::string spell_type(const Type& t) {
  if (t.scalar_form) return dtype_name(t.dtype);
  return std::string("tensor<") + dtype_name(t.dtype) + ", " + shape_str(t.shape) + ">";
}

class Parser {
 public:
  explicit Parser(std::string_view text) : lex_(text) {}

  Program program() {
    Program p;
    expect_word("program", "at the start of the text");
    expect(Tok::LParen, "after 'program'");
    const Token& v = peek();
    if (v.kind != Tok::Number || !valid_version(v.text)) fail_at(v, "program version such as 1.3 or 1.0");
    p.version = std::string(take().text);
    p.dialect = p.version == "1.0" ? Dialect::ios16 : Dialect::ios18;
    expect(Tok::RParen, "after the program version");
    if (at(Tok::LBracket)) buildinfo(p);
    expect(Tok::LBrace, "to open the program body");
    do {
      Function f = function();
      // two functions of one name: the compiler would take one of them silently
      if (const Function* first = p.find(f.name))
        error_at(f.loc, "a second function named '" + f.name + "' (the first is at line " +
                            std::to_string(first->loc.line) + "); function names must be unique");
      p.functions.push_back(std::move(f));
    } while (at_word("func"));
    if (!at(Tok::RBrace)) fail_at(peek(), "'func' or '}' to close the program body");
    take();
    if (!at(Tok::End)) fail_at(peek(), "end of input after the program's closing '}'");
    return p;
  }

 private:
  // ---- token stream with a small lookahead ring (the grammar needs at most 2 tokens) ----
  const Token& peek(int k = 0) {
    while (count_ <= k) {
      ring_[(head_ + count_) & 3] = lex_.next();
      ++count_;
    }
    return ring_[(head_ + k) & 3];
  }
  Token take() {
    peek();
    Token t = ring_[head_];
    head_ = (head_ + 1) & 3;
    --count_;
    return t;
  }
  bool at(Tok k, int ahead = 0) { return peek(ahead).kind == k; }
  bool at_word(std::string_view w, int ahead = 0) {
    const Token& t = peek(ahead);
    return t.kind == Tok::Ident && t.text == w;
  }
  [[noreturn]] void fail_at(const Token& t, const std::string& expected) {
    throw_syntax(t.line, t.column, "expected " + expected + ", found " + describe(t));
  }
  [[noreturn]] void error_at(const SrcLoc& l, const std::string& msg) { throw_syntax(l.line, l.column, msg); }
  // Context strings are const char* so the hot path builds no message text.
  Token expect(Tok k, const char* context) {
    if (!at(k)) fail_at(peek(), std::string(tok_spelling(k)) + " " + context);
    return take();
  }
  Token expect_word(const char* w, const char* context) {
    if (!at_word(w)) fail_at(peek(), std::string("'") + w + "' " + context);
    return take();
  }
  std::string ident(const char* what) {
    if (!at(Tok::Ident)) fail_at(peek(), what);
    return std::string(take().text);
  }
  // Comma-separated list closed by `close`; `item` parses one element.
  template <class F>
  void list(Tok close, const char* where, F item) {
    if (at(close)) {
      take();
      return;
    }
    for (;;) {
      item();
      if (at(Tok::Comma)) {
        take();
        continue;
      }
      if (!at(close)) fail_at(peek(), std::string("',' or ") + tok_spelling(close) + " " + where);
      take();
      return;
    }
  }

  // ---- header ----
  void buildinfo(Program& p) {
    take();  // '['
    expect_word("buildInfo", "in the program attributes");
    expect(Tok::Eq, "after 'buildInfo'");
    expect_word("dict", "(buildInfo type) after 'buildInfo ='");
    expect(Tok::Lt, "after 'dict'");
    Type k = type("dict key type");
    expect(Tok::Comma, "after the dict key type");
    Type v = type("dict value type");
    expect(Tok::Gt, "to close the dict type");
    p.buildinfo_type = "dict<" + spell_type(k) + ", " + spell_type(v) + ">";
    expect(Tok::LParen, "after the buildInfo dict type");
    expect(Tok::LBrace, "to open the buildInfo entries");
    list(Tok::RBrace, "in the buildInfo entries", [&] {
      expect(Tok::LBrace, "to open a buildInfo {key, value} pair");
      std::string key = unescape_string(expect(Tok::String, "(buildInfo key)").text);
      expect(Tok::Comma, "after the buildInfo key");
      std::string val = unescape_string(expect(Tok::String, "(buildInfo value)").text);
      expect(Tok::RBrace, "to close a buildInfo {key, value} pair");
      p.buildinfo.emplace_back(std::move(key), std::move(val));
    });
    expect(Tok::RParen, "after the buildInfo entries");
    expect(Tok::RBracket, "to close the program attributes");
  }

  // ---- types ----
  DType dtype(const char* what) {
    const Token& t = peek();
    DType d;
    if (t.kind != Tok::Ident || !lookup_dtype(t.text, &d))
      fail_at(t, std::string(what) + " (fp16, fp32, int8, uint8, int16, uint16, int32, uint32, uint64, bool, string)");
    take();
    return d;
  }

  Type type(const char* what) {
    Type ty;
    const Token& t = peek();
    if (t.kind == Tok::Ident && t.text == "tensor") {
      take();
      expect(Tok::Lt, "after 'tensor'");
      ty.dtype = dtype("tensor element type");
      expect(Tok::Comma, "after the tensor element type");
      expect(Tok::LBracket, "to open the tensor shape");
      list(Tok::RBracket, "in the tensor shape", [&] { ty.shape.push_back(dim()); });
      expect(Tok::Gt, "to close the tensor type");
      return ty;
    }
    DType d;
    if (t.kind != Tok::Ident || !lookup_dtype(t.text, &d))
      fail_at(t, std::string(what) + " (a dtype such as fp16 or tensor<dtype, [dims]>)");
    take();
    ty.dtype = d;
    ty.scalar_form = true;
    return ty;
  }

  int64_t dim() {
    const Token& t = peek();
    NumberText n;
    std::string why;
    if (t.kind != Tok::Number || !parse_number(t.text, &n, &why) || !n.is_int ||
        (t.text.size() > 1 && (t.text[1] == 'x' || t.text[1] == 'X')))
      fail_at(t, "dimension (a non-negative decimal integer)");
    if (n.int_overflow || n.magnitude > (uint64_t)INT32_MAX)
      error_at(loc_of(t), "dimension " + describe(t) + " too large (max 2147483647)");
    take();
    return (int64_t)n.magnitude;
  }

  // ---- functions and statements ----
  Function function() {
    Function f;
    const Token& ft = peek();
    if (!at_word("func")) fail_at(ft, "'func'");
    f.loc = loc_of(ft);
    take();
    f.name = ident("function name after 'func'");
    expect(Tok::Lt, "after the function name");
    const Token& o = peek();
    if (o.kind != Tok::Ident || !is_opset(o.text)) fail_at(o, "opset ios16, ios17 or ios18");
    f.opset = std::string(take().text);
    expect(Tok::Gt, "after the opset");
    expect(Tok::LParen, "to open the parameter list");
    list(Tok::RParen, "in the parameter list", [&] {
      Param prm;
      prm.loc = loc_of(peek());
      prm.type = type("parameter type");
      prm.name = ident("parameter name after its type");
      f.params.push_back(std::move(prm));
    });
    expect(Tok::LBrace, "to open the function body");
    while (!at(Tok::RBrace)) f.stmts.push_back(stmt());
    take();
    expect(Tok::Arrow, "after the function body");
    expect(Tok::LParen, "to open the return list");
    do {
      f.return_locs.push_back(loc_of(peek()));
      f.returns.push_back(ident("return value name"));
      if (!at(Tok::Comma)) break;
      take();
    } while (true);
    expect(Tok::RParen, "(or ',') in the return list");
    expect(Tok::Semi, "after the return list");
    return f;
  }

  Stmt stmt() {
    Stmt s;
    const Token& t = peek();
    if (t.kind != Tok::Ident) fail_at(t, "a statement (TYPE name = op(...)[...];) or '}'");
    s.loc = loc_of(t);
    s.type = type("statement type");
    s.out = ident("result name after the statement type");
    expect(Tok::Eq, "after the result name");
    s.op = ident("op name after '='");
    expect(Tok::LParen, "after the op name");
    list(Tok::RParen, "after argument", [&] { s.args.push_back(arg()); });
    if (at(Tok::LBracket)) {
      take();
      s.attrs.reserve(2);  // name + val is the common case
      list(Tok::RBracket, "in the attribute list", [&] {
        Attr a;
        a.loc = loc_of(peek());
        a.name = ident("attribute name");
        expect(Tok::Eq, "after the attribute name");
        a.value = literal(a.name.c_str());
        s.attrs.push_back(std::move(a));
      });
    }
    expect(Tok::Semi, "at the end of the statement");
    return s;
  }

  Arg arg() {
    Arg a;
    a.loc = loc_of(peek());
    a.name = ident("argument name");
    expect(Tok::Eq, "after the argument name");
    const Token& t = peek();
    if (t.kind == Tok::LParen) {
      take();
      a.kind = Arg::Kind::Tuple;
      list(Tok::RParen, "in the tuple", [&] { a.tuple.push_back(ident("value name in the tuple")); });
      if (a.tuple.empty()) fail_at(peek(), "at least one name in the tuple");
    } else if (t.kind == Tok::Ident && (at(Tok::LParen, 1) || (t.text == "tensor" && at(Tok::Lt, 1)))) {
      a.kind = Arg::Kind::Literal;
      a.literal = literal(nullptr);
    } else if (t.kind == Tok::Ident) {
      a.kind = Arg::Kind::Ref;
      a.ref = std::string(take().text);
    } else {
      fail_at(t, "argument value (a name, a literal or a (tuple))");
    }
    return a;
  }

  // ---- literals ----
  // `attr`: the attribute name the literal belongs to (for the error message), or null for an argument.
  Literal literal(const char* attr) {
    Literal lit;
    const Token& t = peek();
    lit.loc = loc_of(t);
    if (t.kind == Tok::Ident && t.text == "tensor") {
      lit.type = type("literal type");
      expect(Tok::LParen, "after the literal type");
      if (at_word("BLOBFILE")) {
        blobfile(lit);
      } else if (at(Tok::LBracket)) {
        lit.kind = Literal::Kind::Tensor;
        take();
        int64_t count = 0;
        list(Tok::RBracket, "in the tensor values", [&] {
          value(lit);
          ++count;
        });
        int64_t want = numel_saturated(lit.type.shape);
        if (count != want)
          error_at(lit.loc, spell_type(lit.type) + " literal has " + std::to_string(count) + " value" +
                                (count == 1 ? "" : "s") + ", expected " +
                                (want == INT64_MAX ? "more than 2^63" : std::to_string(want)));
      } else if (lit.type.shape.empty()) {
        value(lit);  // legacy rank-0 scalar: tensor<int32, []>(1)
      } else {
        fail_at(peek(), "'[' or BLOBFILE in the " + spell_type(lit.type) + " literal");
      }
      expect(Tok::RParen, "to close the literal");
      return lit;
    }
    DType d;
    if (t.kind != Tok::Ident || !lookup_dtype(t.text, &d) || !at(Tok::LParen, 1)) {
      std::string what = attr ? "literal value for attribute '" + std::string(attr) + "'" : "literal";
      fail_at(t, what + " (such as fp16(0.5), string(\"x\") or tensor<int32, [2]>([1, 2]))");
    }
    take();
    lit.type.dtype = d;
    lit.type.scalar_form = true;
    take();  // '('
    value(lit);
    expect(Tok::RParen, "to close the literal");
    return lit;
  }

  // BLOBFILE(path = string("..."), offset = uint64(N)); either dialect's scalar spelling.
  void blobfile(Literal& lit) {
    take();
    lit.kind = Literal::Kind::BlobFile;
    expect(Tok::LParen, "after BLOBFILE");
    expect_word("path", "as the first BLOBFILE argument");
    expect(Tok::Eq, "after 'path'");
    Literal path = scalar_literal(DType::string, "BLOBFILE path");
    expect(Tok::Comma, "after the BLOBFILE path");
    expect_word("offset", "as the second BLOBFILE argument");
    expect(Tok::Eq, "after 'offset'");
    Literal off = scalar_literal(DType::uint64, "BLOBFILE offset");
    expect(Tok::RParen, "to close BLOBFILE(...)");
    lit.blob_path = path.s.empty() ? std::string() : path.s[0];
    lit.blob_offset = off.i.empty() ? 0 : (uint64_t)off.i[0];
  }

  // A scalar literal of one required dtype, never a tensor (keeps BLOBFILE from nesting).
  Literal scalar_literal(DType want, const char* what) {
    Literal lit;
    const Token& t = peek();
    lit.loc = loc_of(t);
    if (t.kind == Tok::Ident && t.text == "tensor") {
      lit.type = type("literal type");
      if (!lit.type.shape.empty())
        error_at(lit.loc, std::string(what) + " must be a scalar, found " + spell_type(lit.type));
    } else {
      DType d;
      if (t.kind != Tok::Ident || !lookup_dtype(t.text, &d))
        fail_at(t, std::string(dtype_name(want)) + " literal for the " + what + " (" + dtype_name(want) + "(" +
                       (want == DType::string ? "\"...\"" : "64") + "))");
      take();
      lit.type.dtype = d;
      lit.type.scalar_form = true;
    }
    if (lit.type.dtype != want)
      error_at(lit.loc, std::string(what) + " must be a " + dtype_name(want) + " literal, found " +
                            dtype_name(lit.type.dtype));
    expect(Tok::LParen, "after the literal type");
    value(lit);
    expect(Tok::RParen, "to close the literal");
    return lit;
  }

  // One scalar value of lit.type.dtype, appended to the matching vector.
  void value(Literal& lit) {
    DType d = lit.type.dtype;
    const char* dn = dtype_name(d);
    const Token& t = peek();
    if (d == DType::string) {
      if (t.kind != Tok::String) fail_at(t, "quoted string value for a string literal");
      lit.s.push_back(unescape_string(take().text));
      return;
    }
    if (d == DType::bool_) {
      if (!(t.kind == Tok::Ident && (t.text == "true" || t.text == "false")))
        fail_at(t, "true or false for a bool literal");
      lit.i.push_back(take().text == "true" ? 1 : 0);
      return;
    }
    SrcLoc start = loc_of(t);
    bool neg = false;
    if (t.kind == Tok::Minus || t.kind == Tok::Plus) {
      neg = t.kind == Tok::Minus;
      take();
    }
    const Token& n = peek();
    bool is_float = dtype_is_float(d);
    if (is_float && n.kind == Tok::Ident && (n.text == "inf" || n.text == "nan")) {
      double v = n.text == "inf" ? INFINITY : NAN;
      lit.f.push_back(neg ? -v : v);
      take();
      return;
    }
    if (n.kind != Tok::Number)
      fail_at(n, std::string(is_float ? "number, inf or nan" : "integer") + " for a " + dn + " literal");
    NumberText num;
    std::string why;
    if (!parse_number(n.text, &num, &why)) error_at(loc_of(n), "malformed number " + describe(n) + ": " + why);
    auto shown = [&] {
      return (neg ? "-" : "") + std::string(n.text.substr(0, 40)) + (n.text.size() > 40 ? "..." : "");
    };
    if (is_float) {
      double v = neg ? -num.value : num.value;
      if (num.float_overflow || std::isinf(round_to_dtype(v, d)))
        error_at(start, "value " + shown() + " out of range for " + dn + " (max " +
                            (d == DType::fp16 ? "65504" : "3.4028235e+38") + ")");
      lit.f.push_back(v);
    } else {
      if (!num.is_int)
        error_at(loc_of(n), "expected an integer for a " + std::string(dn) + " literal, found " + describe(n));
      int64_t v = 0;
      if (num.int_overflow || !int_in_range(neg, num.magnitude, d, &v))
        error_at(start, "value " + shown() + " out of range for " + dn + " " + int_range_str(d));
      lit.i.push_back(v);
    }
    take();
  }

  Lexer lex_;
  Token ring_[4];
  int head_ = 0, count_ = 0;
};

}  // namespace

Program parse(std::string_view text) { return Parser(text).program(); }

}  // namespace orion::mil
