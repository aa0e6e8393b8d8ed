// Tensor storage: a view into memory another object owns (a mapped file) is
// read in place, keeps its owner alive, compares and hashes as the same bytes
// owned, and is copied before the first write; MappedFile maps a file whole.
#include "graph/tensor.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "graph/error.h"
#include "graph/interpreter.h"
#include "graph/mapped_file.h"
#include "graph/strategy.h"
#include "tests/resident_bytes.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

std::shared_ptr<std::vector<float>> buffer() {
  return std::make_shared<std::vector<float>>(std::vector<float>{1, 2, 3, 4, 5, 6});
}

Tensor view_of(const std::shared_ptr<std::vector<float>>& b) {
  return Tensor::view(DType::kF32, {2, 3}, reinterpret_cast<const uint8_t*>(b->data()), b);
}

TEST(TensorView, ReadsInPlaceAndKeepsItsOwner) {
  auto b = buffer();
  std::weak_ptr<std::vector<float>> owner = b;
  const float* where = b->data();
  Tensor t = view_of(b);
  b.reset();
  EXPECT_FALSE(owner.expired());  // the tensor holds it
  EXPECT_TRUE(t.is_view());
  EXPECT_EQ(t.data_as<float>(), where);
  EXPECT_EQ(t.to_doubles(), (std::vector<double>{1, 2, 3, 4, 5, 6}));
  Tensor copy = t;
  EXPECT_EQ(copy.data(), t.data());
  t = Tensor();
  EXPECT_FALSE(owner.expired());
  copy = Tensor();
  EXPECT_TRUE(owner.expired());
}

TEST(TensorView, ComparesAndHashesAsItsBytes) {
  auto b = buffer();
  Tensor v = view_of(b);
  Tensor owned = Tensor::from_doubles(DType::kF32, {2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_FALSE(owned.is_view());
  EXPECT_TRUE(v.identical(owned));
  EXPECT_TRUE(owned.identical(v));
  EXPECT_EQ(v.hash(), owned.hash());
  Tensor other = Tensor::from_doubles(DType::kF32, {2, 3}, {1, 2, 3, 4, 5, 7});
  EXPECT_FALSE(v.identical(other));
  EXPECT_NE(v.hash(), other.hash());
  // Two views of the same bytes under different types are not identical.
  EXPECT_FALSE(v.identical(v.reshaped({3, 2})));
  EXPECT_TRUE(v.reshaped({3, 2}).is_view());
}

TEST(TensorView, FirstWriteCopiesAndLeavesTheOwnerUntouched) {
  auto b = buffer();
  Tensor v = view_of(b);
  uint64_t before = v.hash();
  Tensor w = v;
  w.mutable_data_as<float>()[0] = 9;
  EXPECT_FALSE(w.is_view());
  EXPECT_NE(w.data_as<float>(), b->data());
  EXPECT_EQ((*b)[0], 1);
  EXPECT_EQ(v.get_double(0), 1);
  EXPECT_EQ(w.get_double(0), 9);
  EXPECT_EQ(w.get_double(5), 6);
  EXPECT_NE(w.hash(), before);
  // A view no other tensor shares is copied too: the memory is not ours to write.
  Tensor alone = view_of(b);
  alone.set_double(1, 7);
  EXPECT_FALSE(alone.is_view());
  EXPECT_EQ((*b)[1], 2);
}

TEST(TensorView, RefusesMisalignedData) {
  auto bytes = std::make_shared<std::vector<uint8_t>>(16);
  EXPECT_THROW(Tensor::view(DType::kF32, {2}, bytes->data() + 1, bytes), Error);
  EXPECT_NO_THROW(Tensor::view(DType::kU8, {2}, bytes->data() + 1, bytes));
}

class MappedFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(TESSERA_BINARY_DIR) /
           ("mapped_file_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  fs::path dir_;
};

TEST_F(MappedFileTest, MapsTheWholeFile) {
  std::ofstream(dir_ / "f.bin", std::ios::binary) << "weights!";
  auto f = MappedFile::open((dir_ / "f.bin").string(), "initializer 'w'");
  ASSERT_EQ(f->size(), 8u);
  EXPECT_EQ(std::memcmp(f->data(), "weights!", 8), 0);
  std::ofstream(dir_ / "empty.bin", std::ios::binary).flush();
  EXPECT_EQ(MappedFile::open((dir_ / "empty.bin").string(), "initializer 'w'")->size(), 0u);
}

TEST_F(MappedFileTest, MissingFileOrFolderIsAnIoErrorNamingIt) {
  for (const fs::path& p : {dir_ / "missing.bin", dir_}) {
    try {
      MappedFile::open(p.string(), "initializer 'w'");
      ADD_FAILURE() << "mapped " << p;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kIo);
      std::string what = e.what();
      EXPECT_NE(what.find("initializer 'w'"), std::string::npos) << what;
      EXPECT_NE(what.find(p.string()), std::string::npos) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  }
}

// A mapped weight whose pages a kernel dropped (after packing its own copy)
// still reads its values: they come back from the file. Dropping the pages
// of a tensor that is not a file's view does nothing (an owned buffer, or a
// part of one, would otherwise read back zeros).
TEST_F(MappedFileTest, DroppedPagesReadBackFromTheFile) {
  const size_t n = 3 * 4096 / sizeof(float);
  std::vector<float> w(n);
  for (size_t i = 0; i < n; ++i) w[i] = static_cast<float>(i) * 0.5f;
  {
    std::ofstream out(dir_ / "w.bin", std::ios::binary);
    out.write(reinterpret_cast<const char*>(w.data()), static_cast<std::streamsize>(n * sizeof(float)));
  }
  auto file = MappedFile::open((dir_ / "w.bin").string(), "initializer 'w'");
  Tensor t = Tensor::mapped(DType::kF32, {static_cast<int64_t>(n)}, file, 0);
  Tensor part = t.view_part({1024}, 1024);
  EXPECT_EQ(part.get_double(0), 512);
  t.drop_mapped_pages();
  part.drop_mapped_pages();
  for (size_t i = 0; i < n; i += 511) EXPECT_EQ(t.get_double(static_cast<int64_t>(i)), w[i]) << i;
  EXPECT_EQ(part.get_double(1023), w[2047]);

  Tensor owned = Tensor::from_doubles(DType::kF32, {static_cast<int64_t>(n)}, std::vector<double>(w.begin(), w.end()));
  Tensor owned_part = owned.view_part({2048}, 1024);
  owned.drop_mapped_pages();
  owned_part.drop_mapped_pages();
  EXPECT_EQ(owned.get_double(2000), w[2000]);
  EXPECT_EQ(owned_part.get_double(2000), w[3024]);
  // Out of the file's bounds or misaligned: an internal error, not a read.
  EXPECT_THROW(Tensor::mapped(DType::kF32, {static_cast<int64_t>(n)}, file, 4), Error);
  EXPECT_THROW(Tensor::mapped(DType::kF32, {4}, file, 2), Error);
}

// Readers that stream a whole mapped weight once (its hash, its conversion
// for the interpreter, a rank's strided block) leave none of its pages
// resident: a model larger than memory is never resident whole. Reading it
// element by element keeps them (the measurement can tell).
TEST_F(MappedFileTest, WholeTensorReadersLeaveNoPagesResident) {
  std::vector<float> w(64 * 256);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i % 101);
  std::string path = fs::canonical(dir_).string() + "/w.bin";
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(w.data()), static_cast<std::streamsize>(w.size() * 4));
  }
  Tensor t = Tensor::mapped(DType::kF32, {64, 256}, MappedFile::open(path, "w"), 0);
  auto touch = [&] {
    double sum = 0;
    for (int64_t i = 0; i < t.numel(); ++i) sum += t.get_double(i);
    EXPECT_GT(testing::resident_bytes_of(path), 60 << 10);
    return sum;
  };
  touch();
  t.hash();
  EXPECT_LE(testing::resident_bytes_of(path), 4 << 10);
  touch();
  RefTensor<float> r = to_ref<float>(t);
  EXPECT_EQ(r.num[300], w[300]);
  EXPECT_LE(testing::resident_bytes_of(path), 4 << 10);
  touch();
  Tensor block = shard_of(t, Sharding::parse("[S(1)]"), DeviceMesh::parse("tp=2"), 1);
  EXPECT_EQ(block.get_double(0), w[128]);
  EXPECT_LE(testing::resident_bytes_of(path), 4 << 10);
}

// A file that shrinks while it is mapped (rewritten by another process)
// makes a read of its lost pages raise SIGBUS: the process ends with a
// one-line error naming the file and exit status 1, not a crash.
TEST_F(MappedFileTest, ReadPastATruncatedFileIsAOneLineErrorNamingIt) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::string path = fs::canonical(dir_).string() + "/shrinks.bin";
  std::vector<char> bytes(4 * 4096, 7);
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  EXPECT_EXIT(
      {
        auto f = MappedFile::open(path, "initializer 'w'");
        fs::resize_file(path, 4096);
        volatile uint8_t sum = 0;
        for (uint64_t i = 0; i < f->size(); i += 4096) sum = sum + f->data()[i];
        std::fprintf(stderr, "read %d\n", sum);
        std::exit(0);
      },
      ::testing::ExitedWithCode(1), "^tessera: error: " + path + ": external data file is shorter than when it was mapped [^\n]*\n$");
}

}  // namespace
}  // namespace tessera
