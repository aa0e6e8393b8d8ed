#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "graph/cache_dir.h"
#include "graph/error.h"
#include "verifier/proofs.h"

namespace tessera::verifier {

namespace {
constexpr int kCacheFormat = 1;

ProofStatus status_from_name(const std::string& s) {
  for (ProofStatus st : {ProofStatus::kProven, ProofStatus::kRefuted, ProofStatus::kTimeout, ProofStatus::kError})
    if (s == proof_status_name(st)) return st;
  return ProofStatus::kError;
}
}  // namespace

std::string default_proof_cache_path() { return (std::filesystem::path(user_cache_dir()) / "proofs.json").string(); }

ProofCache::ProofCache(std::string path) : path_(std::move(path)) {
  std::ifstream in(path_);
  if (!in) return;  // no cache yet
  nlohmann::json j;
  try {
    in >> j;
  } catch (const nlohmann::json::exception& e) {
    TESSERA_THROW(ErrorKind::kParse, "proof cache '" << path_ << "' is not valid JSON: " << e.what());
  }
  if (j.value("format", 0) != kCacheFormat) return;  // another format: start over
  for (const auto& e : j.value("proofs", nlohmann::json::array())) {
    ProofResult r;
    r.name = e.value("name", "");
    r.version = e.value("version", 0);
    r.status = status_from_name(e.value("status", ""));
    r.seconds = e.value("seconds", 0.0);
    r.detail = e.value("detail", "");
    if (!r.name.empty()) entries_[r.name] = r;
  }
}

const ProofResult* ProofCache::find(const std::string& name, int version) const {
  auto it = entries_.find(name);
  if (it == entries_.end() || it->second.version != version) return nullptr;
  return &it->second;
}

void ProofCache::store(const ProofResult& r) {
  if (r.status != ProofStatus::kProven && r.status != ProofStatus::kRefuted) return;
  entries_[r.name] = r;
}

void ProofCache::save() const {
  nlohmann::json proofs = nlohmann::json::array();
  for (const auto& [name, r] : entries_)
    proofs.push_back({{"name", name}, {"version", r.version}, {"status", proof_status_name(r.status)},
                      {"seconds", r.seconds}, {"detail", r.detail}});
  nlohmann::json j = {{"format", kCacheFormat}, {"proofs", proofs}};
  std::string tmp = path_ + ".tmp";
  {
    std::ofstream out(tmp);
    if (!out) TESSERA_THROW(ErrorKind::kIo, "cannot write proof cache '" << tmp << "'");
    out << j.dump(2) << "\n";
    if (!out) TESSERA_THROW(ErrorKind::kIo, "cannot write proof cache '" << tmp << "'");
  }
  if (std::rename(tmp.c_str(), path_.c_str()) != 0)
    TESSERA_THROW(ErrorKind::kIo, "cannot replace proof cache '" << path_ << "'");
}

}  // namespace tessera::verifier
