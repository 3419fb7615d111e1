#include "mil/lexer.h"

#include <climits>
#include <cstdio>

#include "common/error.h"

namespace orion::mil {

namespace {

bool is_ident_start(unsigned char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_ident_char(unsigned char c) { return is_ident_start(c) || (c >= '0' && c <= '9'); }
bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

std::string hex_byte(unsigned char c) {
  char b[8];
  snprintf(b, sizeof b, "0x%02x", c);
  return b;
}

// Appends at most `max` bytes of s, cut on a code point boundary, control characters escaped,
// so error messages stay valid UTF-8 (Python builds the exception text from them).
void append_printable(std::string& out, std::string_view s, size_t max) {
  bool cut = s.size() > max;
  if (cut) {
    size_t n = max;
    while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80) --n;
    s = s.substr(0, n);
  }
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f) out += "\\x" + hex_byte(c).substr(2);
    else out += (char)c;
  }
  if (cut) out += "...";
}

}  // namespace

Lexer::Lexer(std::string_view src) : src_(src) {
  // Keeps every line/column inside an int.
  if (src.size() > (size_t)INT_MAX / 2) throw_syntax(1, 1, "input too large (over 1 GiB of MIL text)");
}

void Lexer::fail_here(const std::string& msg) { throw_syntax(line_, col_, msg); }

void Lexer::advance_byte() {
  if (src_[pos_] == '\n') {
    ++line_;
    col_ = 1;
  } else {
    ++col_;
  }
  ++pos_;
}

size_t Lexer::utf8_seq(size_t at) {
  const unsigned char* p = (const unsigned char*)src_.data() + at;
  size_t avail = src_.size() - at;
  unsigned char c = p[0];
  if (c < 0x80) return 1;
  size_t n;
  uint32_t cp;
  if (c >= 0xC2 && c <= 0xDF) { n = 2; cp = c & 0x1F; }
  else if (c >= 0xE0 && c <= 0xEF) { n = 3; cp = c & 0x0F; }
  else if (c >= 0xF0 && c <= 0xF4) { n = 4; cp = c & 0x07; }
  else return 0;
  if (avail < n) return 0;
  for (size_t i = 1; i < n; ++i) {
    if ((p[i] & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (p[i] & 0x3F);
  }
  // Overlong forms, UTF-16 surrogates and code points past U+10FFFF are not UTF-8.
  if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

void Lexer::advance_utf8_or_throw(const char* where) {
  unsigned char c = (unsigned char)src_[pos_];
  if (c < 0x80) { advance_byte(); return; }
  size_t n = utf8_seq(pos_);
  if (n == 0) fail_here("invalid UTF-8 byte " + hex_byte(c) + where);
  pos_ += n;
  ++col_;
}

void Lexer::skip_space_and_comments() {
  while (pos_ < src_.size()) {
    char c = src_[pos_];
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v') {
      advance_byte();
    } else if (c == '/' && pos_ + 1 < src_.size() && src_[pos_ + 1] == '/') {
      while (pos_ < src_.size() && src_[pos_] != '\n') advance_utf8_or_throw(" in comment");
    } else {
      break;
    }
  }
}

Token Lexer::next() {
  skip_space_and_comments();
  Token t;
  t.line = line_;
  t.column = col_;
  size_t start = pos_;
  if (pos_ >= src_.size()) {
    t.kind = Tok::End;
    t.text = src_.substr(src_.size());
    return t;
  }
  unsigned char c = (unsigned char)src_[pos_];
  auto single = [&](Tok k) {
    advance_byte();
    t.kind = k;
    t.text = src_.substr(start, 1);
    return t;
  };
  switch (c) {
    case '(': return single(Tok::LParen);
    case ')': return single(Tok::RParen);
    case '{': return single(Tok::LBrace);
    case '}': return single(Tok::RBrace);
    case '[': return single(Tok::LBracket);
    case ']': return single(Tok::RBracket);
    case '<': return single(Tok::Lt);
    case '>': return single(Tok::Gt);
    case ',': return single(Tok::Comma);
    case '=': return single(Tok::Eq);
    case ';': return single(Tok::Semi);
    case '+': return single(Tok::Plus);
    case '-':
      if (pos_ + 1 < src_.size() && src_[pos_ + 1] == '>') {
        advance_byte();
        advance_byte();
        t.kind = Tok::Arrow;
        t.text = src_.substr(start, 2);
        return t;
      }
      return single(Tok::Minus);
    default: break;
  }
  if (is_ident_start(c)) {
    size_t end = pos_ + 1;
    while (end < src_.size() && is_ident_char((unsigned char)src_[end])) ++end;
    col_ += (int)(end - pos_);  // no newlines inside: advance in one step
    pos_ = end;
    t.kind = Tok::Ident;
    t.text = src_.substr(start, pos_ - start);
    return t;
  }
  if (is_digit(c) || (c == '.' && pos_ + 1 < src_.size() && is_digit((unsigned char)src_[pos_ + 1]))) {
    // Greedy: digits, letters, '.', and a sign right after an exponent letter (e for decimal,
    // p for hex). The numbers module then validates the exact form, so "1.2.3" is one bad token.
    bool hex = c == '0' && pos_ + 1 < src_.size() && (src_[pos_ + 1] == 'x' || src_[pos_ + 1] == 'X');
    while (pos_ < src_.size()) {
      unsigned char d = (unsigned char)src_[pos_];
      if (is_ident_char(d) || d == '.') {
        advance_byte();
      } else if ((d == '+' || d == '-') && pos_ > start) {
        char prev = src_[pos_ - 1];
        bool exp = hex ? (prev == 'p' || prev == 'P') : (prev == 'e' || prev == 'E');
        if (!exp) break;
        advance_byte();
      } else {
        break;
      }
    }
    t.kind = Tok::Number;
    t.text = src_.substr(start, pos_ - start);
    return t;
  }
  if (c == '"') {
    int sline = line_, scol = col_;
    advance_byte();
    for (;;) {
      if (pos_ >= src_.size()) throw_syntax(sline, scol, "unterminated string literal (missing closing '\"')");
      unsigned char d = (unsigned char)src_[pos_];
      if (d == '"') {
        advance_byte();
        break;
      }
      if (d == '\n' || d == '\r')
        throw_syntax(sline, scol, "unterminated string literal (missing closing '\"' before end of line)");
      if (d == '\\') {
        if (pos_ + 1 >= src_.size()) throw_syntax(sline, scol, "unterminated string literal (missing closing '\"')");
        char e = src_[pos_ + 1];
        if (e == '\n' || e == '\r')
          throw_syntax(sline, scol, "unterminated string literal (missing closing '\"' before end of line)");
        if (e != '"' && e != '\\' && e != 'n' && e != 't' && e != 'r') {
          std::string shown;
          size_t n = utf8_seq(pos_ + 1);
          append_printable(shown, src_.substr(pos_ + 1, n ? n : 0), 8);
          if (n == 0) shown = hex_byte((unsigned char)e);
          fail_here("invalid escape '\\" + shown + "' in string literal (allowed: \\\" \\\\ \\n \\t \\r)");
        }
        advance_byte();
        advance_byte();
        continue;
      }
      if (d >= 0x20 && d < 0x7f) {  // plain ASCII, the common case
        ++pos_;
        ++col_;
        continue;
      }
      if ((d < 0x20 && d != '\t') || d == 0x7f) fail_here("control character " + hex_byte(d) + " in string literal");
      advance_utf8_or_throw(" in string literal");
    }
    t.kind = Tok::String;
    t.text = src_.substr(start, pos_ - start);
    return t;
  }
  if (c >= 0x80) {
    size_t n = utf8_seq(pos_);
    if (n == 0) fail_here("invalid UTF-8 byte " + hex_byte(c));
    std::string shown;
    append_printable(shown, src_.substr(pos_, n), 8);
    fail_here("unexpected character '" + shown + "'");
  }
  if (c < 0x20 || c == 0x7f) fail_here("unexpected control character " + hex_byte(c));
  fail_here(std::string("unexpected character '") + (char)c + "'");
}

std::string unescape_string(std::string_view raw) {
  std::string out;
  if (raw.size() < 2) return out;
  raw = raw.substr(1, raw.size() - 2);
  out.reserve(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) {
    char c = raw[i];
    if (c == '\\' && i + 1 < raw.size()) {
      char e = raw[++i];
      out += e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
    } else {
      out += c;
    }
  }
  return out;
}

std::string quote_string(std::string_view s) {
  std::string out = "\"";
  out.reserve(s.size() + 2);
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default: out += c;
    }
  }
  return out + "\"";
}

const char* tok_spelling(Tok k) {
  switch (k) {
    case Tok::End: return "end of input";
    case Tok::Ident: return "identifier";
    case Tok::Number: return "number";
    case Tok::String: return "string";
    case Tok::LParen: return "'('";
    case Tok::RParen: return "')'";
    case Tok::LBrace: return "'{'";
    case Tok::RBrace: return "'}'";
    case Tok::LBracket: return "'['";
    case Tok::RBracket: return "']'";
    case Tok::Lt: return "'<'";
    case Tok::Gt: return "'>'";
    case Tok::Comma: return "','";
    case Tok::Eq: return "'='";
    case Tok::Semi: return "';'";
    case Tok::Minus: return "'-'";
    case Tok::Plus: return "'+'";
    case Tok::Arrow: return "'->'";
  }
  return "?";
}

std::string describe(const Token& t) {
  if (t.kind == Tok::End) return "end of input";
  std::string out;
  if (t.kind == Tok::String) {
    out = "string ";
    append_printable(out, t.text, 40);
    return out;
  }
  out = "'";
  append_printable(out, t.text, 40);
  return out + "'";
}

}  // namespace orion::mil
