#include "hspmd/core/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "hspmd/core/random.h"

namespace hspmd::safetensors {
namespace {

namespace fs = std::filesystem;

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("hspmd_safetensors_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }

  // Writes a file by hand, byte by byte as the spec says, so the reader is checked against the
  // format rather than against our own writer.
  std::string write_raw(const std::string& header, const std::string& data, int64_t length_override = -1) {
    std::string path = file("raw.safetensors");
    std::ofstream out(path, std::ios::binary);
    uint64_t n = length_override >= 0 ? static_cast<uint64_t>(length_override) : header.size();
    out.write(reinterpret_cast<const char*>(&n), 8);
    out << header << data;
    return path;
  }

  // The message of the Error the reader throws for a file, or "" when it opens fine.
  static std::string open_error(const std::string& path) {
    try {
      Reader reader(path);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }

  fs::path dir_;
};

TEST_F(SafetensorsTest, RoundTripsEveryDtypeShapeAndMetadata) {
  Tensor f32 = Tensor::empty({3, 5}, DType::kFloat32);
  fill_normal(f32, 1, 0, 1);
  Tensor f64 = Tensor::empty({7}, DType::kFloat64);
  fill_uniform(f64, 2, -1, 1);
  Tensor bf16 = Tensor::from_vector<BFloat16>({3}, {BFloat16(1.5f), BFloat16(-2.0f), BFloat16(0.1f)});
  Tensor i32 = Tensor::from_vector<int32_t>({2, 1}, {-7, 1 << 30});
  Tensor i64 = Tensor::from_vector<int64_t>({}, {int64_t{1} << 40});  // a scalar
  Tensor empty = Tensor::empty({0, 4}, DType::kFloat32);
  std::string path = file("m.safetensors");
  save(path, {{"w.f32", f32}, {"w.f64", f64}, {"w.bf16", bf16}, {"i32", i32}, {"step", i64}, {"empty", empty}},
       {{"step", "42"}, {"format", "pt"}});

  Reader reader(path);
  EXPECT_EQ(reader.tensors().size(), 6u);
  EXPECT_EQ(reader.metadata().at("step"), "42");
  EXPECT_EQ(reader.info("w.f32").shape, (Shape{3, 5}));
  EXPECT_EQ(reader.info("w.bf16").dtype, DType::kBFloat16);
  // Data order: larger elements first, so each tensor is aligned to its element size.
  for (const auto& t : reader.tensors()) EXPECT_EQ(t.begin % dtype_size(t.dtype), 0u) << t.name;
  auto all = load_all(path);
  for (const auto& [name, original] : std::map<std::string, Tensor>{
           {"w.f32", f32}, {"w.f64", f64}, {"w.bf16", bf16}, {"i32", i32}, {"step", i64}, {"empty", empty}}) {
    const Tensor& t = all.at(name);
    EXPECT_EQ(t.shape(), original.shape()) << name;
    EXPECT_EQ(t.dtype(), original.dtype()) << name;
    EXPECT_EQ(std::memcmp(t.raw_data(), original.raw_data(), t.nbytes()), 0) << name;
  }
  // The data section starts 8-byte aligned.
  std::ifstream in(path, std::ios::binary);
  uint64_t header_length = 0;
  in.read(reinterpret_cast<char*>(&header_length), 8);
  EXPECT_EQ((8 + header_length) % 8, 0u);
  // Nothing but the file itself is left in the directory (the temp file was renamed).
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
}

TEST_F(SafetensorsTest, ReadsRowsAndByteRangesWithoutTheRest) {
  std::vector<float> values(6 * 4);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
  std::string path = file("rows.safetensors");
  save(path, {{"embed", Tensor::from_vector<float>({6, 4}, values)}});
  Reader reader(path);
  Tensor rows = reader.read_rows("embed", 2, 3);
  EXPECT_EQ(rows.shape(), (Shape{3, 4}));
  EXPECT_EQ(rows.to_vector<float>(), std::vector<float>(values.begin() + 8, values.begin() + 20));
  float two[2];
  reader.read_bytes("embed", 5 * sizeof(float), sizeof(two), two);
  EXPECT_EQ(two[0], 5.0f);
  EXPECT_EQ(two[1], 6.0f);
  EXPECT_THROW(reader.read_rows("embed", 4, 3), Error);
  EXPECT_THROW(reader.read_bytes("embed", 90, 8, two), Error);
  try {
    reader.read("lm_head.weight");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no tensor \"lm_head.weight\""), std::string::npos) << e.what();
  }
}

TEST_F(SafetensorsTest, ReadsAHandWrittenFile) {
  // Two F32 tensors of 2 and 1 elements, header padded with spaces as the spec allows.
  float data[3] = {1.0f, 2.0f, 3.0f};
  std::string header =
      R"({"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("__metadata__":{"format":"pt"}}    )";
  Reader reader(write_raw(header, std::string(reinterpret_cast<char*>(data), sizeof(data))));
  EXPECT_EQ(reader.tensors()[0].name, "a");  // data order
  EXPECT_EQ(reader.read("a").to_vector<float>(), (std::vector<float>{1.0f, 2.0f}));
  EXPECT_EQ(reader.read("b").to_vector<float>(), (std::vector<float>{3.0f}));
  EXPECT_EQ(reader.metadata().at("format"), "pt");
}

TEST_F(SafetensorsTest, RefusesMalformedFilesNamingFileAndTensor) {
  std::string four_bytes(4, '\0');
  struct Case {
    std::string header, data, expected;
    int64_t length_override = -1;
  };
  const std::string ok_entry = R"("w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]})";
  std::vector<Case> cases = {
      {"{" + ok_entry + "}", "", "lies beyond the end of the data"},  // truncated data
      {"{" + ok_entry + "}", four_bytes, "header of 4000", 4000},     // header length beyond file
      {"{\"w\": [1, 2", four_bytes, "not valid JSON"},
      {"[1, 2]", "", "not a JSON object"},
      {R"({"w":{"dtype":"F32","shape":[1]}})", four_bytes, "tensor \"w\": key \"data_offsets\" missing"},
      {R"({"w":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}})", four_bytes, "tensor \"w\": unsupported safetensors dtype \"F16\""},
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", four_bytes, "tensor \"w\": data_offsets [0,4] span 4 bytes but F32[2] needs 8"},
      {R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", four_bytes, "non-integer or negative dim"},
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", four_bytes, "reversed"},
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"v":{"dtype":"I32","shape":[1],"data_offsets":[2,6]}})",
       std::string(8, '\0'), "tensor \"v\" data [2, 6) overlaps"},
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", std::string(8, '\0'), "hole in the data before tensor \"w\""},
      {"{" + ok_entry + "}", std::string(12, '\0'), "8 trailing bytes"},
      {"{" + ok_entry + R"(,"__metadata__":{"step":3}})", four_bytes, "metadata \"step\" is not a string"},
  };
  for (const auto& c : cases) {
    std::string path = write_raw(c.header, c.data, c.length_override);
    std::string error = open_error(path);
    EXPECT_NE(error.find(c.expected), std::string::npos) << "header " << c.header << "\n  error: " << error;
    EXPECT_NE(error.find("raw.safetensors"), std::string::npos) << error;
  }
  // Shorter than the 8-byte length prefix.
  std::string tiny = file("tiny.safetensors");
  std::ofstream(tiny) << "abc";
  EXPECT_NE(open_error(tiny).find("truncated"), std::string::npos);
  EXPECT_NE(open_error(file("missing.safetensors")).find("cannot open"), std::string::npos);
}

// Found while writing the fuzz target: a refused file used to leak its descriptor (the constructor
// threw after open(), and a throwing constructor never runs the destructor).
TEST_F(SafetensorsTest, RefusedFilesLeakNoFileDescriptor) {
  auto open_descriptors = [] {
    return std::distance(fs::directory_iterator("/proc/self/fd"), fs::directory_iterator{});
  };
  const std::string path = write_raw("{\"w\": [1, 2", "");
  const auto before = open_descriptors();
  for (int i = 0; i < 50; ++i) EXPECT_NE(open_error(path).find("not valid JSON"), std::string::npos);
  EXPECT_EQ(open_descriptors(), before);
}

TEST_F(SafetensorsTest, TruncatingAWrittenFileIsDetected) {
  std::string path = file("t.safetensors");
  Tensor w = Tensor::full({16, 16}, DType::kFloat32, 0.5);
  save(path, {{"w", w}});
  fs::resize_file(path, fs::file_size(path) - 1);
  EXPECT_NE(open_error(path).find("tensor \"w\""), std::string::npos);
}

TEST_F(SafetensorsTest, FailedSaveLeavesTheOldFileAndNoTempFile) {
  std::string path = file("keep.safetensors");
  save(path, {{"w", Tensor::full({2}, DType::kFloat32, 1.0)}});
  EXPECT_THROW(save(path, {{"w", Tensor::full({2}, DType::kFloat32, 2.0)}, {"w", Tensor::full({1}, DType::kFloat32, 0.0)}}),
               Error);  // duplicate name
  EXPECT_THROW(save(path, {{"__metadata__", Tensor::full({1}, DType::kFloat32, 0.0)}}), Error);
  EXPECT_THROW(save(path, {{"u", Tensor()}}), Error);
  EXPECT_EQ(load_all(path).at("w").to_vector<float>(), (std::vector<float>{1.0f, 1.0f}));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
  // A directory that does not exist: clear error naming the path.
  try {
    save(file("no/such/dir/x.safetensors"), {{"w", Tensor::full({1}, DType::kFloat32, 0.0)}});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("x.safetensors"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hspmd::safetensors
