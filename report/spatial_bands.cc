#include "report/spatial_bands.h"

#include <algorithm>
#include <map>
#include <optional>
#include <sstream>

#include "graph/attr_views.h"
#include "graph/error.h"
#include "report/report_svg.h"

namespace tessera::report {

using mutator::Plan;

namespace {

// The reader of a HaloExchange's output that the halo is for: the windowed
// layer, past the Slice that cuts the rows a stride skips.
const Node* layer_reading(const Graph& g, const std::vector<std::vector<NodeId>>& users, ValueId v) {
  for (int hops = 0; hops < 4; ++hops) {
    const auto& readers = users[static_cast<size_t>(v)];
    if (readers.empty()) return nullptr;
    const Node& r = g.node(readers[0]);
    if (r.kind != OpKind::kSlice) return &r;
    v = r.outputs[0];
  }
  return nullptr;
}

// The tensor of the plan's graph an exchange cuts in bands and its sharding
// as the layer reads it: the layer's input under its strategy (a reshard
// before it included), else the exchanged value by name. nullopt when
// neither is split along `dim` over `axis`.
struct Cut {
  ValueId tensor = kNoValue;
  Placement placement;
};
std::optional<Cut> cut_of(const Plan& p, const std::map<std::string, NodeId>& global_nodes, const Node* layer,
                          const std::string& exchanged, int axis, int64_t dim) {
  auto splits = [&](const Sharding& s) {
    return static_cast<size_t>(axis) < s.placements.size() &&
           s.placements[static_cast<size_t>(axis)] == Placement::shard(dim);
  };
  if (layer) {
    auto it = global_nodes.find(layer->name);
    if (it != global_nodes.end()) {
      const Node& n = p.optimized.node(it->second);
      const Strategy& st = p.sharding.nodes[static_cast<size_t>(it->second)];
      if (!n.inputs.empty() && !st.inputs.empty() && splits(st.inputs[0]))
        return Cut{n.inputs[0], st.inputs[0].placements[static_cast<size_t>(axis)]};
    }
  }
  std::optional<ValueId> v = p.optimized.find_value(exchanged);
  if (v && splits(p.sharding.values[static_cast<size_t>(*v)]))
    return Cut{*v, p.sharding.values[static_cast<size_t>(*v)].placements[static_cast<size_t>(axis)]};
  return std::nullopt;
}

}  // namespace

int64_t SpatialExchange::total_bytes() const {
  int64_t sum = 0;
  for (const RankBand& b : bands) sum += b.bytes;
  return sum * groups;
}

std::vector<SpatialExchange> spatial_exchanges(const Plan& p) {
  std::vector<SpatialExchange> out;
  if (!p.is_mesh()) return out;
  const Graph& rank0 = p.ranks[0];
  std::map<std::string, NodeId> global_nodes;
  for (NodeId n = 0; n < p.optimized.num_nodes(); ++n) global_nodes.try_emplace(p.optimized.node(n).name, n);
  std::vector<std::vector<NodeId>> users = rank0.users();
  for (NodeId id : rank0.topo_order()) {
    const Node& h = rank0.node(id);
    if (h.kind != OpKind::kHaloExchange) continue;
    const HaloExchangeAttrs attrs = HaloExchangeAttrs::of(h);
    int64_t dim = 0;
    const HaloBand mine = halo_band_of(rank0, h, &dim);
    const int axis = p.mesh.axis_index(attrs.mesh_axis);
    const Node* layer = layer_reading(rank0, users, h.outputs[0]);
    const std::string& exchanged = rank0.value(h.inputs[0]).name;
    std::optional<Cut> cut = cut_of(p, global_nodes, layer, exchanged, axis, dim);
    TESSERA_CHECK(cut, h.name << " exchanges " << exchanged << ", which the plan does not split along dim " << dim
                              << " over " << attrs.mesh_axis);
    SpatialExchange e;
    e.name = h.name;
    e.tensor = p.optimized.value(cut->tensor).name;
    e.layer = layer ? layer->name : h.name;
    e.mesh_axis = attrs.mesh_axis;
    e.dim = dim;
    e.rows = p.optimized.type(cut->tensor).shape.at(static_cast<size_t>(dim));
    const int64_t n = attrs.group_size, blocks = cut->placement.blocks(n);
    TESSERA_CHECK(blocks == n && static_cast<int64_t>(attrs.before.size()) == n,
                  h.name << ": " << blocks << " bands for a group of " << n);
    e.groups = p.mesh.num_devices() / n;
    // A row of the rank's block: what every halo row costs (the other dims
    // are cut alike on every rank of the group).
    const int64_t row_bytes = mine.rows > 0 ? rank0.type(h.inputs[0]).nbytes() / mine.rows : 0;
    for (int64_t c = 0; c < n; ++c) {
      const auto k = static_cast<size_t>(c);
      RankBand b;
      b.coordinate = c;
      b.band = {block_start(e.rows, n, c), block_start(e.rows, n, c + 1)};
      b.above = {b.band.lo - attrs.before[k], b.band.lo};
      b.below = {b.band.hi, b.band.hi + attrs.after[k]};
      b.bytes = halo_received_bytes({attrs.before[k], b.band.size(), attrs.after[k]}, row_bytes);
      e.bands.push_back(b);
    }
    out.push_back(std::move(e));
  }
  return out;
}

namespace {

constexpr const char* kRankColours[] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759",
                                        "#76b7b2", "#edc948", "#b07aa1", "#ff9da7"};
constexpr size_t kColours = sizeof kRankColours / sizeof kRankColours[0];

std::string rect(double x, double y, double w, double h, const std::string& fill, const std::string& extra,
                 const std::string& title) {
  return "<rect x=\"" + num(x) + "\" y=\"" + num(y) + "\" width=\"" + num(w) + "\" height=\"" + num(h) +
         "\" fill=\"" + fill + "\"" + extra + "><title>" + xml_escape(title) + "</title></rect>";
}

}  // namespace

std::string spatial_defs_svg() {
  std::string s = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"0\" height=\"0\" style=\"position:absolute\"><defs>";
  for (size_t c = 0; c < kColours; ++c)
    s += "<pattern id=\"halo" + std::to_string(c) +
         "\" patternUnits=\"userSpaceOnUse\" width=\"5\" height=\"5\" patternTransform=\"rotate(45)\">"
         "<rect width=\"5\" height=\"5\" fill=\"#ffffff\"/><rect width=\"2.5\" height=\"5\" fill=\"" +
         kRankColours[c] + "\"/></pattern>";
  return s + "</defs></svg>\n";
}

std::string spatial_exchange_svg(const SpatialExchange& e) {
  const auto n = static_cast<double>(e.bands.size());
  // Four label lines of 10 px beside each band.
  const double top = 8, bar_h = std::max(120.0, 46.0 * n), bar_x = 40, bar_w = 14, lane_x = bar_x + bar_w + 8,
               lane_w = 14, lane_gap = 5, label_x = lane_x + n * (lane_w + lane_gap) + 4, min_halo = 3;
  const double width = label_x + 175, height = top + bar_h + 14;
  auto y = [&](int64_t row) { return top + bar_h * static_cast<double>(row) / static_cast<double>(std::max<int64_t>(1, e.rows)); };
  std::ostringstream os;
  os << "<svg class=\"bands\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << num(width) << "\" height=\""
     << num(height) << "\">";
  os << rect(bar_x, top, bar_w, bar_h, "#eef2f7", " stroke=\"#8a9bb0\"",
             e.tensor + ": " + std::to_string(e.rows) + " rows along dim " + std::to_string(e.dim));
  os << svg_text(bar_x + bar_w / 2, top + bar_h + 11, "dim " + std::to_string(e.dim), "axis-label", "middle");
  for (const RankBand& b : e.bands) {  // the seams, with their rows
    os << "<line x1=\"" << num(bar_x - 4) << "\" x2=\"" << num(label_x - 4) << "\" y1=\"" << num(y(b.band.lo))
       << "\" y2=\"" << num(y(b.band.lo)) << "\" class=\"grid\"/>";
    os << svg_text(bar_x - 6, y(b.band.lo) + 3.5, std::to_string(b.band.lo), "axis-label", "end");
  }
  os << svg_text(bar_x - 6, y(e.rows) + 3.5, std::to_string(e.rows), "axis-label", "end");
  for (const RankBand& b : e.bands) {
    const std::string colour = kRankColours[static_cast<size_t>(b.coordinate) % kColours];
    const std::string hatch = "url(#halo" + std::to_string(static_cast<size_t>(b.coordinate) % kColours) + ")";
    const double x = lane_x + static_cast<double>(b.coordinate) * (lane_w + lane_gap);
    const std::string who = "rank " + std::to_string(b.coordinate);
    os << rect(bar_x, y(b.band.lo), bar_w, y(b.band.hi) - y(b.band.lo), colour, " fill-opacity=\"0.35\"",
               who + "'s band: rows " + str(b.band));
    os << rect(x, y(b.band.lo), lane_w, y(b.band.hi) - y(b.band.lo), colour, " class=\"band\"",
               who + ": rows " + str(b.band));
    // A halo of a row or two is a sliver of a tall image: drawn at least
    // min_halo pixels, from the seam outwards, so that it shows.
    if (!b.above.empty()) {
      double h = std::max(min_halo, y(b.above.hi) - y(b.above.lo));
      os << rect(x, y(b.above.hi) - h, lane_w, h, hatch, " class=\"halo\" stroke=\"" + colour + "\" stroke-width=\"0.8\"",
                 who + " receives rows " + str(b.above) + " from rank " + std::to_string(b.coordinate - 1));
    }
    if (!b.below.empty()) {
      double h = std::max(min_halo, y(b.below.hi) - y(b.below.lo));
      os << rect(x, y(b.below.lo), lane_w, h, hatch, " class=\"halo\" stroke=\"" + colour + "\" stroke-width=\"0.8\"",
                 who + " receives rows " + str(b.below) + " from rank " + std::to_string(b.coordinate + 1));
    }
    std::vector<std::pair<std::string, std::string>> lines = {{who + ": rows " + str(b.band), "point-label"}};
    if (!b.above.empty()) lines.push_back({"+ " + str(b.above) + " from rank " + std::to_string(b.coordinate - 1), ""});
    if (!b.below.empty()) lines.push_back({"+ " + str(b.below) + " from rank " + std::to_string(b.coordinate + 1), ""});
    lines.push_back({b.bytes > 0 ? "receives " + bytes_str(b.bytes) : "no halo", "axis-label"});
    double line_y = (y(b.band.lo) + y(b.band.hi)) / 2 - 5.0 * static_cast<double>(lines.size() - 1) + 3.5;
    for (const auto& [words, cls] : lines) {
      os << svg_text(label_x, line_y, words, cls);
      line_y += 10;
    }
  }
  os << "</svg>";
  return os.str();
}

}  // namespace tessera::report
