#include "verifier/input_ranges.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <sstream>

#include "graph/error.h"
#include "graph/op.h"

namespace tessera::verifier {

namespace {

// Whether every output value of `n` is a value read from its input at
// `slot` (the op table's value-range row).
bool moves_values(const Graph& g, const Node& n, size_t slot) {
  const OpDef& def = op_def(n.kind);
  bool listed = slot < 32 ? ((def.copies_inputs >> slot) & 1u) != 0 : def.copies_inputs == ~0u;
  return listed && (!def.copies_if || def.copies_if(g, n));
}

// Whether input `slot` of `n` indexes one axis of its data input:
// Gather's and GatherElements' indices, ScatterElements' positions.
bool indexes_axis(const Node& n, size_t slot) { return slot == 1 && op_def(n.kind).indexed_axis != nullptr; }

// The number of entries the index input of such a node selects among.
int64_t indexed_entries(const Graph& g, const Node& n) {
  const TensorType& data = g.type(n.inputs[0]);
  int64_t axis = op_def(n.kind).indexed_axis(n);
  if (axis < 0) axis += data.rank();
  return data.shape[static_cast<size_t>(axis)];
}

}  // namespace

StatedRanges parse_input_ranges(const Graph& g, const std::vector<std::string>& flags) {
  StatedRanges out;
  for (const std::string& flag : flags) {
    size_t eq = flag.rfind('=');
    size_t colon = eq == std::string::npos ? std::string::npos : flag.find(':', eq);
    if (eq == std::string::npos || eq == 0 || colon == std::string::npos)
      TESSERA_THROW(ErrorKind::kUsage, "--input-range '" << flag << "': expected NAME=LO:HI, e.g. position_ids=0:128");
    std::string name = flag.substr(0, eq);
    int64_t bounds[2] = {0, 0};
    std::string parts[2] = {flag.substr(eq + 1, colon - eq - 1), flag.substr(colon + 1)};
    for (int k = 0; k < 2; ++k) {
      size_t used = 0;
      try {
        bounds[k] = std::stoll(parts[k], &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (parts[k].empty() || used != parts[k].size())
        TESSERA_THROW(ErrorKind::kUsage, "--input-range '" << flag << "': '" << parts[k]
                                                           << "' is not an integer (NAME=LO:HI, LO <= value < HI)");
    }
    if (bounds[0] >= bounds[1])
      TESSERA_THROW(ErrorKind::kUsage, "--input-range '" << flag << "': the range is empty (LO <= value < HI needs LO < HI)");
    std::optional<ValueId> v = g.find_value(name);
    bool is_input = false;
    for (ValueId in : g.inputs()) is_input = is_input || (v && in == *v);
    if (!is_input)
      TESSERA_THROW(ErrorKind::kUsage, "--input-range '" << flag << "': the model has no input '" << name << "'");
    DType dt = g.type(*v).dtype;
    if (!is_integer(dt) || dt == DType::kBool)
      TESSERA_THROW(ErrorKind::kUsage, "--input-range '" << flag << "': input '" << name << "' is "
                                                         << type_str(g.type(*v)) << ", not an integer tensor");
    if (out.count(name)) TESSERA_THROW(ErrorKind::kUsage, "--input-range '" << flag << "': '" << name << "' is stated twice");
    out[name] = IntRange{bounds[0], bounds[1], "stated by --input-range"};
  }
  return out;
}

std::vector<IntRange> integer_input_ranges(const Graph& g, const StatedRanges& stated) {
  std::vector<std::vector<NodeId>> users = g.users();
  std::vector<IntRange> out(g.inputs().size());
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    ValueId input = g.inputs()[i];
    if (!is_integer(g.type(input).dtype) || g.type(input).dtype == DType::kBool) continue;
    auto given = stated.find(g.value(input).name);
    if (given != stated.end()) {
      out[i] = given->second;
      continue;
    }
    int64_t bound = std::numeric_limits<int64_t>::max();
    std::string by;
    std::vector<ValueId> work{input};
    std::vector<bool> seen(static_cast<size_t>(g.num_values()), false);
    seen[static_cast<size_t>(input)] = true;
    while (!work.empty()) {
      ValueId v = work.back();
      work.pop_back();
      for (NodeId user : users[static_cast<size_t>(v)]) {
        const Node& n = g.node(user);
        for (size_t slot = 0; slot < n.inputs.size(); ++slot) {
          if (n.inputs[slot] != v) continue;
          if (indexes_axis(n, slot)) {
            int64_t entries = indexed_entries(g, n);
            if (entries > 0 && entries < bound) {
              bound = entries;
              by = n.name;
            }
          } else if (moves_values(g, n, slot)) {
            for (ValueId o : n.outputs)
              if (o != kNoValue && !seen[static_cast<size_t>(o)]) {
                seen[static_cast<size_t>(o)] = true;
                work.push_back(o);
              }
          }
        }
      }
    }
    if (bound != std::numeric_limits<int64_t>::max()) {
      out[i].hi = bound;
      out[i].why = "indexes " + by + " (" + std::to_string(bound) + " entries)";
    }
  }
  return out;
}

std::string describe_ranges(const Graph& g, const std::vector<IntRange>& ranges) {
  std::ostringstream os;
  bool first = true;
  for (size_t i = 0; i < g.inputs().size() && i < ranges.size(); ++i) {
    const TensorType& t = g.type(g.inputs()[i]);
    if (!is_integer(t.dtype)) continue;
    os << (first ? "" : ", ") << g.value(g.inputs()[i]).name;
    first = false;
    if (t.dtype == DType::kBool) {
      os << " over {false, true}";
      continue;
    }
    if (ranges[i].hi - ranges[i].lo == 2) os << " over {" << ranges[i].lo << ", " << ranges[i].lo + 1 << "}";
    else os << " over [" << ranges[i].lo << ", " << ranges[i].hi << ")";
    os << " (" << ranges[i].why << ")";
  }
  return os.str();
}

}  // namespace tessera::verifier
