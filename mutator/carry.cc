#include "mutator/carry.h"

#include <algorithm>
#include <set>

#include "graph/error.h"

namespace tessera::mutator {
namespace {

// Matches `name` against a pattern whose only wildcard is `*` (any run of
// characters, `.` and `/` included), collecting what each `*` matched.
bool match(const std::string& pattern, size_t p, const std::string& name, size_t n, std::vector<std::string>& stars) {
  if (p == pattern.size()) return n == name.size();
  if (pattern[p] != '*') return n < name.size() && pattern[p] == name[n] && match(pattern, p + 1, name, n + 1, stars);
  for (size_t end = name.size() + 1; end-- > n;) {  // the longest match first, as a glob reads
    stars.push_back(name.substr(n, end - n));
    if (match(pattern, p + 1, name, end, stars)) return true;
    stars.pop_back();
  }
  return false;
}

std::string fill(const std::string& pattern, const std::vector<std::string>& stars, const std::string& spec) {
  std::string out;
  size_t k = 0;
  for (char c : pattern) {
    if (c != '*') {
      out += c;
      continue;
    }
    if (k >= stars.size())
      TESSERA_THROW(ErrorKind::kUsage, "--carry '" << spec << "': the input pattern has more '*' than the output pattern");
    out += stars[k++];
  }
  return out;
}

}  // namespace

std::vector<CarryPair> resolve_carry(const std::vector<std::pair<std::string, TensorType>>& outputs,
                                     const std::vector<std::pair<std::string, TensorType>>& inputs,
                                     const std::vector<std::string>& specs) {
  std::vector<CarryPair> pairs;
  std::set<std::string> fed;
  auto input_type = [&](const std::string& name) -> const TensorType* {
    for (const auto& [n, t] : inputs)
      if (n == name) return &t;
    return nullptr;
  };
  for (const std::string& spec : specs) {
    size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size() || spec.find('=', eq + 1) != std::string::npos)
      TESSERA_THROW(ErrorKind::kUsage, "--carry '" << spec << "': expected OUTPUT=INPUT, e.g. 'present.*=past_key_values.*'");
    std::string out_pattern = spec.substr(0, eq), in_pattern = spec.substr(eq + 1);
    int matched = 0;
    for (const auto& [name, type] : outputs) {
      std::vector<std::string> stars;
      if (!match(out_pattern, 0, name, 0, stars)) continue;
      ++matched;
      std::string in = fill(in_pattern, stars, spec);
      const TensorType* want = input_type(in);
      if (!want)
        TESSERA_THROW(ErrorKind::kUsage, "--carry '" << spec << "': output '" << name << "' would feed input '" << in
                                                     << "', which the model does not have");
      if (!fed.insert(in).second)
        TESSERA_THROW(ErrorKind::kUsage, "--carry '" << spec << "': input '" << in << "' is carried into twice");
      if (!(*want == type))
        TESSERA_THROW(ErrorKind::kInvalidGraph, "carried tensor '" << name << "' is " << type_str(type) << " but input '"
                                                                   << in << "' takes " << type_str(*want));
      pairs.push_back({name, in});
    }
    if (matched == 0) TESSERA_THROW(ErrorKind::kUsage, "--carry '" << spec << "' matches no output of the model");
  }
  return pairs;
}

std::vector<CarryPair> resolve_carry(const Graph& g, const std::vector<std::string>& specs) {
  std::vector<std::pair<std::string, TensorType>> outs, ins;
  for (ValueId v : g.outputs()) outs.emplace_back(g.value(v).name, g.type(v));
  for (ValueId v : g.inputs()) ins.emplace_back(g.value(v).name, g.type(v));
  return resolve_carry(outs, ins, specs);
}

}  // namespace tessera::mutator
