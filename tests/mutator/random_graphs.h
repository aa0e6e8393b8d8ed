// A seeded generator of small random graphs made of the ops the rules match:
// shared-input MatMuls and Convs, transpose and reshape chains, sums of
// products. Every rule should find something to rewrite in some of them.
#pragma once

#include <random>

#include "tests/mutator/mutator_test_util.h"

namespace tessera::mutator::testing {

inline Graph random_graph(uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint64_t>(n)); };
  Graph g;
  g.name = "random_" + std::to_string(seed);
  int w = 0;
  auto wname = [&] { return std::to_string(w++).insert(0, 1, 'w'); };
  std::vector<ValueId> pool = {g.add_input("x", {DType::kF32, {2, 4, 6}})};
  ValueId img = g.add_input("img", {DType::kF32, {1, 3, 6, 6}});
  ValueId img2 = g.add_input("img2", {DType::kF32, {1, 3, 6, 6}});
  std::vector<ValueId> leaves;
  for (int step = 0; step < 6; ++step) {
    ValueId v = pool[pick(static_cast<int>(pool.size()))];
    const Shape s = g.type(v).shape;
    switch (pick(6)) {
      case 0: {  // MatMuls sharing v, sometimes with biases
        int k = 2 + pick(2);
        for (int i = 0; i < k; ++i) {
          int64_t n = 2 + pick(4);
          ValueId m = g.add(OpKind::kMatMul, {v, weight(g, wname(), {s.back(), n}, rng)});
          if (pick(2)) m = g.add(OpKind::kAdd, {m, weight(g, wname(), {n}, rng)});
          pool.push_back(m);
        }
        break;
      }
      case 1: {  // a transpose chain
        std::vector<int64_t> p(s.size());
        for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<int64_t>(i);
        std::shuffle(p.begin(), p.end(), rng);
        Attrs a;
        a.set("perm", p);
        ValueId t = g.add(OpKind::kTranspose, {v}, a);
        if (pick(2)) {
          std::vector<int64_t> q = p;
          if (pick(2)) std::shuffle(q.begin(), q.end(), rng);
          else for (size_t i = 0; i < p.size(); ++i) q[p[i]] = static_cast<int64_t>(i);  // the inverse
          Attrs b;
          b.set("perm", q);
          t = g.add(OpKind::kTranspose, {t}, b);
        }
        pool.push_back(t);
        break;
      }
      case 2: {  // a reshape chain: flatten the last two dims, maybe restore
        if (s.size() < 2) break;
        if (pick(3) == 0) {  // a no-op reshape
          Attrs same;
          same.set("shape", std::vector<int64_t>(s.begin(), s.end()));
          pool.push_back(g.add(OpKind::kReshape, {v}, same));
          break;
        }
        Shape flat(s.begin(), s.end() - 2);
        flat.push_back(s[s.size() - 2] * s.back());
        Attrs a;
        a.set("shape", std::vector<int64_t>(flat.begin(), flat.end()));
        ValueId r = g.add(OpKind::kReshape, {v}, a);
        if (pick(2)) {
          Attrs b;
          b.set("shape", std::vector<int64_t>(s.begin(), s.end()));
          r = g.add(OpKind::kReshape, {r}, b);
        }
        pool.push_back(r);
        break;
      }
      case 3: {  // A@B + A@C
        int64_t n = 3;
        ValueId a = g.add(OpKind::kMatMul, {v, weight(g, wname(), {s.back(), n}, rng)});
        ValueId b = g.add(OpKind::kMatMul, {v, weight(g, wname(), {s.back(), n}, rng)});
        pool.push_back(g.add(OpKind::kAdd, {a, b}));
        break;
      }
      case 4: {  // Convs sharing an image, or parallel Convs on two images
        bool shared = pick(2);
        for (int i = 0; i < 2; ++i) {
          ValueId b = pick(2) ? weight(g, wname(), {2}, rng) : kNoValue;
          std::vector<ValueId> ins = {shared || i == 0 ? img : img2, weight(g, wname(), {2, 3, 3, 3}, rng)};
          if (b != kNoValue) ins.push_back(b);
          leaves.push_back(g.add(OpKind::kConv, ins, conv_attrs(3, 1, 1)));
        }
        break;
      }
      default: {  // Add of two transposes with one perm
        std::vector<int64_t> p(s.size());
        for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<int64_t>(s.size() - 1 - i);
        Attrs a;
        a.set("perm", p);
        ValueId t1 = g.add(OpKind::kTranspose, {v}, a);
        ValueId t2 = g.add(OpKind::kTranspose, {g.add(OpKind::kNeg, {v})}, a);
        pool.push_back(g.add(OpKind::kAdd, {t1, t2}));
      }
    }
  }
  // Scalar scales of some unread results (attention's 1/sqrt(d)), drawn from
  // a second generator so the structure above stays what it was per seed.
  std::mt19937_64 rng2(seed * 7919 + 1);
  auto users = g.users();
  std::vector<ValueId> outs;
  for (ValueId v : pool) {
    if (!users[v].empty()) continue;
    if (g.value(v).producer >= 0 && rng2() % 2) {
      Tensor c(DType::kF32, {});
      c.set_double(0, 0.125 * static_cast<double>(1 + rng2() % 4));
      ValueId k = g.add_constant(wname(), c);
      v = g.add(rng2() % 2 ? OpKind::kMul : OpKind::kDiv, {v, k});
    }
    outs.push_back(v);
  }
  for (ValueId v : leaves) outs.push_back(v);
  g.set_outputs(outs);
  return g;
}

}  // namespace tessera::mutator::testing
