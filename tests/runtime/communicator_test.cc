// InProcessWorld (runtime/communicator.cc): the primitives on flat blocks,
// blocking and started (waited on in any order, mixed with blocking ones),
// and faults: a rank that throws, or whose program ends early, or makes
// another collective, must not leave the others waiting. Every fault test ends by itself
// (no timeouts involved): a hang would be the failure, caught by CTest's
// TIMEOUT.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "graph/error.h"
#include "runtime/communicator.h"

namespace tessera::runtime {
namespace {

TEST(InProcessWorldTest, PrimitivesOnFlatBlocks) {
  InProcessWorld world(DeviceMesh::parse("dp=2,tp=2"));
  std::vector<std::vector<float>> reduced(4), scattered(4);
  std::vector<std::vector<int32_t>> gathered(4), exchanged(4);
  world.run([&](int64_t r) {
    Communicator& c = *world.communicator(r);
    std::vector<float> x = {float(r), float(10 * r), 1.0f, -1.0f};
    reduced[r].resize(4);
    c.all_reduce_sum(1, DType::kF32, x.data(), reduced[r].data(), 4);  // over tp
    scattered[r].resize(2);
    c.reduce_scatter_sum(0, DType::kF32, x.data(), scattered[r].data(), 2);  // over dp
    int32_t mine = static_cast<int32_t>(100 + r);
    gathered[r].resize(2);
    c.all_gather(0, &mine, gathered[r].data(), sizeof mine);
    std::vector<int32_t> out = {static_cast<int32_t>(r * 10), static_cast<int32_t>(r * 10 + 1)};
    exchanged[r].resize(2);
    c.all_to_all(1, out.data(), exchanged[r].data(), sizeof(int32_t));
    c.all_reduce_sum(1, DType::kF32, x.data(), x.data(), 4);  // in place
    EXPECT_EQ(x, reduced[r]);
  });
  // dp=2,tp=2: ranks (dp, tp) = 0:(0,0) 1:(0,1) 2:(1,0) 3:(1,1).
  EXPECT_EQ(reduced[0], (std::vector<float>{1, 10, 2, -2}));    // ranks 0 + 1
  EXPECT_EQ(reduced[3], (std::vector<float>{5, 50, 2, -2}));    // ranks 2 + 3
  EXPECT_EQ(scattered[0], (std::vector<float>{2, 20}));         // ranks 0 + 2, block 0
  EXPECT_EQ(scattered[2], (std::vector<float>{2, -2}));         // ranks 0 + 2, block 1
  EXPECT_EQ(gathered[1], (std::vector<int32_t>{101, 103}));     // dp group of rank 1
  EXPECT_EQ(exchanged[2], (std::vector<int32_t>{20, 30}));      // block 0 of ranks 2 and 3
  EXPECT_EQ(exchanged[3], (std::vector<int32_t>{21, 31}));
}

// Rank 1 throws before its first collective while the others wait in it:
// they are woken, run() rethrows rank 1's own error, naming it.
TEST(InProcessWorldTest, FailedRankAbortsTheOthers) {
  InProcessWorld world(DeviceMesh::parse("tp=4"));
  std::atomic<int> stopped{0};
  std::string stopped_msg;
  std::mutex mu;
  try {
    world.run([&](int64_t r) {
      if (r == 1) TESSERA_THROW(ErrorKind::kIo, "cannot read rank1.onnx");
      float x = 1, y = 0;
      try {
        world.communicator(r)->all_reduce_sum(0, DType::kF32, &x, &y, 1);
      } catch (const Error& e) {
        ++stopped;
        std::lock_guard<std::mutex> lock(mu);
        stopped_msg = e.what();
        throw;
      }
      ADD_FAILURE() << "rank " << r << " finished a collective that rank 1 never entered";
    });
    FAIL() << "run() returned";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_NE(std::string(e.what()).find("rank 1: cannot read rank1.onnx"), std::string::npos) << e.what();
  }
  EXPECT_EQ(stopped.load(), 3);
  EXPECT_NE(stopped_msg.find("rank 1 failed: cannot read rank1.onnx"), std::string::npos) << stopped_msg;
}

// A rank that fails between collectives stops the ranks already waiting in
// the next one and those that arrive later; the world runs again afterwards.
TEST(InProcessWorldTest, FailureMidRunThenWorldRunsAgain) {
  InProcessWorld world(DeviceMesh::parse("tp=3"));
  auto body = [&](int64_t r, bool fail) {
    Communicator& c = *world.communicator(r);
    int64_t x = r, y = 0;
    for (int step = 0; step < 5; ++step) {
      if (fail && r == 2 && step == 3) throw std::runtime_error("out of memory at step 3");
      c.all_reduce_sum(0, DType::kI64, &x, &y, 1);
      EXPECT_EQ(y, 3);
    }
  };
  try {
    world.run([&](int64_t r) { body(r, true); });
    FAIL() << "run() returned";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInternal);
    EXPECT_NE(std::string(e.what()).find("rank 2: out of memory at step 3"), std::string::npos) << e.what();
  }
  world.run([&](int64_t r) { body(r, false); });
}

// Rank 0's program makes one collective fewer than the others': its end is
// a failure of the world, not a hang of ranks 1 and 2.
TEST(InProcessWorldTest, ProgramsWithDifferentCollectivesFail) {
  InProcessWorld world(DeviceMesh::parse("tp=3"));
  try {
    world.run([&](int64_t r) {
      std::vector<uint8_t> in(4, static_cast<uint8_t>(r)), out(12);
      for (int step = 0; step < (r == 0 ? 1 : 2); ++step) world.communicator(r)->all_gather(0, in.data(), out.data(), 4);
    });
    FAIL() << "run() returned";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0: its program ended"), std::string::npos) << e.what();
  }
}

// Started collectives give the blocking ones' results, bit for bit,
// whatever order each rank waits in: even ranks wait on their first start
// first, odd ranks last, with a blocking collective in flight with them.
TEST(InProcessWorldTest, StartedCollectivesMatchBlockingInAnyWaitOrder) {
  InProcessWorld world(DeviceMesh::parse("dp=2,tp=2"));
  auto input = [](int64_t r, int salt) {
    std::vector<float> x(6);
    for (size_t i = 0; i < x.size(); ++i) x[i] = 0.1f * static_cast<float>(r * 7 + salt) + 0.37f * static_cast<float>(i);
    return x;
  };
  using Out = std::vector<std::vector<float>>;
  Out blocking(12), started(12);
  world.run([&](int64_t r) {
    Communicator& c = *world.communicator(r);
    std::vector<float> a = input(r, 1), b = input(r, 2), d = input(r, 3);
    std::vector<float> &ar = blocking[r * 3], &ag = blocking[r * 3 + 1], &rs = blocking[r * 3 + 2];
    ar.resize(6), ag.resize(12), rs.resize(3);
    c.all_reduce_sum(1, DType::kF32, a.data(), ar.data(), 6);
    c.all_gather(0, b.data(), ag.data(), 24);
    c.reduce_scatter_sum(1, DType::kF32, d.data(), rs.data(), 3);
  });
  world.run([&](int64_t r) {
    Communicator& c = *world.communicator(r);
    std::vector<float> a = input(r, 1), b = input(r, 2), d = input(r, 3);
    std::vector<float> &ar = started[r * 3], &ag = started[r * 3 + 1], &rs = started[r * 3 + 2];
    ag.resize(12), rs.resize(3);
    int64_t first = c.start({Exchange::Kind::kAllReduceSum, 1, DType::kF32, a.data(), a.data(), 6});  // in place
    int64_t second = c.start({Exchange::Kind::kAllGather, 0, DType::kU8, b.data(), ag.data(), 24});
    std::fill(b.begin(), b.end(), -1.0f);  // the input is the world's once started
    c.reduce_scatter_sum(1, DType::kF32, d.data(), rs.data(), 3);
    c.progress();
    if (r % 2 == 0) {
      c.wait(first);
      c.wait(second);
    } else {
      c.wait(second);
      c.wait(first);
    }
    ar = a;
  });
  for (size_t i = 0; i < blocking.size(); ++i) EXPECT_EQ(started[i], blocking[i]) << "rank " << i / 3 << " result " << i % 3;
}

// Rank 0 has a started collective in flight while it makes a blocking one;
// rank 1 makes both blocking. Rank 1 leaves its first collective before
// rank 0 reads it (rank 0 reads when it waits, after the second), which
// only a rank that leaves a copy of its input behind can do.
TEST(InProcessWorldTest, BlockingCollectiveNeverWaitsForAPeersRead) {
  InProcessWorld world(DeviceMesh::parse("tp=2"));
  std::vector<int64_t> first(2), second(2);
  world.run([&](int64_t r) {
    Communicator& c = *world.communicator(r);
    int64_t x = 10 + r, y = 100 + r;
    if (r == 0) {
      int64_t h = c.start({Exchange::Kind::kAllReduceSum, 0, DType::kI64, &x, &first[0], 1});
      c.all_reduce_sum(0, DType::kI64, &y, &second[0], 1);
      c.wait(h);
    } else {
      c.all_reduce_sum(0, DType::kI64, &x, &first[1], 1);
      x = -1;  // its buffer is the caller's again
      c.all_reduce_sum(0, DType::kI64, &y, &second[1], 1);
    }
  });
  EXPECT_EQ(first, (std::vector<int64_t>{21, 21}));
  EXPECT_EQ(second, (std::vector<int64_t>{201, 201}));
}

// Rank 2 fails with a collective in flight: its peers complete that one
// (every rank posted it) and stop in the next; the world runs again.
TEST(InProcessWorldTest, RankFailingWithAStartedCollectiveStopsTheOthers) {
  InProcessWorld world(DeviceMesh::parse("tp=3"));
  std::atomic<int> completed{0}, stopped{0}, started{0};
  try {
    world.run([&](int64_t r) {
      Communicator& c = *world.communicator(r);
      float x = 1, y = 0;
      int64_t h = c.start({Exchange::Kind::kAllReduceSum, 0, DType::kF32, &x, &y, 1});
      // Rank 2 fails once every rank has posted: a rank that posts after a
      // failure stops there, and this test is about the collective in flight.
      ++started;
      if (r == 2) {
        while (started.load() < 3) std::this_thread::yield();
        throw Error(ErrorKind::kResource, "out of memory between start and wait");
      }
      c.wait(h);
      if (y == 3) ++completed;
      try {
        c.all_reduce_sum(0, DType::kF32, &x, &y, 1);
      } catch (const Error& e) {
        if (std::string(e.what()).find("rank 2 failed: out of memory") != std::string::npos) ++stopped;
        throw;
      }
    });
    FAIL() << "run() returned";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kResource);
    EXPECT_NE(std::string(e.what()).find("rank 2: out of memory between start and wait"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(completed.load(), 2);
  EXPECT_EQ(stopped.load(), 2);
  world.run([&](int64_t r) {
    float x = 1, y = 0;
    Communicator& c = *world.communicator(r);
    c.wait(c.start({Exchange::Kind::kAllReduceSum, 0, DType::kF32, &x, &y, 1}));
    EXPECT_EQ(y, 3);
  });
}

// Rank 1 fails before it starts the collective its peers wait on.
TEST(InProcessWorldTest, RankFailingBeforeItStartsWakesThoseWaiting) {
  InProcessWorld world(DeviceMesh::parse("tp=2"));
  try {
    world.run([&](int64_t r) {
      Communicator& c = *world.communicator(r);
      std::vector<uint8_t> in(8, 1), out(16);
      if (r == 1) throw std::runtime_error("cannot compile rank1.onnx");
      c.wait(c.start({Exchange::Kind::kAllGather, 0, DType::kU8, in.data(), out.data(), 8}));
      ADD_FAILURE() << "rank 0 completed an all-gather without rank 1";
    });
    FAIL() << "run() returned";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1: cannot compile rank1.onnx"), std::string::npos) << e.what();
  }
}

// The ranks' first collectives differ: an Error naming both, not a mix of
// their data.
TEST(InProcessWorldTest, DifferentCollectivesInTheSameSlotFail) {
  InProcessWorld world(DeviceMesh::parse("tp=2"));
  try {
    world.run([&](int64_t r) {
      Communicator& c = *world.communicator(r);
      std::vector<float> x(4, 1.0f), y(8);
      if (r == 0) c.all_reduce_sum(0, DType::kF32, x.data(), y.data(), 4);
      else c.all_gather(0, x.data(), y.data(), 16);
    });
    FAIL() << "run() returned";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidGraph);
    std::string m = e.what();
    EXPECT_NE(m.find("its collective 1 is "), std::string::npos) << m;
    EXPECT_NE(m.find("AllReduce of 4 f32 over axis 0"), std::string::npos) << m;
    EXPECT_NE(m.find("AllGather of 16 bytes over axis 0"), std::string::npos) << m;
  }
}

TEST(InProcessWorldTest, SumOfUnsupportedDtypeThrowsBeforeExchanging) {
  InProcessWorld world(DeviceMesh::parse("tp=2"));
  try {
    world.run([&](int64_t r) {
      uint8_t x = 1, y = 0;
      world.communicator(r)->all_reduce_sum(0, DType::kU8, &x, &y, 1);
    });
    FAIL() << "run() returned";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
  }
}

TEST(InProcessWorldTest, RankOutsideTheMeshIsUsageError) {
  InProcessWorld world(DeviceMesh::parse("tp=2"));
  EXPECT_THROW(world.communicator(2), Error);
}

}  // namespace
}  // namespace tessera::runtime
