#include "graph/sharding.h"

#include <algorithm>
#include <set>

#include "graph/error.h"

namespace tessera {

DeviceMesh::DeviceMesh(std::vector<Axis> axes) : axes_(std::move(axes)) {
  std::set<std::string> names;
  for (const Axis& a : axes_) {
    if (a.name.empty()) TESSERA_THROW(ErrorKind::kUsage, "mesh axis with an empty name");
    if (!names.insert(a.name).second) TESSERA_THROW(ErrorKind::kUsage, "mesh axis '" << a.name << "' appears twice");
    if (a.size < 1) TESSERA_THROW(ErrorKind::kUsage, "mesh axis '" << a.name << "' has size " << a.size);
  }
}

DeviceMesh DeviceMesh::parse(const std::string& text) {
  std::vector<Axis> axes;
  if (text.empty() || text == "single") return DeviceMesh();
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    std::string item = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 >= item.size())
      TESSERA_THROW(ErrorKind::kUsage, "bad mesh '" << text << "': expected NAME=SIZE[,NAME=SIZE...]");
    int64_t size = 0;
    try {
      size_t used = 0;
      size = std::stoll(item.substr(eq + 1), &used);
      if (used != item.size() - eq - 1) throw std::invalid_argument("trailing");
    } catch (const std::exception&) {
      TESSERA_THROW(ErrorKind::kUsage, "bad mesh '" << text << "': size of '" << item.substr(0, eq) << "' is not a number");
    }
    axes.push_back({item.substr(0, eq), size});
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return DeviceMesh(std::move(axes));
}

int64_t DeviceMesh::num_devices() const {
  int64_t n = 1;
  for (const Axis& a : axes_) n *= a.size;
  return n;
}

int DeviceMesh::axis_index(const std::string& name) const {
  for (size_t i = 0; i < axes_.size(); ++i)
    if (axes_[i].name == name) return static_cast<int>(i);
  TESSERA_THROW(ErrorKind::kUsage, "mesh " << str() << " has no axis '" << name << "'");
}

std::vector<int64_t> DeviceMesh::coords(int64_t rank) const {
  TESSERA_CHECK(rank >= 0 && rank < num_devices(), "rank " << rank << " outside mesh " << str());
  std::vector<int64_t> c(axes_.size());
  for (int64_t i = static_cast<int64_t>(axes_.size()) - 1; i >= 0; --i) {
    c[i] = rank % axes_[i].size;
    rank /= axes_[i].size;
  }
  return c;
}

int64_t DeviceMesh::rank_of(const std::vector<int64_t>& c) const {
  TESSERA_CHECK(c.size() == axes_.size(), "coordinate rank mismatch");
  int64_t r = 0;
  for (size_t i = 0; i < axes_.size(); ++i) r = r * axes_[i].size + c[i];
  return r;
}

std::vector<int64_t> DeviceMesh::group(int64_t rank, int axis) const {
  std::vector<int64_t> c = coords(rank);
  std::vector<int64_t> g;
  for (int64_t k = 0; k < axes_.at(axis).size; ++k) {
    c[axis] = k;
    g.push_back(rank_of(c));
  }
  return g;
}

std::string DeviceMesh::str() const {
  if (axes_.empty()) return "single";
  std::string s;
  for (size_t i = 0; i < axes_.size(); ++i) {
    if (i) s += ",";
    s += axes_[i].name + "=" + std::to_string(axes_[i].size);
  }
  return s;
}

std::string Placement::str() const {
  switch (kind) {
    case Kind::kReplicate: return "R";
    case Kind::kShard:
      return "S(" + std::to_string(dim) + (groups > 0 ? "/" + std::to_string(groups) : "") + ")";
    case Kind::kPartial: return "P";
  }
  return "?";
}

Sharding Sharding::replicated(const DeviceMesh& mesh) {
  return Sharding{std::vector<Placement>(mesh.axes().size(), Placement::replicate())};
}

int64_t block_start(int64_t size, int64_t blocks, int64_t b) {
  TESSERA_CHECK(blocks >= 1 && b >= 0 && b <= blocks, "block " << b << " of " << blocks);
  int64_t base = size / blocks, extra = size % blocks;
  return b * base + std::min(b, extra);
}

void Sharding::validate(const DeviceMesh& mesh, const TensorType& global, Blocks blocks) const {
  if (placements.size() != mesh.axes().size())
    TESSERA_THROW(ErrorKind::kInvalidGraph, "sharding " << str() << " has " << placements.size()
                                                        << " placements for mesh " << mesh.str());
  Shape local = global.shape;
  for (size_t i = 0; i < placements.size(); ++i) {
    const Placement& p = placements[i];
    if (!p.is_shard()) continue;
    if (p.dim < 0 || p.dim >= global.rank())
      TESSERA_THROW(ErrorKind::kInvalidGraph, "sharding " << str() << " splits dim " << p.dim << " of "
                                                          << type_str(global));
    int64_t n = p.blocks(mesh.axes()[i].size);
    if (p.groups != 0 && (p.groups < 2 || p.groups >= mesh.axes()[i].size || mesh.axes()[i].size % p.groups != 0))
      TESSERA_THROW(ErrorKind::kInvalidGraph, "sharding " << str() << ": " << p.groups << " blocks do not divide mesh axis '"
                                                          << mesh.axes()[i].name << "' (" << mesh.axes()[i].size
                                                          << ") into groups of two or more ranks");
    bool alone = true;
    for (size_t j = 0; j < placements.size(); ++j)
      alone = alone && (j == i || !placements[j].is_shard() || placements[j].dim != p.dim);
    if (local[p.dim] % n != 0 && blocks == Blocks::kUneven && p.groups == 0 && alone && local[p.dim] >= n) {
      local[p.dim] = block_size(local[p.dim], n, 0);
      continue;
    }
    if (local[p.dim] % n != 0)
      TESSERA_THROW(ErrorKind::kInvalidGraph, "sharding " << str() << ": dim " << p.dim << " of " << type_str(global)
                                                          << " is not divisible by mesh axis '" << mesh.axes()[i].name
                                                          << "' (" << n << (p.groups ? " blocks" : "") << ")");
    local[p.dim] /= n;
    // Blocks of a partly replicated shard do not nest with another axis's.
    for (size_t j = 0; j < placements.size(); ++j)
      if (j != i && placements[j].is_shard() && placements[j].dim == p.dim && (p.groups || placements[j].groups))
        TESSERA_THROW(ErrorKind::kInvalidGraph, "sharding " << str() << " splits dim " << p.dim
                                                            << " over two axes, one of them in groups");
  }
}

bool Sharding::is_even(const DeviceMesh& mesh, const Shape& global) const {
  Shape local = global;
  for (size_t i = 0; i < placements.size() && i < mesh.axes().size(); ++i) {
    const Placement& p = placements[i];
    if (!p.is_shard() || p.dim < 0 || p.dim >= static_cast<int64_t>(local.size())) continue;
    int64_t n = p.blocks(mesh.axes()[i].size);
    if (local[p.dim] % n != 0) return false;
    local[p.dim] /= n;
  }
  return true;
}

Shape Sharding::local_shape(const DeviceMesh& mesh, const Shape& global) const {
  Shape local = global;
  for (size_t i = 0; i < placements.size(); ++i)
    if (placements[i].is_shard()) {
      int64_t& d = local[placements[i].dim];
      d = block_size(d, placements[i].blocks(mesh.axes()[i].size), 0);
    }
  return local;
}

Shape Sharding::local_shape(const DeviceMesh& mesh, const Shape& global, int64_t rank) const {
  Shape local = global;
  std::vector<int64_t> c = mesh.coords(rank);
  for (size_t i = 0; i < placements.size(); ++i) {
    const Placement& p = placements[i];
    if (!p.is_shard()) continue;
    int64_t n = mesh.axes()[i].size;
    int64_t& d = local[p.dim];
    d = block_size(d, p.blocks(n), p.block_of(c[i], n));
  }
  return local;
}

Sharding Sharding::parse(const std::string& text) {
  if (text.size() < 2 || text.front() != '[' || text.back() != ']')
    TESSERA_THROW(ErrorKind::kParse, "bad sharding '" << text << "': expected [R,S(1),S(1/4),P]");
  Sharding s;
  std::string body = text.substr(1, text.size() - 2);
  size_t pos = 0;
  while (!body.empty() && pos <= body.size()) {
    size_t comma = body.find(',', pos);
    std::string item = body.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    if (item == "R") s.placements.push_back(Placement::replicate());
    else if (item == "P") s.placements.push_back(Placement::partial());
    else if (item.size() > 3 && item.rfind("S(", 0) == 0 && item.back() == ')') {
      try {
        std::string digits = item.substr(2, item.size() - 3);
        size_t slash = digits.find('/');
        size_t used = 0;
        int64_t dim = std::stoll(digits.substr(0, slash), &used);
        if (used != digits.substr(0, slash).size()) throw std::invalid_argument("trailing characters");
        int64_t groups = 0;
        if (slash != std::string::npos) {
          std::string g = digits.substr(slash + 1);
          groups = std::stoll(g, &used);
          if (used != g.size() || groups < 2) throw std::invalid_argument("bad groups");
        }
        s.placements.push_back(Placement::shard_groups(dim, groups));
      } catch (const std::exception&) {
        TESSERA_THROW(ErrorKind::kParse, "bad placement '" << item << "' in sharding '" << text << "'");
      }
    } else {
      TESSERA_THROW(ErrorKind::kParse, "bad placement '" << item << "' in sharding '" << text << "'");
    }
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return s;
}

std::string Sharding::str() const {
  std::string s = "[";
  for (size_t i = 0; i < placements.size(); ++i) {
    if (i) s += ",";
    s += placements[i].str();
  }
  return s + "]";
}

uint64_t Sharding::hash() const {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const Placement& p : placements) {
    h = (h ^ static_cast<uint64_t>(p.kind)) * 1099511628211ull;
    h = (h ^ static_cast<uint64_t>(p.dim)) * 1099511628211ull;
    h = (h ^ static_cast<uint64_t>(p.groups)) * 1099511628211ull;
  }
  return h;
}

}  // namespace tessera
