#include "verifier/z3_tensor.h"

#include <chrono>
#include <initializer_list>
#include <set>

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

z3::func_decl Enc::int_tensor(const std::string& name, int rank) {
  z3::sort_vector domain(c_);
  for (int i = 0; i < rank; ++i) domain.push_back(c_.int_sort());
  return c_.function(name.c_str(), domain, c_.int_sort());
}

namespace {

// forall vars. body, instantiated only on `trigger`'s instances.
z3::expr forall_on(z3::context& c, const z3::expr_vector& vars, const z3::expr& trigger, const z3::expr& body) {
  std::vector<Z3_app> bound;
  for (unsigned i = 0; i < vars.size(); ++i) bound.push_back(reinterpret_cast<Z3_app>(static_cast<Z3_ast>(vars[i])));
  Z3_ast t = trigger;
  Z3_pattern pattern = Z3_mk_pattern(c, 1, &t);
  Z3_ast q = Z3_mk_forall_const(c, 0, static_cast<unsigned>(bound.size()), bound.data(), 1, &pattern, body);
  c.check_error();
  return z3::expr(c, q);
}

}  // namespace

z3::func_decl Enc::view(const z3::func_decl& global, const std::string& name,
                        const std::function<Index(const Index&)>& map,
                        const std::function<z3::expr(const Index&)>& in_domain) {
  z3::sort_vector domain(c_);
  z3::expr_vector vars(c_);
  Index idx;
  for (unsigned i = 0; i < global.arity(); ++i) {
    domain.push_back(global.domain(i));
    idx.push_back(c_.int_const((name + "!" + std::to_string(i)).c_str()));
    vars.push_back(idx.back());
  }
  z3::func_decl local = c_.function(name.c_str(), domain, global.range());
  z3::expr_vector source(c_);
  for (const z3::expr& x : map(idx)) source.push_back(x);
  z3::expr app = local(vars);
  guards_.push_back(forall_on(c_, vars, app, z3::implies(in_domain(idx), app == global(source))));
  return local;
}

z3::func_decl Enc::block(const z3::func_decl& global, const std::string& name, int dim, const z3::expr& offset,
                         const z3::expr& size) {
  return view(
      global, name,
      [&](const Index& idx) {
        Index src = idx;
        bool zero = offset.is_numeral() && offset.get_numeral_int64() == 0;
        src[dim] = zero ? idx[dim] : offset + idx[dim];
        return src;
      },
      [&](const Index& idx) { return in_range(idx[dim], size); });
}

z3::func_decl Enc::rank_blocks(const z3::func_decl& global, const std::string& name, int dim, const z3::expr& n,
                               const z3::expr& S) {
  z3::sort_vector domain(c_);
  z3::expr_vector vars(c_), source(c_);
  z3::expr r = c_.int_const((name + "!r").c_str());
  domain.push_back(c_.int_sort());
  vars.push_back(r);
  for (unsigned i = 0; i < global.arity(); ++i) {
    domain.push_back(global.domain(i));
    z3::expr v = c_.int_const((name + "!" + std::to_string(i)).c_str());
    vars.push_back(v);
    source.push_back(static_cast<int>(i) == dim ? r * S + v : v);
  }
  z3::func_decl local = c_.function(name.c_str(), domain, global.range());
  z3::expr app = local(vars);
  z3::expr in_domain = in_range(r, n) && in_range(vars[dim + 1], S);
  guards_.push_back(forall_on(c_, vars, app, z3::implies(in_domain, app == global(source))));
  return local;
}

std::vector<z3::func_decl> Enc::partial(const z3::func_decl& global, const std::string& name, int n) {
  z3::sort_vector domain(c_);
  z3::expr_vector vars(c_);
  for (unsigned i = 0; i < global.arity(); ++i) {
    domain.push_back(global.domain(i));
    vars.push_back(c_.int_const((name + "!" + std::to_string(i)).c_str()));
  }
  std::vector<z3::func_decl> locals;
  z3::expr total = c_.real_val(0);
  for (int r = 0; r < n; ++r) {
    locals.push_back(c_.function((name + std::to_string(r)).c_str(), domain, global.range()));
    total = r == 0 ? locals.back()(vars) : total + locals.back()(vars);
  }
  z3::expr app = global(vars);
  guards_.push_back(forall_on(c_, vars, app, app == total));
  return locals;
}

z3::expr Enc::sum(const z3::expr& n, const std::function<z3::expr(const z3::expr&)>& body) {
  std::string k_name = "k!" + std::to_string(lambda_counter_++);
  z3::expr k = c_.int_const(k_name.c_str());
  // The length in normal form, so that sums over S + S and 2 * S are one
  // term and meet by congruence instead of through arithmetic (Z3 does not
  // equate lambdas whose guards differ only so: no answer in 60 s, measured).
  z3::expr len = n.simplify();
  z3::expr summand = z3::lambda(k, guarded(k, len, body(k)));
  // Z3 keeps a bound variable's name in the term, so two sums built alike
  // would be different terms, equal only through array extensionality
  // (row-parallel MatMul on 4 ranks: no answer in 60 s; measured). Renaming
  // every bound variable to "k" makes them one term (de Bruijn indices keep
  // nested sums apart).
  Z3_symbol name = Z3_mk_string_symbol(c_, "k");
  Z3_sort sort = Z3_get_sort(c_, k);
  Z3_ast canonical = Z3_mk_lambda(c_, 1, &sort, &name, Z3_get_quantifier_body(c_, summand));
  c_.check_error();
  return sum_(z3::expr(c_, canonical), len);
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
  std::string k_name = "split!" + std::to_string(lambda_counter_++);
  z3::expr k = c_.int_const(k_name.c_str());
  side_goals_.push_back({z3::implies(in_range(k, b), shifted(k) == f(k + a)), 0});
  axioms_.push_back(sum(a + b, f) == sum(a, f) + sum(b, shifted));
}

z3::expr Enc::atomize(const z3::expr& e) {
  z3::expr_vector from(c_), to(c_);
  std::set<unsigned> seen;
  std::function<void(const z3::expr&)> visit = [&](const z3::expr& x) {
    if (!seen.insert(x.id()).second || !x.is_app()) return;  // binders are left alone
    if (z3::eq(x.decl(), sum_)) {
      auto it = atoms_.find(x.id());
      if (it == atoms_.end()) {
        z3::expr atom = c_.real_const(("sum!" + std::to_string(atoms_.size())).c_str());
        it = atoms_.emplace(x.id(), std::make_pair(x, atom)).first;
      }
      from.push_back(x);
      to.push_back(it->second.second);
      return;
    }
    for (unsigned i = 0; i < x.num_args(); ++i) visit(x.arg(i));
  };
  // Simplified first, with sums of terms sorted, so that sums that differ
  // only in the order of an index's terms (S + h, h + S) become one term
  // and so one atom.
  z3::params sorted(c_);
  sorted.set("som", true);
  sorted.set("sort_sums", true);
  z3::expr simple = e.simplify(sorted);
  visit(simple);
  return from.empty() ? simple : simple.substitute(from, to);
}

void Enc::assume_ext(const z3::expr& n, const std::function<z3::expr(const z3::expr&)>& f,
                     const std::function<z3::expr(const z3::expr&)>& g, const z3::expr& cond,
                     const std::optional<z3::expr>& at) {
  z3::expr k = at ? *at : c_.int_const(("ext!" + std::to_string(lambda_counter_++)).c_str());
  side_goals_.push_back({z3::implies(cond && in_range(k, n), f(k) == g(k)), at ? axioms_.size() : 0});
  axioms_.push_back(z3::implies(cond, sum(n, f) == sum(n, g)));
}

void Enc::assume_schema(int arity, const std::function<z3::expr(const std::vector<z3::expr>&)>& fact,
                        const std::vector<std::vector<z3::expr>>& instances) {
  std::vector<z3::expr> params;
  for (int i = 0; i < arity; ++i)
    params.push_back(c_.int_const(("schema!" + std::to_string(lambda_counter_++)).c_str()));
  side_goals_.push_back({fact(params), 0});
  for (const std::vector<z3::expr>& at : instances) axioms_.push_back(fact(at));
}

void Enc::assume_blocks(int n, const z3::expr& S, const std::function<z3::expr(const z3::expr&)>& f) {
  // Block b's summand k -> f(b * S + k); block 0's is f itself, so that the
  // root of the tree is the caller's Sum(f, n * S).
  auto block_fn = [&](int b) -> std::function<z3::expr(const z3::expr&)> {
    if (b == 0) return f;
    return [this, &f, &S, b](const z3::expr& k) { return f(rank_offset(*this, b, S) + k); };
  };
  auto length = [&](int count) { return count == 1 ? S : num(count) * S; };
  std::function<void(int, int)> split = [&](int lo, int count) {
    if (count == 1) return;
    int half = count / 2;
    assume_split(length(half), length(count - half), block_fn(lo), block_fn(lo + half));
    split(lo, half);
    split(lo + half, count - half);
  };
  split(0, n);
}

z3::expr rank_offset(Enc& e, int r, const z3::expr& S) { return r == 0 ? e.num(0) : r == 1 ? S : e.num(r) * S; }

z3::expr local_index(Enc& e, int r, const z3::expr& S, const z3::expr& p) {
  return r == 0 ? p : p - rank_offset(e, r, S);
}

z3::expr all_gather(Enc& e, int n, const z3::expr& size, const z3::expr& p,
                    const std::function<z3::expr(int r, const z3::expr& local)>& part) {
  z3::expr out = part(n - 1, local_index(e, n - 1, size, p));
  for (int r = n - 2; r >= 0; --r)
    out = z3::ite(p < rank_offset(e, r + 1, size), part(r, local_index(e, r, size, p)), out);
  return out;
}

z3::expr all_gather_ranks(const z3::expr& size, const z3::expr& p,
                          const std::function<z3::expr(const z3::expr& r, const z3::expr& local)>& part) {
  return part(p / size, p % size);
}

z3::expr all_reduce(Enc& e, int n, const std::function<z3::expr(int r)>& part) {
  z3::expr out = part(0);
  for (int r = 1; r < n; ++r) out = out + part(r);
  return out;
}

std::vector<z3::func_decl> blocks(Enc& e, const z3::func_decl& global, const std::string& name, int dim, int n,
                                  const z3::expr& S) {
  std::vector<z3::func_decl> out;
  for (int r = 0; r < n; ++r)
    out.push_back(e.block(global, name + "_" + std::to_string(r), dim, rank_offset(e, r, S), S));
  return out;
}

void add_per_rank_count(std::vector<Obligation>& out, const std::string& name, int version,
                        const std::string& statement, const std::function<z3::expr(Enc&, int)>& claim) {
  for (int n : kRankCounts)
    out.push_back({{name + "-" + std::to_string(n), version, "sharding",
                    statement + " on " + std::to_string(n) + " ranks"},
                   [claim, n](Enc& e) { return claim(e, n); }});
}

z3::expr in_block(Enc& e, int r, const z3::expr& S, const z3::expr& p) {
  return p >= rank_offset(e, r, S) && p < rank_offset(e, r + 1, S);
}

void assume_rank_blocks(Enc& e, int n, const z3::expr& S, const std::function<z3::expr(const z3::expr&)>& global,
                        const std::function<std::function<z3::expr(const z3::expr&)>(int r)>& local) {
  e.assume_blocks(n, S, global);
  for (int r = 0; r < n; ++r) {
    // Block r's summand exactly as assume_blocks wrote it.
    std::function<z3::expr(const z3::expr&)> block = global;
    if (r > 0) block = [&, r](const z3::expr& k) { return global(rank_offset(e, r, S) + k); };
    e.assume_ext(S, block, local(r), e.ctx().bool_val(true));
  }
}

std::function<z3::expr(const z3::expr&)> conv3_term(Enc& e, const Fn2& w, const z3::expr& o, const z3::expr& len,
                                                    const Fn2& x) {
  return [&e, w, o, len, x](const z3::expr& r) {
    z3::expr c = r / 3, k = r % 3, pos = o - 1 + k;
    return e.guarded(pos, len, x(c, pos)) * w(c, k);
  };
}

z3::expr conv3(Enc& e, const z3::expr& C, const Fn2& w, const z3::expr& o, const z3::expr& len, const Fn2& x) {
  return e.sum(C * 3, conv3_term(e, w, o, len, x));
}

}  // namespace z3enc

namespace {

using z3enc::Obligation;

// Every obligation in one list, in the order of the parts.
std::vector<Obligation> collect(std::initializer_list<std::vector<Obligation> (*)()> parts) {
  std::vector<Obligation> v;
  for (auto* part : parts) {
    std::vector<Obligation> more = part();
    v.insert(v.end(), more.begin(), more.end());
  }
  return v;
}

const std::vector<Obligation>& registry() {
  static const std::vector<Obligation> all =
      collect({&z3enc::rule_obligations, &z3enc::sharding_obligations, &z3enc::op_sharding_obligations,
               &z3enc::reshard_obligations, &z3enc::any_rank_count_obligations, &z3enc::correction_obligations,
               &z3enc::spatial_obligations});
  return all;
}

const std::vector<Obligation>& wrong_registry() {
  static const std::vector<Obligation> all =
      collect({&z3enc::wrong_rule_obligations, &z3enc::wrong_sharding_obligations,
               &z3enc::wrong_op_sharding_obligations, &z3enc::wrong_reshard_obligations,
               &z3enc::wrong_any_rank_count_obligations, &z3enc::wrong_correction_obligations,
               &z3enc::wrong_spatial_obligations});
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
    // checks, no answer within 60 s as one; measured). The claim is checked
    // with every axiom instance, a side goal with those it may use.
    std::vector<std::pair<z3::expr, size_t>> goals{{claim, enc.axioms().size()}};
    for (const z3enc::Enc::SideGoal& g : enc.side_goals()) goals.emplace_back(g.goal, g.axioms);
    r.status = ProofStatus::kProven;
    for (size_t gi = 0; gi < goals.size(); ++gi) {
      const auto& [goal, n_axioms] = goals[gi];
      double spent_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      unsigned left = spent_ms >= timeout_ms ? 1u : static_cast<unsigned>(timeout_ms - spent_ms);
      z3::solver s(c);
      z3::params p(c);
      p.set("timeout", left);
      if (rlimit) p.set("rlimit", rlimit);  // deterministic budget, unlike the clock
      s.set(p);
      auto atomized = [&](const z3::expr& x) { return enc.sums_are_atoms() ? enc.atomize(x) : x; };
      for (const z3::expr& g : enc.guards()) s.add(g);
      for (size_t a = 0; a < n_axioms; ++a) s.add(atomized(enc.axioms()[a]));
      s.add(!atomized(goal));
      z3::check_result res = s.check();
      if (res == z3::unsat) continue;
      if (res == z3::sat) {
        r.status = ProofStatus::kRefuted;
        std::string m = s.get_model().to_string();
        r.detail = std::string(gi == 0 ? "" : "side goal fails; ") + "counterexample: " + m.substr(0, 400);
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
