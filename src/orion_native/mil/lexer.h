// MIL tokenizer: turns UTF-8 text into tokens on demand, with 1-based line:column positions
// (columns count code points, so they match Python string indices + 1).
// Validates UTF-8 everywhere (strings and comments included) and reports the offending byte.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace orion::mil {

enum class Tok : unsigned char {
  End, Ident, Number, String,
  LParen, RParen, LBrace, RBrace, LBracket, RBracket, Lt, Gt,
  Comma, Eq, Semi, Minus, Plus, Arrow,
};

struct Token {
  Tok kind = Tok::End;
  std::string_view text;  // raw source text (String: including the quotes, escapes undecoded)
  int line = 1, column = 1;
};

class Lexer {
 public:
  explicit Lexer(std::string_view src);
  Token next();  // throws orion::Error(MILSyntax) on a malformed token; End forever at the end

 private:
  void skip_space_and_comments();
  void advance_byte();          // one ASCII byte
  size_t utf8_seq(size_t at);   // length of a valid UTF-8 sequence at `at`, 0 if invalid
  void advance_utf8_or_throw(const char* where);
  [[noreturn]] void fail_here(const std::string& msg);

  std::string_view src_;
  size_t pos_ = 0;
  int line_ = 1, col_ = 1;
};

// Decodes a String token's raw text (quotes included, escapes already validated by the lexer).
std::string unescape_string(std::string_view raw);
// Quotes and escapes a string for printing (inverse of unescape_string).
std::string quote_string(std::string_view s);
// Short, printable, valid-UTF-8 description of a token for error messages: 'x', "str", end of input.
std::string describe(const Token& t);
const char* tok_spelling(Tok k);  // "'('", "identifier", ...

}  // namespace orion::mil
