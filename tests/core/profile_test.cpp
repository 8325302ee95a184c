#include "core/profile.hpp"

#include "core/chain.hpp"
#include "core/error.hpp"
#include "support/test_support.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

using madpipe::ChainCosts;
using madpipe::Error;
using madpipe::ErrorKind;
using madpipe::Layer;
using madpipe::Profile;
using nlohmann::json;

namespace fs = std::filesystem;

namespace {
// A fresh directory for one test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::random_device random;
    path_ = fs::temp_directory_path() / ("madpipe_core_" + std::string(info->test_suite_name()) +
                                         "_" + info->name() + "_" + std::to_string(random()));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

struct BadJsonCase {
  const char* what;                   // description for failure messages
  std::function<void(json&)> mutate;  // turns the valid profile into a bad one
  const char* pointer;                // expected Error::field()
  const char* problem;                // expected substring of Error::problem()
};
}  // namespace

static constexpr std::int64_t kTwoPow61 = std::int64_t{1} << 61;

static void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

static std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// A valid two-layer profile in JSON form, the base of the error cases.
static json valid_json() {
  return json::parse(R"({
    "format": "madpipe.profile/1", "name": "tiny", "device": "cpu", "dtype": "float32",
    "batch": 4, "input_bytes": 1000,
    "layers": [
      {"name": "a", "forward_ms": 1.5, "backward_ms": 3.0, "weight_bytes": 10,
       "output_bytes": 2000, "saved_bytes": 5, "forward_workspace_bytes": 7,
       "backward_workspace_bytes": 8},
      {"name": "b", "forward_ms": 0.25, "backward_ms": 0.5, "weight_bytes": 20,
       "output_bytes": 4}
    ]})");
}

// Returns the Error that profile_from_json throws; fails the test if it throws none.
static Error from_json_error(const json& j, const std::string& file) {
  try {
    madpipe::profile_from_json(j, file);
    ADD_FAILURE() << "accepted " << j.dump();
  } catch (const Error& e) {
    return e;
  }
  return Error(ErrorKind::Internal, "", "", "no error thrown");
}

static Error read_error(const std::string& path) {
  try {
    madpipe::read_profile(path);
    ADD_FAILURE() << "accepted " << path;
  } catch (const Error& e) {
    return e;
  }
  return Error(ErrorKind::Internal, "", "", "no error thrown");
}

// ---- shipped profiles ---------------------------------------------------------------------

TEST(ReadProfile, ReadsShippedResnet50) {
  const Profile p = madpipe::read_profile(madpipe::testing::shipped_profile_path("resnet50"));
  EXPECT_EQ(p.name, "resnet50");
  EXPECT_EQ(p.device, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(p.dtype, "float32");
  EXPECT_EQ(p.batch, 8);
  EXPECT_EQ(p.input_bytes, 96'000'000);
  ASSERT_EQ(p.layers.size(), 21u);
  const Layer& conv1 = p.layers[0];
  EXPECT_EQ(conv1.name, "conv1");
  EXPECT_DOUBLE_EQ(conv1.forward_ms, 1.6317);
  EXPECT_DOUBLE_EQ(conv1.backward_ms, 4.4147);
  EXPECT_EQ(conv1.weight_bytes, 37632);
  EXPECT_EQ(conv1.output_bytes, 512'000'000);
  EXPECT_EQ(conv1.saved_bytes, 0);
  EXPECT_EQ(conv1.forward_workspace_bytes, 608'037'888);
  EXPECT_EQ(conv1.backward_workspace_bytes, 642'760'448);
}

TEST(ReadProfile, ReadsAllShippedProfiles) {
  const std::vector<std::pair<std::string, std::size_t>> shipped = {
      {"resnet50", 21}, {"gpt2_small", 15}, {"gpt2_xl16", 19}};
  for (const auto& [name, layers] : shipped) {
    const Profile p = madpipe::read_profile(madpipe::testing::shipped_profile_path(name));
    EXPECT_EQ(p.name, name);
    EXPECT_EQ(p.layers.size(), layers) << name;
    EXPECT_GT(p.input_bytes, 0) << name;
    EXPECT_GT(p.batch, 0) << name;
    for (const Layer& layer : p.layers) {
      EXPECT_FALSE(layer.name.empty()) << name;
      EXPECT_GT(layer.forward_ms + layer.backward_ms, 0) << name << " " << layer.name;
    }
  }
}

TEST(ReadProfile, ShippedProfilesRoundTripThroughWrite) {
  TempDir dir;
  for (const char* name : {"resnet50", "gpt2_small", "gpt2_xl16"}) {
    const Profile original = madpipe::read_profile(madpipe::testing::shipped_profile_path(name));
    const std::string path = dir.file(std::string(name) + ".json");
    madpipe::write_profile(original, path);
    EXPECT_EQ(madpipe::read_profile(path), original) << name;
  }
}

// ---- fixtures in tests/data/profiles ------------------------------------------------------

TEST(ReadProfile, OptionalFieldsTakeDefaultsAndNameIsFileStem) {
  const Profile p =
      madpipe::read_profile(madpipe::testing::test_data_path("profiles/minimal.json"));
  EXPECT_EQ(p.name, "minimal");
  EXPECT_EQ(p.device, "");
  EXPECT_EQ(p.dtype, "");
  EXPECT_EQ(p.batch, 0);
  EXPECT_EQ(p.input_bytes, 4096);
  ASSERT_EQ(p.layers.size(), 1u);
  EXPECT_EQ(p.layers[0].name, "only");
  EXPECT_DOUBLE_EQ(p.layers[0].forward_ms, 1.25);
  EXPECT_DOUBLE_EQ(p.layers[0].backward_ms, 2.5);
  EXPECT_EQ(p.layers[0].weight_bytes, 100);
  EXPECT_EQ(p.layers[0].output_bytes, 200);
  EXPECT_EQ(p.layers[0].saved_bytes, 0);
  EXPECT_EQ(p.layers[0].forward_workspace_bytes, 0);
  EXPECT_EQ(p.layers[0].backward_workspace_bytes, 0);
}

TEST(ReadProfile, RejectsTruncatedFixture) {
  const std::string path = madpipe::testing::test_data_path("profiles/truncated.json");
  const Error e = read_error(path);
  EXPECT_EQ(e.kind(), ErrorKind::InvalidInput);
  EXPECT_EQ(e.file(), path);
  EXPECT_EQ(e.field(), "");
  EXPECT_NE(e.problem().find("invalid JSON (byte "), std::string::npos) << e.what();
  EXPECT_NE(e.problem().find("parse error"), std::string::npos) << e.what();
  EXPECT_EQ(e.problem().find("[json.exception"), std::string::npos) << e.what();
  EXPECT_EQ(std::string(e.what()).rfind(path + ": invalid JSON", 0), 0u) << e.what();
}

TEST(ReadProfile, NegativeTimeNamesFileAndPointer) {
  const std::string path = madpipe::testing::test_data_path("profiles/negative_forward.json");
  const Error e = read_error(path);
  EXPECT_EQ(e.kind(), ErrorKind::InvalidInput);
  EXPECT_STREQ(e.what(),
               (path + ": /layers/0/forward_ms: must be a finite number >= 0, got -1.5").c_str());
}

TEST(ReadProfile, WrongFormatNamesBothFormats) {
  const std::string path = madpipe::testing::test_data_path("profiles/wrong_format.json");
  const Error e = read_error(path);
  EXPECT_EQ(e.field(), "/format");
  EXPECT_STREQ(e.what(), (path + ": /format: must be \"madpipe.profile/1\", got "
                                 "\"madpipe.plan/1\"")
                             .c_str());
}

// ---- I/O and parse errors -----------------------------------------------------------------

TEST(ReadProfile, MissingFileIsIoError) {
  TempDir dir;
  const std::string path = dir.file("does_not_exist.json");
  const Error e = read_error(path);
  EXPECT_EQ(e.kind(), ErrorKind::Io);
  EXPECT_EQ(e.file(), path);
  EXPECT_EQ(e.problem(), "cannot open file: No such file or directory");
  EXPECT_EQ(std::string(e.what()), path + ": cannot open file: No such file or directory");
}

TEST(ReadProfile, DirectoryIsIoError) {
  TempDir dir;
  const std::string path = dir.file("");
  const Error e = read_error(path);
  EXPECT_EQ(e.kind(), ErrorKind::Io);
  EXPECT_NE(std::string(e.what()).find("cannot open file"), std::string::npos) << e.what();
}

TEST(ReadProfile, RejectsEmptyFile) {
  TempDir dir;
  const std::string path = dir.file("empty.json");
  write_text(path, "");
  const Error e = read_error(path);
  EXPECT_EQ(e.kind(), ErrorKind::InvalidInput);
  EXPECT_EQ(e.file(), path);
  EXPECT_NE(e.problem().find("invalid JSON"), std::string::npos) << e.what();
}

TEST(ReadProfile, RejectsTrailingGarbage) {
  TempDir dir;
  const std::string path = dir.file("trailing.json");
  write_text(path, valid_json().dump() + " x");
  const Error e = read_error(path);
  EXPECT_EQ(e.kind(), ErrorKind::InvalidInput);
  EXPECT_NE(e.problem().find("invalid JSON"), std::string::npos) << e.what();
}

TEST(ReadProfile, RejectsInvalidUtf8) {
  TempDir dir;
  const std::string path = dir.file("utf8.json");
  json j = valid_json();
  std::string text = j.dump();
  text.replace(text.find("\"tiny\""), 6, "\"ti\xff\xfe\"");
  write_text(path, text);
  const Error e = read_error(path);
  EXPECT_EQ(e.kind(), ErrorKind::InvalidInput);
  EXPECT_NE(e.problem().find("invalid JSON"), std::string::npos) << e.what();
}

TEST(ReadProfile, RejectsDeeplyNestedJsonCleanly) {
  TempDir dir;
  const std::string path = dir.file("deep.json");
  const int depth = 100'000;
  const std::string nested = std::string(depth, '[') + std::string(depth, ']');
  // Refused while parsing: a message printing such a value ("/format: must be ..., got [[[...")
  // used to overflow the stack.
  for (const std::string& text : {nested, "{\"format\": " + nested + "}"}) {
    write_text(path, text);
    const Error e = read_error(path);
    EXPECT_EQ(e.kind(), ErrorKind::InvalidInput);
    EXPECT_EQ(e.problem(), "invalid JSON: nested deeper than 256 levels");
  }
}

// Every prefix of a shipped profile that cuts before its closing brace must be rejected with
// an Error, never another exception or a crash.
TEST(ReadProfile, RejectsEveryTruncationOfAShippedProfile) {
  TempDir dir;
  const std::string text = read_text(madpipe::testing::shipped_profile_path("gpt2_small"));
  const std::size_t closing = text.rfind('}');
  ASSERT_NE(closing, std::string::npos);
  const std::string path = dir.file("cut.json");
  int checked = 0;
  for (std::size_t length = 0; length < closing; length += 37) {
    write_text(path, text.substr(0, length));
    try {
      madpipe::read_profile(path);
      ADD_FAILURE() << "accepted a prefix of " << length << " bytes";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::InvalidInput) << length;
      EXPECT_EQ(e.file(), path) << length;
    }
    ++checked;
  }
  EXPECT_GT(checked, 50);
}

// ---- validation: one case per rule --------------------------------------------------------

TEST(ProfileFromJson, AcceptsValidProfile) {
  const Profile p = madpipe::profile_from_json(valid_json(), "tiny.json");
  EXPECT_EQ(p.name, "tiny");
  EXPECT_EQ(p.device, "cpu");
  EXPECT_EQ(p.batch, 4);
  ASSERT_EQ(p.layers.size(), 2u);
  EXPECT_EQ(p.layers[0].saved_bytes, 5);
  EXPECT_EQ(p.layers[0].forward_workspace_bytes, 7);
  EXPECT_EQ(p.layers[0].backward_workspace_bytes, 8);
  EXPECT_EQ(p.layers[1].saved_bytes, 0);
}

TEST(ProfileFromJson, NameDefaultsToFileStem) {
  json j = valid_json();
  j.erase("name");
  EXPECT_EQ(madpipe::profile_from_json(j, "/some/dir/bert.large.json").name, "bert.large");
  EXPECT_EQ(madpipe::profile_from_json(j, "").name, "");
  EXPECT_EQ(madpipe::profile_from_json(j).name, "");
}

TEST(ProfileFromJson, IgnoresExtraFields) {
  json j = valid_json();
  j["tool"] = "torch";
  j["image"] = 1000;
  j["layers"][0]["flops"] = 1e12;
  j["layers"][1]["notes"] = {{"x", 1}};
  EXPECT_EQ(madpipe::profile_from_json(j), madpipe::profile_from_json(valid_json()));
}

TEST(ProfileFromJson, ReadsSourceAndSeq) {
  json j = valid_json();
  EXPECT_EQ(madpipe::profile_from_json(j).source, "");
  EXPECT_EQ(madpipe::profile_from_json(j).seq, 0);
  j["source"] = "analytic";
  j["seq"] = 1024;
  const Profile p = madpipe::profile_from_json(j);
  EXPECT_EQ(p.source, "analytic");
  EXPECT_EQ(p.seq, 1024);
}

TEST(ProfileFromJson, AcceptsIntegralFloatsAsSizes) {
  json j = valid_json();
  j["input_bytes"] = 1024.0;
  j["layers"][0]["weight_bytes"] = 1e3;
  j["layers"][0]["output_bytes"] = 0.0;
  j["batch"] = 8.0;
  const Profile p = madpipe::profile_from_json(j);
  EXPECT_EQ(p.input_bytes, 1024);
  EXPECT_EQ(p.layers[0].weight_bytes, 1000);
  EXPECT_EQ(p.layers[0].output_bytes, 0);
  EXPECT_EQ(p.batch, 8);
}

TEST(ProfileFromJson, AcceptsIntegerTimesAndZeroes) {
  json j = valid_json();
  j["layers"][0]["forward_ms"] = 2;
  j["layers"][0]["backward_ms"] = 0;
  j["input_bytes"] = 0;
  const Profile p = madpipe::profile_from_json(j);
  EXPECT_DOUBLE_EQ(p.layers[0].forward_ms, 2.0);
  EXPECT_DOUBLE_EQ(p.layers[0].backward_ms, 0.0);
  EXPECT_EQ(p.input_bytes, 0);
}

TEST(ProfileFromJson, AcceptsSizesJustBelowTwoPow62) {
  json j = valid_json();
  j["layers"][0]["weight_bytes"] = (std::int64_t{1} << 62) - 1;
  j["layers"][1]["weight_bytes"] = 0;
  j["layers"][0]["output_bytes"] = 0;
  j["input_bytes"] = 0;
  EXPECT_EQ(madpipe::profile_from_json(j).layers[0].weight_bytes, (std::int64_t{1} << 62) - 1);
}

TEST(ProfileFromJson, RejectsEachInvalidField) {
  const json nan = std::numeric_limits<double>::quiet_NaN();
  const json inf = std::numeric_limits<double>::infinity();
  const std::vector<BadJsonCase> cases = {
      {"root is an array", [](json& j) { j = json::array({1}); }, "",
       "must be a JSON object, got array"},
      {"root is a string", [](json& j) { j = "profile"; }, "", "must be a JSON object, got string"},
      {"no format", [](json& j) { j.erase("format"); }, "/format", "missing required field"},
      {"other format", [](json& j) { j["format"] = "madpipe.profile/2"; }, "/format",
       "must be \"madpipe.profile/1\", got \"madpipe.profile/2\""},
      {"format number", [](json& j) { j["format"] = 1; }, "/format",
       "must be \"madpipe.profile/1\", got 1"},
      {"name number", [](json& j) { j["name"] = 3; }, "/name", "must be a string, got number"},
      {"device array", [](json& j) { j["device"] = json::array(); }, "/device",
       "must be a string, got array"},
      {"dtype null", [](json& j) { j["dtype"] = nullptr; }, "/dtype", "must be a string, got null"},
      {"batch zero", [](json& j) { j["batch"] = 0; }, "/batch",
       "must be a positive integer, got 0"},
      {"source number", [](json& j) { j["source"] = 7; }, "/source",
       "must be a string, got number"},
      {"seq zero", [](json& j) { j["seq"] = 0; }, "/seq", "must be a positive integer, got 0"},
      {"seq fraction", [](json& j) { j["seq"] = 1.5; }, "/seq",
       "must be a positive integer, got 1.5"},
      {"seq string", [](json& j) { j["seq"] = "1024"; }, "/seq",
       "must be a positive integer, got string"},
      {"batch negative", [](json& j) { j["batch"] = -2; }, "/batch",
       "must be a positive integer, got -2"},
      {"batch fraction", [](json& j) { j["batch"] = 2.5; }, "/batch",
       "must be a positive integer, got 2.5"},
      {"batch huge", [](json& j) { j["batch"] = 1e10; }, "/batch", "must be a positive integer"},
      {"batch string", [](json& j) { j["batch"] = "8"; }, "/batch",
       "must be a positive integer, got string"},
      {"no input_bytes", [](json& j) { j.erase("input_bytes"); }, "/input_bytes",
       "missing required field"},
      {"input_bytes negative", [](json& j) { j["input_bytes"] = -1; }, "/input_bytes",
       "must be an integer >= 0, got -1"},
      {"input_bytes string", [](json& j) { j["input_bytes"] = "1GB"; }, "/input_bytes",
       "must be an integer, got string"},
      {"no layers", [](json& j) { j.erase("layers"); }, "/layers", "missing required field"},
      {"layers object", [](json& j) { j["layers"] = json::object(); }, "/layers",
       "must be a non-empty array, got object"},
      {"layers empty", [](json& j) { j["layers"] = json::array(); }, "/layers",
       "must be a non-empty array, got []"},
      {"layer string", [](json& j) { j["layers"][1] = "conv"; }, "/layers/1",
       "must be an object, got string"},
      {"layer null", [](json& j) { j["layers"][0] = nullptr; }, "/layers/0",
       "must be an object, got null"},
      {"no layer name", [](json& j) { j["layers"][1].erase("name"); }, "/layers/1/name",
       "missing required field"},
      {"layer name number", [](json& j) { j["layers"][1]["name"] = 5; }, "/layers/1/name",
       "must be a string, got number"},
      {"no forward_ms", [](json& j) { j["layers"][0].erase("forward_ms"); }, "/layers/0/forward_ms",
       "missing required field"},
      {"forward_ms negative", [](json& j) { j["layers"][1]["forward_ms"] = -1.5; },
       "/layers/1/forward_ms", "must be a finite number >= 0, got -1.5"},
      {"forward_ms string", [](json& j) { j["layers"][1]["forward_ms"] = "1.5"; },
       "/layers/1/forward_ms", "must be a finite number >= 0, got string"},
      {"forward_ms NaN", [nan](json& j) { j["layers"][1]["forward_ms"] = nan; },
       "/layers/1/forward_ms", "must be a finite number >= 0, got nan"},
      {"no backward_ms", [](json& j) { j["layers"][1].erase("backward_ms"); },
       "/layers/1/backward_ms", "missing required field"},
      {"backward_ms null", [](json& j) { j["layers"][0]["backward_ms"] = nullptr; },
       "/layers/0/backward_ms", "must be a finite number >= 0, got null"},
      {"backward_ms infinite", [inf](json& j) { j["layers"][0]["backward_ms"] = inf; },
       "/layers/0/backward_ms", "must be a finite number >= 0, got inf"},
      {"backward_ms bool", [](json& j) { j["layers"][0]["backward_ms"] = true; },
       "/layers/0/backward_ms", "must be a finite number >= 0, got boolean"},
      {"no weight_bytes", [](json& j) { j["layers"][1].erase("weight_bytes"); },
       "/layers/1/weight_bytes", "missing required field"},
      {"weight_bytes negative", [](json& j) { j["layers"][1]["weight_bytes"] = -3; },
       "/layers/1/weight_bytes", "must be an integer >= 0, got -3"},
      {"weight_bytes fraction", [](json& j) { j["layers"][1]["weight_bytes"] = 1.5; },
       "/layers/1/weight_bytes", "must be an integer, got 1.5"},
      {"weight_bytes string", [](json& j) { j["layers"][1]["weight_bytes"] = "12"; },
       "/layers/1/weight_bytes", "must be an integer, got string"},
      {"weight_bytes negative float", [](json& j) { j["layers"][1]["weight_bytes"] = -2.0; },
       "/layers/1/weight_bytes", "must be an integer >= 0, got -2.0"},
      {"no output_bytes", [](json& j) { j["layers"][0].erase("output_bytes"); },
       "/layers/0/output_bytes", "missing required field"},
      {"output_bytes 2^62", [](json& j) { j["layers"][0]["output_bytes"] = std::int64_t{1} << 62; },
       "/layers/0/output_bytes", "must be below 2^62, got 4611686018427387904"},
      {"output_bytes uint64 max",
       [](json& j) { j["layers"][0]["output_bytes"] = std::numeric_limits<std::uint64_t>::max(); },
       "/layers/0/output_bytes", "must be below 2^62, got 18446744073709551615"},
      {"output_bytes 1e30", [](json& j) { j["layers"][0]["output_bytes"] = 1e30; },
       "/layers/0/output_bytes", "must be below 2^62"},
      {"saved_bytes negative", [](json& j) { j["layers"][0]["saved_bytes"] = -1; },
       "/layers/0/saved_bytes", "must be an integer >= 0, got -1"},
      {"forward_workspace_bytes bool",
       [](json& j) { j["layers"][1]["forward_workspace_bytes"] = false; },
       "/layers/1/forward_workspace_bytes", "must be an integer, got boolean"},
      {"backward_workspace_bytes fraction",
       [](json& j) { j["layers"][1]["backward_workspace_bytes"] = 0.5; },
       "/layers/1/backward_workspace_bytes", "must be an integer, got 0.5"},
      {"weights sum to 2^62",
       [](json& j) {
         j["layers"][0]["weight_bytes"] = kTwoPow61;
         j["layers"][1]["weight_bytes"] = kTwoPow61;
       },
       "/layers/1/weight_bytes", "total weight_bytes of layers 0..1 reaches 2^62"},
      {"stored bytes sum to 2^62",
       [](json& j) {
         j["input_bytes"] = kTwoPow61;
         j["layers"][0]["output_bytes"] = kTwoPow61;
       },
       "/layers/0/output_bytes", "reaches 2^62"},
      {"too many layers",
       [](json& j) {
         j["layers"] = json::array();
         j["layers"].get_ref<json::array_t&>().resize(1'000'001);
       },
       "/layers", "has 1000001 layers, at most 1000000 are supported"},
  };
  for (const BadJsonCase& c : cases) {
    json j = valid_json();
    c.mutate(j);
    const Error e = from_json_error(j, "mem.json");
    EXPECT_EQ(e.kind(), ErrorKind::InvalidInput) << c.what;
    EXPECT_EQ(e.file(), "mem.json") << c.what;
    EXPECT_EQ(e.field(), c.pointer) << c.what;
    EXPECT_NE(e.problem().find(c.problem), std::string::npos)
        << c.what << ": got '" << e.problem() << "'";
    const std::string prefix =
        std::string("mem.json: ") + (c.pointer[0] != '\0' ? std::string(c.pointer) + ": " : "");
    EXPECT_EQ(std::string(e.what()).rfind(prefix, 0), 0u) << c.what << ": " << e.what();
    EXPECT_NE(e.problem().back(), '.') << c.what;
  }
}

TEST(ProfileFromJson, ReadsASplitBackward) {
  json j = valid_json();
  j["layers"][0]["backward_input_ms"] = 1.25;
  j["layers"][0]["backward_weight_ms"] = 1.75;
  j["layers"][0]["backward_weight_kept_bytes"] = 3000;
  const Profile p = madpipe::profile_from_json(j);
  ASSERT_TRUE(p.layers[0].split_backward.has_value());
  EXPECT_EQ(p.layers[0].split_backward->input_ms, 1.25);
  EXPECT_EQ(p.layers[0].split_backward->weight_ms, 1.75);
  EXPECT_EQ(p.layers[0].split_backward->kept_bytes, 3000);
  EXPECT_FALSE(p.layers[1].split_backward.has_value());
  EXPECT_FALSE(p == madpipe::profile_from_json(valid_json()));
}

TEST(ProfileFromJson, RejectsEachBadSplitBackward) {
  const auto split = [](double input, double weight) {
    return [input, weight](json& j) {
      j["layers"][0]["backward_input_ms"] = input;
      j["layers"][0]["backward_weight_ms"] = weight;
    };
  };
  const std::vector<BadJsonCase> cases = {
      {"input alone", [](json& j) { j["layers"][0]["backward_input_ms"] = 3.0; },
       "/layers/0/backward_weight_ms", "missing (backward_input_ms is given)"},
      {"weight alone", [](json& j) { j["layers"][1]["backward_weight_ms"] = 0.5; },
       "/layers/1/backward_input_ms", "missing (backward_weight_ms is given)"},
      {"sum too small", split(1.0, 1.0), "/layers/0/backward_weight_ms",
       "backward_input_ms + backward_weight_ms must equal backward_ms (3), got 2"},
      {"negative input", split(-1.0, 4.0), "/layers/0/backward_input_ms", ">= 0"},
      {"kept without split", [](json& j) { j["layers"][1]["backward_weight_kept_bytes"] = 8; },
       "/layers/1/backward_weight_kept_bytes", "needs backward_input_ms and backward_weight_ms"},
      {"kept negative",
       [&split](json& j) {
         split(2.0, 1.0)(j);
         j["layers"][0]["backward_weight_kept_bytes"] = -8;
       },
       "/layers/0/backward_weight_kept_bytes", ""},
  };
  for (const BadJsonCase& c : cases) {
    json j = valid_json();
    c.mutate(j);
    const Error e = from_json_error(j, "split.json");
    EXPECT_EQ(e.field(), c.pointer) << c.what;
    EXPECT_NE(e.problem().find(c.problem), std::string::npos)
        << c.what << ": got '" << e.problem() << "'";
  }
}

TEST(ProfileFromJson, ReportsTheFirstBadLayer) {
  json j = valid_json();
  for (int l = 0; l < 5; ++l) j["layers"].push_back(j["layers"][1]);
  j["layers"][4]["output_bytes"] = -7;
  j["layers"][6]["output_bytes"] = -8;
  EXPECT_EQ(from_json_error(j, "x.json").field(), "/layers/4/output_bytes");
}

TEST(ProfileFromJson, ShortensLongValuesInMessages) {
  json j = valid_json();
  j["format"] = std::string(1000, 'z');
  const Error e = from_json_error(j, "x.json");
  EXPECT_LT(e.problem().size(), 150u);
  EXPECT_NE(e.problem().find("..."), std::string::npos);
}

// ---- writing and round trips --------------------------------------------------------------

TEST(WriteProfile, RoundTripsAHandMadeProfile) {
  TempDir dir;
  Profile p = madpipe::testing::make_chain({1.5, 0.1, 1e-9}, {3.0, 0.2, 123.456789012345},
                                           {10, 20, 30}, {100, 200, 300}, 50);
  p.layers[1].saved_bytes = 77;
  p.layers[2].forward_workspace_bytes = 1;
  p.layers[2].backward_workspace_bytes = (std::int64_t{1} << 40) + 1;
  const std::string path = dir.file("chain.json");
  madpipe::write_profile(p, path);
  EXPECT_EQ(madpipe::read_profile(path), p);
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST(WriteProfile, WritesASplitBackwardOnlyWhereThereIsOne) {
  TempDir dir;
  Profile p = madpipe::testing::make_chain({1.0, 2.0}, {2.0, 4.0}, {10, 20}, {100, 200}, 50);
  const std::string plain = dir.file("plain.json");
  madpipe::write_profile(p, plain);
  EXPECT_EQ(read_text(plain).find("backward_input_ms"), std::string::npos);
  p.layers[1].split_backward = madpipe::SplitBackward{1.5, 2.5, 300};
  const std::string split = dir.file("split.json");
  madpipe::write_profile(p, split);
  EXPECT_EQ(madpipe::read_profile(split), p);
  const std::string text = read_text(split);
  EXPECT_NE(text.find("\"backward_weight_kept_bytes\": 300"), std::string::npos);
  // After the documented fields of its layer (the second, the last one).
  EXPECT_LT(text.rfind("backward_workspace_bytes"), text.find("backward_input_ms"));
}

TEST(WriteProfile, RoundTripsRandomChainsExactly) {
  TempDir dir;
  std::mt19937 rng(12345);
  for (int trial = 0; trial < 20; ++trial) {
    const Profile p = madpipe::testing::random_chain(rng, 1 + trial * 3);
    const std::string path = dir.file("random.json");
    madpipe::write_profile(p, path);  // overwrites the previous trial's file
    EXPECT_EQ(madpipe::read_profile(path), p) << trial;
    EXPECT_EQ(madpipe::profile_from_json(madpipe::profile_to_json(p)), p) << trial;
  }
}

TEST(WriteProfile, WritesFieldsInDocumentedOrder) {
  TempDir dir;
  const std::string path = dir.file("ordered.json");
  Profile p = madpipe::testing::make_chain({1.0});
  p.source = "by hand";
  p.seq = 128;
  madpipe::write_profile(p, path);
  const std::string text = read_text(path);
  const std::vector<std::string> keys = {"\"format\"", "\"name\"",        "\"device\"",
                                         "\"dtype\"",  "\"source\"",      "\"batch\"",
                                         "\"seq\"",    "\"input_bytes\"", "\"layers\""};
  std::size_t previous = 0;
  for (const std::string& key : keys) {
    const std::size_t at = text.find(key);
    ASSERT_NE(at, std::string::npos) << key;
    EXPECT_GT(at, previous) << key;
    previous = at;
  }
  EXPECT_EQ(text.back(), '\n');
}

TEST(WriteProfile, LeavesOutUnknownBatch) {
  Profile p = madpipe::testing::make_chain({1.0});
  p.batch = 0;
  const json j = madpipe::profile_to_json(p);
  EXPECT_FALSE(j.contains("batch"));
  EXPECT_FALSE(j.contains("source"));
  EXPECT_FALSE(j.contains("seq"));
  EXPECT_EQ(j.at("format"), madpipe::kProfileFormat);
  EXPECT_EQ(madpipe::profile_from_json(j), p);
}

TEST(WriteProfile, RefusesInvalidProfileAndWritesNothing) {
  TempDir dir;
  const std::string path = dir.file("bad.json");
  Profile p = madpipe::testing::make_chain({1.0, -2.0});
  try {
    madpipe::write_profile(p, path);
    ADD_FAILURE() << "wrote an invalid profile";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidInput);
    EXPECT_EQ(e.file(), path);
    EXPECT_EQ(e.field(), "/layers/1/forward_ms");
  }
  p.layers.clear();
  EXPECT_THROW(madpipe::write_profile(p, path), Error);
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST(WriteProfile, MissingDirectoryIsIoError) {
  TempDir dir;
  const std::string path = dir.file("no/such/dir/p.json");
  try {
    madpipe::write_profile(madpipe::testing::make_chain({1.0}), path);
    ADD_FAILURE() << "wrote into a missing directory";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Io);
    EXPECT_EQ(e.file(), path);
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos);
  }
}

TEST(WriteProfile, ReplacesAnExistingFile) {
  TempDir dir;
  const std::string path = dir.file("p.json");
  write_text(path, "old contents");
  const Profile p = madpipe::testing::make_chain({2.0}, {4.0});
  madpipe::write_profile(p, path);
  EXPECT_EQ(madpipe::read_profile(path), p);
}

// ---- helpers ------------------------------------------------------------------------------

TEST(Profile, InputBytesOfLayer) {
  const Profile p = madpipe::testing::make_chain({1, 1, 1}, {}, {}, {20, 30, 40}, 10);
  EXPECT_EQ(madpipe::input_bytes_of_layer(p, 0), 10);
  EXPECT_EQ(madpipe::input_bytes_of_layer(p, 1), 20);
  EXPECT_EQ(madpipe::input_bytes_of_layer(p, 2), 30);
}

TEST(Profile, EqualityComparesEveryField) {
  const Profile base = madpipe::profile_from_json(valid_json());
  EXPECT_EQ(base, base);
  const std::vector<std::function<void(Profile&)>> changes = {
      [](Profile& p) { p.name += "x"; },
      [](Profile& p) { p.device += "x"; },
      [](Profile& p) { p.dtype += "x"; },
      [](Profile& p) { p.batch += 1; },
      [](Profile& p) { p.source += "x"; },
      [](Profile& p) { p.seq += 1; },
      [](Profile& p) { p.input_bytes += 1; },
      [](Profile& p) { p.layers.pop_back(); },
      [](Profile& p) { p.layers[0].name += "x"; },
      [](Profile& p) { p.layers[0].forward_ms += 1e-12; },
      [](Profile& p) { p.layers[0].backward_ms += 1; },
      [](Profile& p) { p.layers[0].weight_bytes += 1; },
      [](Profile& p) { p.layers[0].output_bytes += 1; },
      [](Profile& p) { p.layers[0].saved_bytes += 1; },
      [](Profile& p) { p.layers[0].forward_workspace_bytes += 1; },
      [](Profile& p) { p.layers[0].backward_workspace_bytes += 1; },
  };
  for (std::size_t i = 0; i < changes.size(); ++i) {
    Profile changed = base;
    changes[i](changed);
    EXPECT_FALSE(changed == base) << "change " << i;
  }
}

// ---- ChainCosts ---------------------------------------------------------------------------

// Three layers: input 10, outputs 20/30/40, saved 1/2/3, weights 100/200/300, forward 1/2/3,
// backward 2/4/6, workspaces (forward, backward) (5, 6), (50, 8), (7, 70).
static Profile hand_made_chain() {
  Profile p = madpipe::testing::make_chain({1, 2, 3}, {2, 4, 6}, {100, 200, 300}, {20, 30, 40}, 10);
  const std::int64_t saved[] = {1, 2, 3};
  const std::int64_t fwd_ws[] = {5, 50, 7};
  const std::int64_t bwd_ws[] = {6, 8, 70};
  for (std::size_t l = 0; l < 3; ++l) {
    p.layers[l].saved_bytes = saved[l];
    p.layers[l].forward_workspace_bytes = fwd_ws[l];
    p.layers[l].backward_workspace_bytes = bwd_ws[l];
  }
  return p;
}

TEST(ChainCosts, SumsOnAHandMadeChain) {
  const ChainCosts costs(hand_made_chain());
  EXPECT_EQ(costs.num_layers(), 3);
  EXPECT_DOUBLE_EQ(costs.forward_ms(0, 2), 6);
  EXPECT_DOUBLE_EQ(costs.forward_ms(1, 2), 5);
  EXPECT_DOUBLE_EQ(costs.backward_ms(0, 1), 6);
  EXPECT_DOUBLE_EQ(costs.backward_ms(2, 2), 6);
  EXPECT_DOUBLE_EQ(costs.compute_ms(0, 2), 18);
  EXPECT_DOUBLE_EQ(costs.compute_ms(1, 1), 6);
  EXPECT_DOUBLE_EQ(costs.total_compute_ms(), 18);
  EXPECT_DOUBLE_EQ(costs.max_layer_compute_ms(), 9);
  EXPECT_EQ(costs.weight_bytes(0, 2), 600);
  EXPECT_EQ(costs.weight_bytes(1, 1), 200);
}

TEST(ChainCosts, StoredBytesAreInputsPlusSaved) {
  const ChainCosts costs(hand_made_chain());
  EXPECT_EQ(costs.stored_bytes(0, 0), 10 + 1);
  EXPECT_EQ(costs.stored_bytes(1, 1), 20 + 2);
  EXPECT_EQ(costs.stored_bytes(2, 2), 30 + 3);
  EXPECT_EQ(costs.stored_bytes(0, 2), (10 + 1) + (20 + 2) + (30 + 3));
  EXPECT_EQ(costs.stored_bytes(1, 2), (20 + 2) + (30 + 3));
}

TEST(ChainCosts, WorkspaceIsTheLargestOfTheRange) {
  const ChainCosts costs(hand_made_chain());
  EXPECT_EQ(costs.workspace_bytes(0, 0), 6);
  EXPECT_EQ(costs.workspace_bytes(0, 1), 50);
  EXPECT_EQ(costs.workspace_bytes(1, 1), 50);
  EXPECT_EQ(costs.workspace_bytes(0, 2), 70);
  EXPECT_EQ(costs.workspace_bytes(2, 2), 70);
}

TEST(ChainCosts, ActivationBytes) {
  const Profile p = hand_made_chain();
  const ChainCosts costs(p);
  EXPECT_EQ(costs.activation_bytes(-1), p.input_bytes);
  EXPECT_EQ(costs.activation_bytes(0), 20);
  EXPECT_EQ(costs.activation_bytes(1), 30);
  EXPECT_EQ(costs.activation_bytes(2), 40);
  for (int l = 0; l < 3; ++l) {
    EXPECT_EQ(costs.activation_bytes(l - 1), madpipe::input_bytes_of_layer(p, l));
  }
}

TEST(ChainCosts, MatchesBruteForceOnRandomChains) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 10; ++trial) {
    const Profile p = madpipe::testing::random_chain(rng, 2 + trial);
    const ChainCosts costs(p);
    const int n = static_cast<int>(p.layers.size());
    for (int first = 0; first < n; ++first) {
      for (int last = first; last < n; ++last) {
        double forward = 0, backward = 0;
        std::int64_t weights = 0, stored = 0, workspace = 0;
        for (int l = first; l <= last; ++l) {
          const Layer& layer = p.layers[static_cast<std::size_t>(l)];
          forward += layer.forward_ms;
          backward += layer.backward_ms;
          weights += layer.weight_bytes;
          stored += madpipe::input_bytes_of_layer(p, l) + layer.saved_bytes;
          workspace =
              std::max({workspace, layer.forward_workspace_bytes, layer.backward_workspace_bytes});
        }
        EXPECT_NEAR(costs.forward_ms(first, last), forward, 1e-9);
        EXPECT_NEAR(costs.backward_ms(first, last), backward, 1e-9);
        EXPECT_EQ(costs.weight_bytes(first, last), weights);
        EXPECT_EQ(costs.stored_bytes(first, last), stored);
        EXPECT_EQ(costs.workspace_bytes(first, last), workspace);
      }
    }
  }
}

TEST(ChainCosts, WorksOnShippedProfiles) {
  for (const char* name : {"resnet50", "gpt2_small", "gpt2_xl16"}) {
    const Profile p = madpipe::read_profile(madpipe::testing::shipped_profile_path(name));
    const ChainCosts costs(p);
    const int n = costs.num_layers();
    ASSERT_EQ(n, static_cast<int>(p.layers.size()));
    double total = 0;
    for (const Layer& layer : p.layers) total += layer.forward_ms + layer.backward_ms;
    EXPECT_NEAR(costs.total_compute_ms(), total, 1e-9) << name;
    EXPECT_EQ(costs.activation_bytes(-1), p.input_bytes) << name;
    EXPECT_EQ(costs.activation_bytes(n - 1), p.layers.back().output_bytes) << name;
  }
}
