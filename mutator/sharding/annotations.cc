#include "mutator/sharding/annotations.h"

#include <fnmatch.h>

#include <algorithm>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "graph/error.h"

namespace tessera::mutator {
namespace {

struct Spec {
  std::string text, glob;
  enum class Slot { kValue, kInput, kOutput } slot = Slot::kValue;
  size_t index = 0;
  Sharding sharding;
};

bool matches(const std::string& glob, const std::string& name) {
  return ::fnmatch(glob.c_str(), name.c_str(), 0) == 0;
}

// GLOB[:inK|:outK]=PLACEMENTS
Spec parse_spec(const std::string& text) {
  Spec s;
  s.text = text;
  size_t eq = text.rfind('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size())
    TESSERA_THROW(ErrorKind::kUsage, "--shard '" << text << "': expected GLOB[:inK|:outK]=PLACEMENTS, e.g. '*/fc1/MatMul:in1=[S(1)]'");
  s.glob = text.substr(0, eq);
  try {
    s.sharding = Sharding::parse(text.substr(eq + 1));
  } catch (const Error& e) {
    TESSERA_THROW(ErrorKind::kUsage, "--shard '" << text << "': " << e.what());
  }
  size_t colon = s.glob.rfind(':');
  if (colon != std::string::npos) {
    std::string tail = s.glob.substr(colon + 1);
    for (auto [prefix, slot] : {std::pair{"in", Spec::Slot::kInput}, std::pair{"out", Spec::Slot::kOutput}}) {
      std::string p = prefix;
      if (tail.size() > p.size() && tail.compare(0, p.size(), p) == 0 &&
          tail.find_first_not_of("0123456789", p.size()) == std::string::npos) {
        s.slot = slot;
        s.index = static_cast<size_t>(std::stoul(tail.substr(p.size())));
        s.glob = s.glob.substr(0, colon);
      }
    }
  }
  return s;
}

}  // namespace

std::vector<ShardConstraint> resolve_annotations(const Graph& g, const DeviceMesh& mesh,
                                                 const std::vector<std::string>& specs) {
  std::vector<ShardConstraint> out;
  std::map<ValueId, size_t> seen;  // value -> index in out
  int matched = 0;                 // by the current spec
  auto add = [&](ValueId v, const Spec& s) {
    ++matched;
    const Value& val = g.value(v);
    if (s.sharding.placements.size() != mesh.axes().size())
      TESSERA_THROW(ErrorKind::kInvalidGraph, "--shard '" << s.text << "': tensor '" << val.name << "' gets "
                                                          << s.sharding.placements.size()
                                                          << " placements, the mesh " << mesh.str() << " has "
                                                          << mesh.axes().size() << " axes");
    // An annotated graph input or output crosses the plan's boundary as
    // annotated: each rank is fed, and gives back, its block.
    bool edge = std::find(g.inputs().begin(), g.inputs().end(), v) != g.inputs().end() ||
                std::find(g.outputs().begin(), g.outputs().end(), v) != g.outputs().end();
    try {
      // Uneven blocks only inside the program, on activations (propagate.h).
      s.sharding.validate(mesh, val.type, edge || val.constant ? Blocks::kEven : Blocks::kUneven);
    } catch (const Error& e) {
      TESSERA_THROW(ErrorKind::kInvalidGraph, "--shard '" << s.text << "': tensor '" << val.name << "' "
                                                          << type_str(val.type) << ": " << e.what());
    }
    auto it = seen.find(v);
    if (it != seen.end()) {
      if (out[it->second].sharding != s.sharding)
        TESSERA_THROW(ErrorKind::kInvalidGraph, "tensor '" << val.name << "' is given " << out[it->second].sharding.str()
                                                           << " by '" << out[it->second].origin << "' and "
                                                           << s.sharding.str() << " by '" << s.text << "'");
      return;
    }
    seen[v] = out.size();
    out.push_back({v, s.sharding, s.text, edge && !val.constant});
  };
  for (const std::string& text : specs) {
    Spec s = parse_spec(text);
    matched = 0;
    if (s.slot == Spec::Slot::kValue) {
      for (ValueId v = 0; v < g.num_values(); ++v)
        if (matches(s.glob, g.value(v).name)) add(v, s);
    } else {
      for (NodeId n = 0; n < g.num_nodes(); ++n) {
        const Node& node = g.node(n);
        if (!matches(s.glob, node.name)) continue;
        const std::vector<ValueId>& slots = s.slot == Spec::Slot::kInput ? node.inputs : node.outputs;
        if (s.index >= slots.size() || slots[s.index] == kNoValue)
          TESSERA_THROW(ErrorKind::kUsage, "--shard '" << text << "': node '" << node.name << "' ("
                                                       << op_name(node.kind) << ") has no "
                                                       << (s.slot == Spec::Slot::kInput ? "input " : "output ")
                                                       << s.index);
        add(slots[s.index], s);
      }
    }
    if (matched == 0) TESSERA_THROW(ErrorKind::kUsage, "--shard '" << text << "' matches no tensor of the model");
  }
  return out;
}

std::vector<std::string> read_shard_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) TESSERA_THROW(ErrorKind::kIo, "cannot read --shard-file " << path);
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::ordered_json doc;
  try {
    doc = nlohmann::ordered_json::parse(text.str());
  } catch (const nlohmann::json::exception& e) {
    TESSERA_THROW(ErrorKind::kParse, path << ": not JSON: " << e.what());
  }
  if (!doc.is_object())
    TESSERA_THROW(ErrorKind::kParse, path << ": expected an object of \"GLOB[:inK|:outK]\": \"PLACEMENTS\" pairs");
  std::vector<std::string> specs;
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    if (!it.value().is_string())
      TESSERA_THROW(ErrorKind::kParse, path << ": the sharding of '" << it.key() << "' must be a string like \"[S(1)]\"");
    specs.push_back(it.key() + "=" + it.value().get<std::string>());
  }
  return specs;
}

}  // namespace tessera::mutator
