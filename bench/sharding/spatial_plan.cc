// Writes a spatial plan folder for a convolutional chain (issue 43): the
// model's layers from its input to its output, each a window op (Conv,
// MaxPool, AveragePool) or element-wise, split into bands of rows over
// `--ranks` N, the halo exchanged every k layers with k chosen by the cost
// model of `--device` (or fixed by --every). The ranks' programs are checked
// against the model in lockstep on the reference interpreter before they are
// written; the folder runs with `tessera run DIR` (threads) or
// `mpirun -np N tessera run DIR`, its inputs and outputs whole.
//
//   spatial_plan MODEL.onnx OUT_DIR --ranks N [--every K] [--device h100] [--dim 2] [--curve] [--no-check]
//
// Prints the halo (rows from each neighbour per exchange), the bytes the
// formula gives against the bytes the rank files' HaloExchange nodes move,
// the check's error, and with --curve the predicted time for 1, 2, 4 and 8
// ranks on the device.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "calibrate/prepare_device.h"
#include "cost/device_profile.h"
#include "cost/plan_cost.h"
#include "graph/error.h"
#include "mutator/plan_files.h"
#include "mutator/sharding/spatial_partition.h"
#include "tools/api/tessera.h"

using namespace tessera;
namespace fs = std::filesystem;

namespace {

// The nodes from the first input to the first output, each the only reader
// of the one before it.
std::vector<NodeId> whole_chain(const Graph& g) {
  std::vector<std::vector<NodeId>> users = g.users();
  std::vector<NodeId> chain;
  ValueId v = g.inputs().at(0);
  while (v != g.outputs().at(0)) {
    std::vector<NodeId> readers = users.at(static_cast<size_t>(v));
    if (readers.size() != 1)
      throw Error(ErrorKind::kUnsupported, "value " + g.value(v).name + " has " + std::to_string(readers.size()) +
                                               " readers: the model is not a chain of layers");
    chain.push_back(readers[0]);
    v = g.node(readers[0]).outputs.at(0);
  }
  return chain;
}

// HaloExchange bytes a rank program receives (output less input).
int64_t exchanged_bytes(const Graph& g) {
  int64_t b = 0;
  for (NodeId n = 0; n < g.num_nodes(); ++n)
    if (g.node(n).kind == OpKind::kHaloExchange)
      b += g.type(g.node(n).outputs[0]).nbytes() - g.type(g.node(n).inputs[0]).nbytes();
  return b;
}

// The bands and halos of one exchange as text, one line per rank on a
// scale of 60 columns over the rows: '=' the rank's own rows, '+' the halo
// rows it receives (above from the previous rank, below from the next).
void draw(const mutator::SpatialHalo& h) {
  int64_t rows = h.ranks.back().own.hi;
  auto col = [&](int64_t row) { return static_cast<int>(row * 60 / rows); };
  for (size_t r = 0; r < h.ranks.size(); ++r) {
    const mutator::RankHalo& k = h.ranks[r];
    std::string line(61, ' ');
    for (int c = col(k.own.lo); c < std::max(col(k.own.hi), col(k.own.lo) + 1); ++c) line[static_cast<size_t>(c)] = '=';
    if (k.from_prev > 0) line[static_cast<size_t>(std::max(0, col(k.own.lo) - 1))] = '+';
    if (k.from_next > 0) line[static_cast<size_t>(std::min(60, col(k.own.hi)))] = '+';
    std::printf("  rank %zu |%s| rows [%lld, %lld) +%lld above, +%lld below\n", r, line.c_str(),
                static_cast<long long>(k.own.lo), static_cast<long long>(k.own.hi),
                static_cast<long long>(k.from_prev), static_cast<long long>(k.from_next));
  }
}

int usage() {
  std::fprintf(stderr, "usage: spatial_plan MODEL.onnx OUT_DIR --ranks N [--every K] [--device h100] [--dim 2] [--curve] [--no-check]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return usage();
  std::string model = argv[1], out = argv[2], device_name = "h100";
  int64_t ranks = 2, every = 0, dim = 2;
  bool curve = false, check = true;
  for (int i = 3; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--ranks") ranks = std::atoll(next().c_str());
    else if (a == "--every") every = std::atoll(next().c_str());
    else if (a == "--device") device_name = next();
    else if (a == "--dim") dim = std::atoll(next().c_str());
    else if (a == "--curve") curve = true;
    else if (a == "--no-check") check = false;
    else return usage();
  }
  try {
    Graph g = api::load(model);
    std::vector<NodeId> chain = whole_chain(g);
    calibrate::PrepareOptions prepare;
    prepare.calibrate = false;  // cpu: this host's cached profile, else its detected one
    cost::DeviceProfile device = calibrate::prepare_device(device_name, prepare);
    DeviceMesh mesh = DeviceMesh::parse("tp=" + std::to_string(ranks));
    std::optional<mutator::SpatialPlan> plan;
    if (every > 0) {
      plan = mutator::spatial_plan(g, chain, dim, mesh, every);
    } else {
      std::optional<mutator::SpatialChoice> c = mutator::cheapest_spatial_plan(g, chain, dim, mesh, device);
      if (c) {
        std::printf("exchange every k layers on %s, predicted:", device.name.c_str());
        for (auto [k, t] : c->tried) std::printf(" k=%lld %.3f ms", static_cast<long long>(k), t * 1e3);
        std::printf("\nchosen k = %lld\n", static_cast<long long>(c->every));
        every = c->every;
        plan = std::move(c->plan);
      }
    }
    if (!plan) throw Error(ErrorKind::kUnsupported, "no spatial split of " + model + " over " + mesh.str());
    int64_t formula = 0, moved = 0;
    for (size_t e = 0; e < plan->exchanges.size(); ++e) {
      formula += plan->exchanges[e].halo_bytes();
      if (plan->exchanges[e].halo_rows() == 0) continue;  // element-wise layers: no exchange
      std::printf("exchange %zu: %lld B a row\n", e, static_cast<long long>(plan->exchanges[e].bytes_per_row));
      draw(plan->exchanges[e]);
    }
    for (const Graph& r : plan->ranks) moved += exchanged_bytes(r);
    std::printf("halo bytes: formula %lld, rank files' HaloExchange nodes %lld\n", static_cast<long long>(formula),
                static_cast<long long>(moved));
    if (check) {  // the reference interpreter in f64: minutes for a large image
      double err = mutator::spatial_plan_error(g, chain, *plan, 7);
      std::printf("ranks in lockstep against the model: max |difference| %.3g\n", err);
      if (!(err < 1e-6)) throw Error(ErrorKind::kInternal, "the spatial plan does not compute the model");
    }
    fs::create_directories(out);
    std::vector<Graph> programs = mutator::whole_io_programs(*plan);
    std::vector<std::string> names;
    for (size_t r = 0; r < programs.size(); ++r) {
      names.push_back(mutator::rank_file(static_cast<int64_t>(r)));
      api::export_onnx(programs[r], (fs::path(out) / names.back()).string());
    }
    nlohmann::json files = nlohmann::json::object(), rank_list = nlohmann::json::array();
    for (const mutator::PlanFile& f : mutator::describe_plan_files(out, names))
      files[f.name] = {{"sha256", f.sha256}, {"bytes", f.bytes}};
    for (int64_t r = 0; r < ranks; ++r) rank_list.push_back({{"rank", r}});
    nlohmann::json j = {{"format_version", mutator::kPlanFormatVersion}, {"mesh", mesh.str()},
                        {"ranks", rank_list}, {"files", files},
                        {"spatial", {{"dim", dim}, {"every", every}, {"halo_bytes", formula}}}};
    std::ofstream(fs::path(out) / "plan.json") << j.dump(2);
    std::printf("wrote %s\n", out.c_str());
    if (curve) {
      double one = mutator::chain_seconds(g, chain, device);
      std::printf("predicted on %s: 1 device %.3f ms", device.name.c_str(), one * 1e3);
      for (int64_t n : {2, 4, 8}) {
        std::optional<mutator::SpatialChoice> c =
            mutator::cheapest_spatial_plan(g, chain, dim, DeviceMesh::parse("tp=" + std::to_string(n)), device);
        if (c) std::printf(", %lld %.3f ms (k=%lld)", static_cast<long long>(n), c->time_s * 1e3, static_cast<long long>(c->every));
      }
      std::printf("\n");
      // As the sharding search prices a chain (deep_halo.h): k counts window
      // layers, collectives on the compute stream, the runtime's halo overlap.
      mutator::SpatialPricing search;
      search.unit = mutator::SpatialPricing::Unit::kWindowLayers;
      search.plan = {};
      search.halo_overlap = cost::runtime_cost_options(device).halo_overlap;
      std::printf("as the search prices it on %s:", device.name.c_str());
      for (int64_t n : {2, 4, 8}) {
        std::optional<mutator::SpatialChoice> c =
            mutator::cheapest_spatial_plan(g, chain, dim, DeviceMesh::parse("tp=" + std::to_string(n)), device, search);
        if (c && !c->tried.empty())
          std::printf(" %lld: every window layer %.3f ms, chosen %.3f ms (k=%lld);", static_cast<long long>(n),
                      c->tried.front().second * 1e3, c->time_s * 1e3, static_cast<long long>(c->every));
      }
      std::printf("\n");
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "spatial_plan: %s\n", e.what());
    return 1;
  }
  return 0;
}
