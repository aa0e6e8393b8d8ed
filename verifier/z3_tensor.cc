#include "verifier/z3_tensor.h"

#include <chrono>

#include "graph/error.h"

namespace tessera::verifier {
namespace z3enc {

Enc::Enc(z3::context& c)
    : c_(c), sum_(c.function("Sum", c.array_sort(c.int_sort(), c.real_sort()), c.int_sort(), c.real_sort())) {}

z3::expr Enc::dim(const std::string& name) {
  z3::expr d = c_.int_const(name.c_str());
  guards_.push_back(d >= 1);
  return d;
}

z3::expr Enc::param(const std::string& name) {
  z3::expr d = c_.int_const(name.c_str());
  guards_.push_back(d >= 0);
  return d;
}

z3::func_decl Enc::tensor(const std::string& name, int rank) {
  z3::sort_vector domain(c_);
  for (int i = 0; i < rank; ++i) domain.push_back(c_.int_sort());
  return c_.function(name.c_str(), domain, c_.real_sort());
}

z3::func_decl Enc::real_fn(const std::string& name, int arity) {
  z3::sort_vector domain(c_);
  for (int i = 0; i < arity; ++i) domain.push_back(c_.real_sort());
  return c_.function(name.c_str(), domain, c_.real_sort());
}

z3::expr Enc::sum(const z3::expr& n, const std::function<z3::expr(const z3::expr&)>& body) {
  std::string k_name = "k!" + std::to_string(lambda_counter_++);
  z3::expr k = c_.int_const(k_name.c_str());
  z3::expr summand = z3::lambda(k, guarded(k, n, body(k)));
  return sum_(summand, n);
}

void Enc::assume_linear(const z3::expr& n, const std::function<z3::expr(const z3::expr&)>& f,
                        const std::function<z3::expr(const z3::expr&)>& g) {
  axioms_.push_back(sum(n, [&](const z3::expr& k) { return f(k) + g(k); }) == sum(n, f) + sum(n, g));
}

void Enc::assume_scale(const z3::expr& n, const z3::expr& c, const std::function<z3::expr(const z3::expr&)>& f) {
  axioms_.push_back(sum(n, [&](const z3::expr& k) { return c * f(k); }) == c * sum(n, f));
}

void Enc::assume_split(const z3::expr& a, const z3::expr& b, const std::function<z3::expr(const z3::expr&)>& f) {
  axioms_.push_back(sum(a + b, f) == sum(a, f) + sum(b, [&](const z3::expr& k) { return f(k + a); }));
}

void Enc::assume_split(const z3::expr& a, const z3::expr& b, const std::function<z3::expr(const z3::expr&)>& f,
                       const std::function<z3::expr(const z3::expr&)>& shifted) {
  axioms_.push_back(sum(a + b, f) == sum(a, f) + sum(b, shifted));
  std::string k_name = "split!" + std::to_string(lambda_counter_++);
  z3::expr k = c_.int_const(k_name.c_str());
  side_goals_.push_back(z3::implies(in_range(k, b), shifted(k) == f(k + a)));
}

}  // namespace z3enc

namespace {

using z3enc::Obligation;

const std::vector<Obligation>& registry() {
  static const std::vector<Obligation> all = [] {
    std::vector<Obligation> v = z3enc::rule_obligations();
    for (auto* part : {&z3enc::sharding_obligations, &z3enc::correction_obligations}) {
      std::vector<Obligation> more = (*part)();
      v.insert(v.end(), more.begin(), more.end());
    }
    return v;
  }();
  return all;
}

const std::vector<Obligation>& wrong_registry() {
  static const std::vector<Obligation> all = [] {
    std::vector<Obligation> v = z3enc::wrong_rule_obligations();
    std::vector<Obligation> more = z3enc::wrong_sharding_obligations();
    v.insert(v.end(), more.begin(), more.end());
    return v;
  }();
  return all;
}

std::vector<ObligationInfo> infos(const std::vector<Obligation>& obs) {
  std::vector<ObligationInfo> out;
  for (const Obligation& o : obs) out.push_back(o.info);
  return out;
}

ProofResult run_proof(const Obligation& ob, unsigned timeout_ms, unsigned rlimit) {
  ProofResult r;
  r.name = ob.info.name;
  r.version = ob.info.version;
  auto start = std::chrono::steady_clock::now();
  try {
    z3::context c;
    z3enc::Enc enc(c);
    z3::expr claim = ob.claim(enc);
    // The claim and each side goal are checked one at a time: their
    // conjunction is valid iff each is, and Z3 4.8.12 decides the parts far
    // faster than the whole (row-parallel MatMul on 4 ranks: 0.35 s in four
    // checks, no answer within 60 s as one; measured). Side goals are about
    // summands only and are checked without the Sum axioms.
    std::vector<std::pair<z3::expr, bool>> goals{{claim, true}};
    for (const z3::expr& g : enc.side_goals()) goals.emplace_back(g, false);
    r.status = ProofStatus::kProven;
    for (const auto& [goal, with_axioms] : goals) {
      double spent_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      unsigned left = spent_ms >= timeout_ms ? 1u : static_cast<unsigned>(timeout_ms - spent_ms);
      z3::solver s(c);
      z3::params p(c);
      p.set("timeout", left);
      if (rlimit) p.set("rlimit", rlimit);  // deterministic budget, unlike the clock
      s.set(p);
      for (const z3::expr& g : enc.guards()) s.add(g);
      if (with_axioms)
        for (const z3::expr& a : enc.axioms()) s.add(a);
      s.add(!goal);
      z3::check_result res = s.check();
      if (res == z3::unsat) continue;
      if (res == z3::sat) {
        r.status = ProofStatus::kRefuted;
        std::string m = s.get_model().to_string();
        r.detail = std::string(with_axioms ? "" : "side goal fails; ") + "counterexample: " + m.substr(0, 400);
      } else {
        std::string why = s.reason_unknown();
        bool budget = why == "timeout" || why == "canceled" || why.find("resource") != std::string::npos;
        r.status = budget ? ProofStatus::kTimeout : ProofStatus::kError;
        r.detail = "z3: " + s.reason_unknown();
      }
      break;
    }
  } catch (const z3::exception& e) {
    r.status = ProofStatus::kError;
    r.detail = std::string("z3 exception: ") + e.msg();
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

}  // namespace

const char* proof_status_name(ProofStatus s) {
  switch (s) {
    case ProofStatus::kProven: return "proven";
    case ProofStatus::kRefuted: return "refuted";
    case ProofStatus::kTimeout: return "timeout";
    case ProofStatus::kError: return "error";
  }
  return "?";
}

const std::vector<ObligationInfo>& proof_obligations() {
  static const std::vector<ObligationInfo> v = infos(registry());
  return v;
}

const std::vector<ObligationInfo>& wrong_obligations() {
  static const std::vector<ObligationInfo> v = infos(wrong_registry());
  return v;
}

ProofResult prove(const std::string& name, unsigned timeout_ms, unsigned rlimit) {
  for (const auto* list : {&registry(), &wrong_registry()})
    for (const Obligation& o : *list)
      if (o.info.name == name) return run_proof(o, timeout_ms, rlimit);
  TESSERA_THROW(ErrorKind::kUsage, "no proof obligation named '" << name << "'");
}

std::vector<ProofResult> prove_all(ProofCache* cache, unsigned timeout_ms) {
  std::vector<ProofResult> out;
  for (const Obligation& o : registry()) {
    if (cache)
      if (const ProofResult* hit = cache->find(o.info.name, o.info.version)) {
        ProofResult r = *hit;
        r.cached = true;
        out.push_back(r);
        continue;
      }
    ProofResult r = run_proof(o, timeout_ms, 0);
    if (cache) cache->store(r);
    out.push_back(r);
  }
  if (cache) cache->save();
  return out;
}

}  // namespace tessera::verifier
