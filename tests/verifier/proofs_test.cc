#include "verifier/proofs.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "graph/error.h"

namespace tessera::verifier {
namespace {

std::string temp_cache_path() {
  auto dir = std::filesystem::temp_directory_path() /
             ("tessera_proofs_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
              ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return (dir / "proofs.json").string();
}

TEST(Proofs, ObligationsHaveUniqueKebabNamesAndCoverAllCategories) {
  std::set<std::string> names, categories;
  for (const ObligationInfo& o : proof_obligations()) {
    EXPECT_TRUE(names.insert(o.name).second) << "duplicate " << o.name;
    EXPECT_EQ(o.name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-"), std::string::npos) << o.name;
    EXPECT_FALSE(o.statement.empty()) << o.name;
    categories.insert(o.category);
  }
  EXPECT_EQ(categories, (std::set<std::string>{"rule", "sharding", "correction"}));
}

// Every sharding strategy is proven for each rank count: a family
// `shard-x` has the obligations shard-x-2, shard-x-4 and shard-x-8, and
// may have shard-x-n for a symbolic count.
TEST(Proofs, EveryShardingStrategyCoversEachRankCount) {
  std::map<std::string, std::set<std::string>> counts;  // family -> rank counts
  for (const ObligationInfo& o : proof_obligations()) {
    if (o.category != "sharding") continue;
    size_t dash = o.name.rfind('-');
    ASSERT_NE(dash, std::string::npos) << o.name;
    counts[o.name.substr(0, dash)].insert(o.name.substr(dash + 1));
    EXPECT_EQ(o.name.rfind("shard-", 0), 0u) << o.name;
    EXPECT_NE(o.statement.find("on " + o.name.substr(dash + 1) + " ranks"), std::string::npos) << o.statement;
  }
  EXPECT_GE(counts.size(), 23u);
  int symbolic = 0;
  for (auto [family, ns] : counts) {
    symbolic += ns.erase("n") > 0;
    EXPECT_EQ(ns, (std::set<std::string>{"2", "4", "8"})) << family;
  }
  EXPECT_GE(symbolic, 5);
}

TEST(Proofs, AllObligationsAreProvenAndCached) {
  std::string path = temp_cache_path();
  ProofCache cache(path);
  std::vector<ProofResult> results = prove_all(&cache);
  ASSERT_EQ(results.size(), proof_obligations().size());
  for (const ProofResult& r : results) {
    EXPECT_EQ(r.status, ProofStatus::kProven) << r.name << ": " << proof_status_name(r.status) << " " << r.detail;
    EXPECT_FALSE(r.cached) << r.name;
  }
  ASSERT_TRUE(std::filesystem::exists(path));
  ProofCache reloaded(path);
  std::vector<ProofResult> again = prove_all(&reloaded);
  for (const ProofResult& r : again) {
    EXPECT_TRUE(r.cached) << r.name;
    EXPECT_EQ(r.status, ProofStatus::kProven) << r.name;
  }
}

TEST(Proofs, CacheIsKeyedByVersion) {
  std::string path = temp_cache_path();
  {
    ProofCache cache(path);
    ProofResult r;
    r.name = "matmul-distribute-add";
    r.version = 999;
    r.status = ProofStatus::kProven;
    cache.store(r);
    cache.save();
  }
  ProofCache cache(path);
  EXPECT_NE(cache.find("matmul-distribute-add", 999), nullptr);
  EXPECT_EQ(cache.find("matmul-distribute-add", 1), nullptr);
}

TEST(Proofs, TimeoutIsReportedNotCached) {
  // A resource limit of 1 stops Z3 before it decides anything, whatever the
  // machine's speed (a clock timeout would make the test timing-dependent).
  ProofResult r = prove("shard-megatron-mlp-2", 20000, 1);
  EXPECT_EQ(r.status, ProofStatus::kTimeout) << r.detail;
  ProofCache cache(temp_cache_path());
  cache.store(r);
  EXPECT_EQ(cache.find(r.name, r.version), nullptr);
}

TEST(Proofs, UnknownNameIsUsageError) {
  EXPECT_THROW(prove("no-such-rule"), Error);
}

TEST(Proofs, CorruptCacheIsParseError) {
  std::string path = temp_cache_path();
  std::ofstream(path) << "{ not json";
  EXPECT_THROW(ProofCache cache(path), Error);
}

}  // namespace
}  // namespace tessera::verifier
