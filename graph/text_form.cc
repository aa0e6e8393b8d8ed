#include "graph/text_form.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <set>

#include "graph/error.h"

namespace tessera {
namespace {

// ---------------------------------------------------------------- printing

bool is_name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '/' || c == '-' || c == ':';
}

bool is_keyword(const std::string& s) {
  return s == "input" || s == "const" || s == "output" || s == "graph" || s == "_";
}

// A ':' may only sit inside a bare name, so that `x: f32[2]` still splits.
bool is_bare_name(const std::string& s) {
  if (s.empty() || is_keyword(s) || s.back() == ':') return false;
  for (char c : s)
    if (!is_name_char(c)) return false;
  return true;
}

std::string quote(const std::string& s) {
  static const char* kHex = "0123456789abcdef";
  std::string out = "\"";
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20 || c == 0x7f) {
          out += "\\x";
          out += kHex[c >> 4];
          out += kHex[c & 15];
        } else {
          out += ch;  // UTF-8 passes through unchanged
        }
    }
  }
  return out + "\"";
}

std::string name_str(const std::string& s) { return is_bare_name(s) ? s : quote(s); }

constexpr uint64_t kQuietNan = 0x7ff8000000000000ull;
constexpr uint64_t kSignBit = 0x8000000000000000ull;

uint64_t double_bits(double d) {
  uint64_t u;
  std::memcpy(&u, &d, 8);
  return u;
}

// Shortest text that reads back to the same bits, always recognisable as a
// float (so `1.0` stays a float attribute, not an int).
std::string float_str(double d) {
  if (std::isnan(d)) {
    uint64_t bits = double_bits(d);
    if (bits == kQuietNan) return "nan";
    if (bits == (kQuietNan | kSignBit)) return "-nan";
    char buf[32];
    std::snprintf(buf, sizeof buf, "nan:0x%016llx", static_cast<unsigned long long>(bits));
    return buf;
  }
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d);
  std::string s(buf, res.ptr);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

constexpr int64_t kMaxListElements = 64;

// Integer tensors print as a readable list when the list is exact (bools
// stored as other than 0/1 go to hex so that their bytes survive).
bool prints_as_list(const Tensor& t) {
  if (is_float(t.dtype()) || t.numel() > kMaxListElements) return false;
  if (t.dtype() == DType::kBool)
    for (int64_t i = 0; i < t.numel(); ++i)
      if (t.data()[i] > 1) return false;
  return true;
}

std::string tensor_data_str(const Tensor& t) {
  if (prints_as_list(t)) {
    std::string s = "[";
    for (int64_t i = 0; i < t.numel(); ++i) {
      if (i) s += ", ";
      s += std::to_string(t.get_int(i));
    }
    return s + "]";
  }
  static const char* kHex = "0123456789abcdef";
  std::string s;
  s.reserve(static_cast<size_t>(t.nbytes()) * 2 + 5);
  s += "hex\"";
  for (int64_t i = 0; i < t.nbytes(); ++i) {
    s += kHex[t.data()[i] >> 4];
    s += kHex[t.data()[i] & 15];
  }
  return s + "\"";
}

std::string attr_str(const AttrValue& v) {
  return std::visit(
      [](const auto& x) -> std::string {
        using X = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<X, int64_t>) {
          return std::to_string(x);
        } else if constexpr (std::is_same_v<X, double>) {
          return float_str(x);
        } else if constexpr (std::is_same_v<X, std::string>) {
          return quote(x);
        } else if constexpr (std::is_same_v<X, Tensor>) {
          return type_str(x.type()) + " " + tensor_data_str(x);
        } else {
          std::string s = "[";
          for (size_t i = 0; i < x.size(); ++i) {
            if (i) s += ", ";
            if constexpr (std::is_same_v<X, std::vector<int64_t>>) s += std::to_string(x[i]);
            else s += float_str(x[i]);
          }
          return s + "]";
        }
      },
      v);
}

}  // namespace

std::string print_graph(const Graph& g) {
  std::string out = "graph " + name_str(g.name) + " {\n";
  for (ValueId v : g.inputs()) out += "  input " + name_str(g.value(v).name) + ": " + type_str(g.type(v)) + "\n";
  for (ValueId v = 0; v < g.num_values(); ++v) {
    const Value& val = g.value(v);
    if (!val.is_constant()) continue;
    out += "  const " + name_str(val.name) + ": " + type_str(val.type) + " = " + tensor_data_str(*val.constant) + "\n";
  }
  for (NodeId n : g.topo_order()) {
    const Node& node = g.node(n);
    out += "  ";
    for (size_t i = 0; i < node.outputs.size(); ++i) {
      if (i) out += ", ";
      out += name_str(g.value(node.outputs[i]).name);
    }
    out += std::string(" = ") + op_name(node.kind) + "[" + name_str(node.name) + "](";
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      if (i) out += ", ";
      out += node.inputs[i] == kNoValue ? std::string("_") : name_str(g.value(node.inputs[i]).name);
    }
    out += ")";
    if (!node.attrs.map().empty()) {
      out += " {";
      bool first = true;
      for (const auto& [name, value] : node.attrs.map()) {
        if (!first) out += ", ";
        first = false;
        out += name + "=" + attr_str(value);
      }
      out += "}";
    }
    out += "\n";
  }
  out += "  output";
  for (size_t i = 0; i < g.outputs().size(); ++i)
    out += (i ? ", " : " ") + name_str(g.value(g.outputs()[i]).name);
  return out + "\n}\n";
}

// ----------------------------------------------------------------- parsing

namespace {

class Parser {
 public:
  Parser(const std::string& text, const std::string& source) : s_(text), source_(source) {}

  Graph parse() {
    Graph g;
    expect_keyword("graph");
    g.name = read_name("the graph name").text;
    expect('{', "after the graph name");
    while (true) {
      skip_ws();
      if (accept('}')) break;
      if (at_end()) fail("expected a statement or '}', got end of input", pos_);
      statement(g);
    }
    skip_ws();
    if (!at_end()) fail("expected end of input after '}', got " + describe(pos_), pos_);
    return g;
  }

 private:
  struct Name {
    std::string text;
    bool quoted = false;
    size_t at = 0;
  };

  void statement(Graph& g) {
    size_t at = pos_;
    Name first = read_name("a statement");
    if (!first.quoted && first.text == "input") {
      Name name = read_name("an input name");
      expect(':', "after the input name");
      TensorType type = read_type();
      guarded(at, [&] { g.add_input(name.text, type); });
    } else if (!first.quoted && first.text == "const") {
      Name name = read_name("a constant name");
      expect(':', "after the constant name");
      TensorType type = read_type();
      expect('=', "after the constant type");
      Tensor data = read_tensor_data(type, "constant '" + name.text + "'");
      guarded(at, [&] { g.add_constant(name.text, std::move(data)); });
    } else if (!first.quoted && first.text == "output") {
      std::vector<ValueId> outs;
      skip_ws();
      if (peek() != '}') {
        do outs.push_back(lookup(g, read_name("an output name")));
        while (accept(','));
      }
      skip_ws();
      if (peek() != '}') fail("expected ',' or '}' after the output list, got " + describe(pos_), pos_);
      g.set_outputs(std::move(outs));
    } else {
      node_statement(g, first, at);
    }
  }

  void node_statement(Graph& g, const Name& first, size_t at) {
    std::vector<std::string> out_names{first.text};
    while (accept(',')) out_names.push_back(read_name("an output name").text);
    expect('=', "after the names of a node's outputs");
    skip_ws();
    size_t op_at = pos_;
    std::string op = read_word();
    if (op.empty()) fail("expected an op name, got " + describe(op_at), op_at);
    std::optional<OpKind> kind = op_from_name(op);
    if (!kind) fail("unknown op '" + op + "'", op_at);
    std::string node_name;
    if (accept('[')) {
      node_name = read_name("a node name").text;
      expect(']', "after the node name");
    }
    expect('(', "before the node's inputs");
    std::vector<ValueId> inputs;
    if (!accept(')')) {
      do {
        Name in = read_name("an input value or '_'");
        inputs.push_back(!in.quoted && in.text == "_" ? kNoValue : lookup(g, in));
      } while (accept(','));
      expect(')', "after the node's inputs");
    }
    Attrs attrs;
    if (accept('{')) read_attrs(*kind, attrs);
    guarded(at, [&] {
      NodeId n = g.add_node(*kind, std::move(inputs), std::move(attrs), node_name, out_names);
      size_t produced = g.node(n).outputs.size();
      if (produced != out_names.size())
        fail(op + " produces " + std::to_string(produced) + " outputs but the statement names " +
                 std::to_string(out_names.size()),
             at);
    });
  }

  void read_attrs(OpKind kind, Attrs& attrs) {
    if (accept('}')) return;
    do {
      skip_ws();
      size_t at = pos_;
      std::string name = read_word();
      if (name.empty()) fail("expected an attribute name, got " + describe(at), at);
      if (attrs.has(name)) fail("attribute '" + name + "' is given twice", at);
      expect('=', "after attribute name '" + name + "'");
      std::optional<AttrType> want;
      for (const AttrSpec& spec : op_def(kind).attrs)
        if (spec.name == name) want = spec.type;
      attrs.set(name, read_attr_value(want));
    } while (accept(','));
    expect('}', "after the attributes");
  }

  AttrValue read_attr_value(std::optional<AttrType> want) {
    skip_ws();
    size_t at = pos_;
    char c = peek();
    if (c == '"') return read_quoted();
    if (c == '[') {
      auto [ints, floats, any_float] = read_number_list("the list");
      if (any_float || want == AttrType::kFloats) return floats;
      return ints;
    }
    if (std::isalpha(static_cast<unsigned char>(c))) {
      std::string word = read_word();
      if (word == "inf" || word == "nan" || word.rfind("nan:", 0) == 0) return special_float(word, false, at);
      TensorType type = type_after_dtype(word, at);
      return read_tensor_data(type, "tensor attribute");
    }
    auto [i, d, is_float] = read_number();
    if (is_float || want == AttrType::kFloat) return d;
    return i;
  }

  // ---- values

  TensorType read_type() {
    skip_ws();
    size_t at = pos_;
    return type_after_dtype(read_word(), at);
  }

  TensorType type_after_dtype(const std::string& word, size_t at) {
    TensorType t;
    try {
      t.dtype = dtype_from_name(word);
    } catch (const Error&) {
      fail("expected a data type (f32, i64, ...), got '" + word + "'", at);
    }
    if (peek() != '[') fail("expected '[' and the shape after data type " + word + ", got " + describe(pos_), pos_);
    ++pos_;
    if (peek() == ']') {
      ++pos_;
      return t;
    }
    while (true) {
      size_t dim_at = pos_;
      while (std::isdigit(static_cast<unsigned char>(peek()))) ++pos_;
      int64_t d = 0;
      auto res = std::from_chars(s_.data() + dim_at, s_.data() + pos_, d);
      if (pos_ == dim_at || res.ec != std::errc())
        fail("expected a dimension in the shape, got " + describe(dim_at), dim_at);
      t.shape.push_back(d);
      if (peek() == 'x') { ++pos_; continue; }
      if (peek() == ']') { ++pos_; break; }
      fail("expected 'x' or ']' in the shape, got " + describe(pos_), pos_);
    }
    try {
      shape_numel(t.shape);
    } catch (const Error& e) {
      fail(e.message(), at);
    }
    return t;
  }

  Tensor read_tensor_data(const TensorType& type, const std::string& what) {
    skip_ws();
    size_t at = pos_;
    if (s_.compare(pos_, 4, "hex\"") == 0) {
      pos_ += 4;
      std::vector<uint8_t> bytes;
      while (peek() != '"') {
        int hi = hex_digit(peek()), lo = hi < 0 ? -1 : hex_digit(peek(1));
        if (hi < 0 || lo < 0) fail("expected pairs of hex digits in the hex string of " + what, pos_);
        bytes.push_back(static_cast<uint8_t>(hi * 16 + lo));
        pos_ += 2;
      }
      ++pos_;
      if (static_cast<int64_t>(bytes.size()) != type.nbytes())
        fail(what + " of type " + type_str(type) + " needs " + std::to_string(type.nbytes()) +
                 " bytes, the hex string has " + std::to_string(bytes.size()),
             at);
      return guarded(at, [&] { return Tensor::from_bytes(type.dtype, type.shape, std::move(bytes)); });
    }
    if (peek() != '[') fail("expected hex\"...\" or a [list] for " + what + ", got " + describe(at), at);
    // A named struct, not a structured binding: clang before 16 cannot
    // capture bindings in the lambda below.
    NumberList list = read_number_list("the elements of " + what);
    if (list.any_float && is_integer(type.dtype)) fail("expected integer elements for " + what, at + 1);
    if (static_cast<int64_t>(list.ints.size()) != type.numel())
      fail(what + " of type " + type_str(type) + " needs " + std::to_string(type.numel()) + " elements, the list has " +
               std::to_string(list.ints.size()),
           at);
    return guarded(at, [&] {
      return is_float(type.dtype) ? Tensor::from_doubles(type.dtype, type.shape, list.floats)
                                  : Tensor::from_ints(type.dtype, type.shape, list.ints);
    });
  }

  struct NumberList {
    std::vector<int64_t> ints;
    std::vector<double> floats;
    bool any_float = false;
  };

  // `[n, n, ...]` read both ways; the caller picks by any_float.
  NumberList read_number_list(const std::string& what) {
    NumberList l;
    ++pos_;  // '['
    if (accept(']')) return l;
    do {
      auto [i, d, is_float] = read_number();
      l.any_float |= is_float;
      l.ints.push_back(i);
      l.floats.push_back(d);
    } while (accept(','));
    expect(']', "after " + what);
    return l;
  }

  struct Number {
    int64_t i = 0;
    double d = 0;
    bool is_float = false;
  };

  Number read_number() {
    skip_ws();
    size_t at = pos_;
    bool negative = peek() == '-';
    if (peek() == '-' || peek() == '+') ++pos_;
    if (std::isalpha(static_cast<unsigned char>(peek()))) {
      std::string word = read_word();
      if (word == "inf" || word == "nan" || word.rfind("nan:", 0) == 0) {
        double d = special_float(word, negative, at);
        return {0, d, true};
      }
      fail("expected a number, got '" + word + "'", at);
    }
    size_t start = pos_;
    bool is_fl = false;
    while (true) {
      char c = peek();
      if (std::isdigit(static_cast<unsigned char>(c))) {
        ++pos_;
      } else if (c == '.' || c == 'e' || c == 'E') {
        is_fl = true;
        ++pos_;
        if ((c == 'e' || c == 'E') && (peek() == '-' || peek() == '+')) ++pos_;
      } else {
        break;
      }
    }
    if (pos_ == start) fail("expected a number, got " + describe(at), at);
    std::string tok = s_.substr(at, pos_ - at);
    Number n;
    n.is_float = is_fl;
    if (is_fl) {
      char* end = nullptr;
      n.d = std::strtod(tok.c_str(), &end);
      if (end != tok.c_str() + tok.size()) fail("malformed number '" + tok + "'", at);
      return n;
    }
    const char* b = tok.c_str() + (tok[0] == '+' ? 1 : 0);
    auto res = std::from_chars(b, tok.c_str() + tok.size(), n.i);
    if (res.ec != std::errc() || res.ptr != tok.c_str() + tok.size())
      fail("integer '" + tok + "' is out of range", at);
    n.d = static_cast<double>(n.i);
    return n;
  }

  double special_float(const std::string& word, bool negative, size_t at) {
    double d;
    if (word == "inf") {
      d = HUGE_VAL;
    } else if (word == "nan") {
      uint64_t bits = kQuietNan;
      std::memcpy(&d, &bits, 8);
    } else {
      std::string hex = word.substr(4);
      uint64_t bits = 0;
      auto res = hex.size() > 2 && hex.compare(0, 2, "0x") == 0
                     ? std::from_chars(hex.data() + 2, hex.data() + hex.size(), bits, 16)
                     : std::from_chars_result{hex.data(), std::errc::invalid_argument};
      if (res.ec != std::errc() || res.ptr != hex.data() + hex.size())
        fail("expected nan:0x<16 hex digits>, got '" + word + "'", at);
      std::memcpy(&d, &bits, 8);
      if (!std::isnan(d)) fail("'" + word + "' is not the bit pattern of a NaN", at);
    }
    if (negative) {
      uint64_t bits = double_bits(d) ^ kSignBit;
      std::memcpy(&d, &bits, 8);
    }
    return d;
  }

  static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  ValueId lookup(const Graph& g, const Name& name) {
    std::optional<ValueId> v = g.find_value(name.text);
    if (!v) fail("unknown value '" + name.text + "' (values must be defined before they are used)", name.at);
    return *v;
  }

  // ---- tokens

  Name read_name(const std::string& what) {
    skip_ws();
    Name n;
    n.at = pos_;
    if (peek() == '"') {
      n.text = read_quoted();
      n.quoted = true;
      return n;
    }
    n.text = read_word();
    if (n.text.empty()) fail("expected " + what + ", got " + describe(n.at), n.at);
    return n;
  }

  // A bare word; a ':' belongs to it only when a name character follows.
  std::string read_word() {
    size_t start = pos_;
    while (!at_end() && is_name_char(s_[pos_])) {
      if (s_[pos_] == ':' && !(pos_ + 1 < s_.size() && is_name_char(s_[pos_ + 1]))) break;
      ++pos_;
    }
    return s_.substr(start, pos_ - start);
  }

  std::string read_quoted() {
    size_t at = pos_;
    ++pos_;  // opening quote
    std::string out;
    while (true) {
      if (at_end() || peek() == '\n') fail("unterminated string", at);
      char c = s_[pos_++];
      if (c == '"') return out;
      if (c != '\\') {
        out += c;
        continue;
      }
      char e = peek();
      ++pos_;
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'x': {
          int hi = hex_digit(peek()), lo = hi < 0 ? -1 : hex_digit(peek(1));
          if (hi < 0 || lo < 0) fail("expected two hex digits after \\x", pos_);
          out += static_cast<char>(hi * 16 + lo);
          pos_ += 2;
          break;
        }
        default: fail(std::string("unknown escape '\\") + e + "' in string", pos_ - 2);
      }
    }
  }

  void skip_ws() {
    while (!at_end()) {
      char c = s_[pos_];
      if (c == '#') {
        while (!at_end() && s_[pos_] != '\n') ++pos_;
      } else if (std::isspace(static_cast<unsigned char>(c))) {
        ++pos_;
      } else {
        break;
      }
    }
  }

  bool at_end() const { return pos_ >= s_.size(); }
  char peek(size_t ahead = 0) const { return pos_ + ahead < s_.size() ? s_[pos_ + ahead] : '\0'; }

  bool accept(char c) {
    skip_ws();
    if (peek() != c || at_end()) return false;
    ++pos_;
    return true;
  }

  void expect(char c, const std::string& context) {
    if (!accept(c)) fail(std::string("expected '") + c + "' " + context + ", got " + describe(pos_), pos_);
  }

  void expect_keyword(const std::string& word) {
    skip_ws();
    size_t at = pos_;
    if (read_word() != word) fail("expected '" + word + "', got " + describe(at), at);
  }

  std::string describe(size_t at) const {
    if (at >= s_.size()) return "end of input";
    size_t end = at;
    if (is_name_char(s_[at]))
      while (end < s_.size() && end - at < 20 && is_name_char(s_[end])) ++end;
    else
      end = at + 1;
    std::string tok = s_.substr(at, end - at);
    return tok == "\n" ? "end of line" : "'" + tok + "'";
  }

  std::string where(size_t at) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at && i < s_.size(); ++i) {
      if (s_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    return source_ + ":" + std::to_string(line) + ":" + std::to_string(col);
  }

  [[noreturn]] void fail(const std::string& message, size_t at) const {
    throw Error(ErrorKind::kParse, message, {where(at), "", ""});
  }

  // Graph-building errors (shape inference, duplicate names) keep their kind
  // and node context and gain the statement's location.
  template <class F>
  auto guarded(size_t at, F&& f) -> decltype(f()) {
    try {
      return f();
    } catch (const Error& e) {
      if (!e.context().file.empty()) throw;
      throw e.with_context({where(at), "", ""});
    }
  }

  const std::string& s_;
  std::string source_;
  size_t pos_ = 0;
};

}  // namespace

Graph parse_graph(const std::string& text, const std::string& source_name) {
  return Parser(text, source_name).parse();
}

}  // namespace tessera
