#include "core/units.hpp"

#include "core/error.hpp"

#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

using madpipe::Error;
using madpipe::ErrorKind;

namespace {
struct BytesCase {
  const char* text;
  std::int64_t bytes;
};

struct BandwidthCase {
  const char* text;
  double bytes_per_ms;
};

struct BadCase {
  const char* text;
  const char* problem;  // substring expected in Error::problem()
};
}  // namespace

static constexpr std::int64_t kKiB = 1024;
static constexpr std::int64_t kMiB = 1024 * kKiB;
static constexpr std::int64_t kGiB = 1024 * kMiB;

// Calls parse_bytes and returns the Error it throws; fails the test if it throws none.
static Error bytes_error(const std::string& text, const std::string& field) {
  try {
    const std::int64_t bytes = madpipe::parse_bytes(text, field);
    ADD_FAILURE() << "'" << text << "' parsed as " << bytes << ", expected an error";
  } catch (const Error& e) {
    return e;
  }
  return Error(ErrorKind::Internal, "", "", "no error thrown");
}

static Error bandwidth_error(const std::string& text, const std::string& field) {
  try {
    const double bandwidth = madpipe::parse_bandwidth(text, field);
    ADD_FAILURE() << "'" << text << "' parsed as " << bandwidth << ", expected an error";
  } catch (const Error& e) {
    return e;
  }
  return Error(ErrorKind::Internal, "", "", "no error thrown");
}

TEST(ParseBytes, AcceptsDocumentedExamples) {
  const std::vector<BytesCase> cases = {
      {"16GiB", 16 * kGiB},
      {"16 GiB", 16 * kGiB},
      {"500MB", 500'000'000},
      {"500mb", 500'000'000},
      {"1.5GB", 1'500'000'000},
      {"4096", 4096},
      {"64KiB", 64 * kKiB},
      {"1TB", 1'000'000'000'000},
      {"2kB", 2000},
      {"2KB", 2000},
      {"2kb", 2000},
      {"0", 0},
      {"0B", 0},
      {"7 B", 7},
      {"  7  B  ", 7},
      {"8 bytes", 8},
      {"1 byte", 1},
      {"1e3", 1000},
      {"1.5KiB", 1536},
      {"16gib", 16 * kGiB},
      {"3 MiB", 3 * kMiB},
      {"2Ki", 2048},
      {"1PB", 1'000'000'000'000'000},
      {"1PiB", kGiB * kMiB},
      {"1TiB", kGiB * kKiB},
      {".5KiB", 512},
      {"16\tGiB", 16 * kGiB},
  };
  for (const BytesCase& c : cases) {
    EXPECT_EQ(madpipe::parse_bytes(c.text), c.bytes) << c.text;
  }
}

TEST(ParseBytes, RoundsFractionalBytesToNearest) {
  EXPECT_EQ(madpipe::parse_bytes("1.1KiB"), 1126);  // 1126.4
  EXPECT_EQ(madpipe::parse_bytes("0.3KB"), 300);
  EXPECT_EQ(madpipe::parse_bytes("2.6"), 3);
}

TEST(ParseBytes, AcceptsLargestSizes) {
  EXPECT_EQ(madpipe::parse_bytes("8000PB"), std::int64_t{8'000'000'000'000'000'000});
  EXPECT_EQ(madpipe::parse_bytes("8191PiB"), std::int64_t{8191} * kGiB * kMiB);
}

TEST(ParseBytes, MessageNamesFieldAndText) {
  const Error e = bytes_error("abc", "--memory");
  EXPECT_EQ(e.kind(), ErrorKind::InvalidInput);
  EXPECT_EQ(e.file(), "");
  EXPECT_EQ(e.field(), "--memory");
  EXPECT_STREQ(e.what(), "--memory: cannot parse 'abc' as a size (examples: 16GiB, 500MB)");
}

TEST(ParseBytes, MessageWithoutFieldIsJustTheProblem) {
  const Error e = bytes_error("12XB", "");
  EXPECT_STREQ(e.what(), "cannot parse '12XB' as a size (examples: 16GiB, 500MB)");
}

TEST(ParseBytes, RejectsBadText) {
  const std::vector<BadCase> cases = {
      {"", "cannot parse '' as a size"},    {"   ", "cannot parse '   ' as a size"},
      {"GiB", "cannot parse 'GiB'"},        {"nan", "cannot parse 'nan'"},
      {"NaN", "cannot parse 'NaN'"},        {"inf", "cannot parse 'inf'"},
      {"-inf", "cannot parse '-inf'"},      {"infinity GB", "cannot parse"},
      {"12XB", "cannot parse '12XB'"},      {"16GiBs", "cannot parse '16GiBs'"},
      {"16 G iB", "cannot parse"},          {"16 GiB B", "cannot parse"},
      {"1.2.3", "cannot parse '1.2.3'"},    {"0x10", "cannot parse '0x10'"},
      {"+5", "cannot parse '+5'"},          {"16Gbit", "cannot parse '16Gbit'"},
      {"16GB/s", "cannot parse '16GB/s'"},  {"1e", "cannot parse '1e'"},
      {"1e400", "cannot parse '1e400'"},    {"--5", "cannot parse '--5'"},
      {"5 -", "cannot parse '5 -'"},        {".", "cannot parse '.'"},
      {"1,5GB", "cannot parse '1,5GB'"},    {"-1GB", "must be >= 0, got '-1GB'"},
      {"-3", "must be >= 0, got '-3'"},     {"9.3e18", "too large"},
      {"9223372036854775808", "too large"}, {"8192PiB", "too large"},
      {"10EB", "cannot parse '10EB'"},
  };
  for (const BadCase& c : cases) {
    const Error e = bytes_error(c.text, "--platform.memory");
    EXPECT_EQ(e.kind(), ErrorKind::InvalidInput) << c.text;
    EXPECT_EQ(e.field(), "--platform.memory") << c.text;
    EXPECT_NE(e.problem().find(c.problem), std::string::npos) << c.text << " -> " << e.problem();
    EXPECT_NE(std::string(e.what()).find("--platform.memory: "), std::string::npos) << c.text;
    EXPECT_EQ(e.problem().back() == '.', false) << "no trailing period: " << e.problem();
  }
}

TEST(ParseBandwidth, AcceptsDocumentedExamples) {
  const std::vector<BandwidthCase> cases = {
      {"12GB/s", 12e6},
      {"12 GB/s", 12e6},
      {"12gB/s", 12e6},
      {"25Gbit/s", 25e9 / 8 / 1000},
      {"25Gb/s", 25e9 / 8 / 1000},
      {"25 Gbits/s", 25e9 / 8 / 1000},
      {"100Gb/s", 12.5e6},
      {"100Gbps", 12.5e6},
      {"12GBps", 12e6},
      {"12 GB/sec", 12e6},
      {"12gb/s", 1.5e6},  // lower-case b is a bit
      {"900MiB/s", 900.0 * 1024 * 1024 / 1000},
      {"1.5 TB/s", 1.5e9},
      {"1000", 1.0},
      {"12e9", 12e6},
      {"500B/s", 0.5},
      {"8 bit/s", 0.001},
      {"2 kbyte/s", 2.0},
      {"  12GB/s  ", 12e6},
  };
  for (const BandwidthCase& c : cases) {
    EXPECT_DOUBLE_EQ(madpipe::parse_bandwidth(c.text), c.bytes_per_ms) << c.text;
  }
}

TEST(ParseBandwidth, MessageNamesFieldAndText) {
  const Error e = bandwidth_error("fast", "--bandwidth");
  EXPECT_EQ(e.kind(), ErrorKind::InvalidInput);
  EXPECT_EQ(e.field(), "--bandwidth");
  EXPECT_STREQ(e.what(),
               "--bandwidth: cannot parse 'fast' as a bandwidth (examples: 12GB/s, 25Gbit/s, "
               "900MiB/s)");
}

TEST(ParseBandwidth, RejectsBadText) {
  const std::vector<BadCase> cases = {
      {"", "cannot parse '' as a bandwidth"},
      {"0", "must be > 0, got '0'"},
      {"0GB/s", "must be > 0, got '0GB/s'"},
      {"0.0", "must be > 0"},
      {"-12GB/s", "must be > 0, got '-12GB/s'"},
      {"-1", "must be > 0"},
      {"12GB", "cannot parse '12GB' as a bandwidth"},
      {"12G/s", "cannot parse '12G/s'"},
      {"12/s", "cannot parse '12/s'"},
      {"12 XB/s", "cannot parse"},
      {"12GB/min", "cannot parse"},
      {"12GB/s/s", "cannot parse"},
      {"nan", "cannot parse 'nan'"},
      {"inf GB/s", "cannot parse"},
      {"1e400", "cannot parse"},
      {"1e308TB/s", "too large"},
  };
  for (const BadCase& c : cases) {
    const Error e = bandwidth_error(c.text, "platform.bandwidth");
    EXPECT_EQ(e.kind(), ErrorKind::InvalidInput) << c.text;
    EXPECT_EQ(e.field(), "platform.bandwidth") << c.text;
    EXPECT_NE(e.problem().find(c.problem), std::string::npos) << c.text << " -> " << e.problem();
    EXPECT_NE(std::string(e.what()).find("platform.bandwidth: "), std::string::npos) << c.text;
  }
}

TEST(FormatBytes, UsesBinaryUnitsWithOneDecimal) {
  EXPECT_EQ(madpipe::format_bytes(0), "0 B");
  EXPECT_EQ(madpipe::format_bytes(512), "512 B");
  EXPECT_EQ(madpipe::format_bytes(1023), "1023 B");
  EXPECT_EQ(madpipe::format_bytes(1024), "1.0 KiB");
  EXPECT_EQ(madpipe::format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(madpipe::format_bytes(15.6 * kGiB), "15.6 GiB");
  EXPECT_EQ(madpipe::format_bytes(80.0 * kGiB), "80.0 GiB");
  EXPECT_EQ(madpipe::format_bytes(2.0 * kGiB * kKiB), "2.0 TiB");
  EXPECT_EQ(madpipe::format_bytes(96'000'000), "91.6 MiB");
}

TEST(FormatBytes, NeverShows1024OfAUnit) {
  EXPECT_EQ(madpipe::format_bytes(1023.99 * kKiB), "1.0 MiB");
  EXPECT_EQ(madpipe::format_bytes(kGiB - 1), "1.0 GiB");
  EXPECT_EQ(madpipe::format_bytes(1023.6), "1.0 KiB");
}

TEST(FormatBandwidth, UsesDecimalGigabytesPerSecond) {
  EXPECT_EQ(madpipe::format_bandwidth(12e6), "12.0 GB/s");
  EXPECT_EQ(madpipe::format_bandwidth(12.5e6), "12.5 GB/s");
  EXPECT_EQ(madpipe::format_bandwidth(900.0 * 1024 * 1024 / 1000), "0.9 GB/s");
  EXPECT_EQ(madpipe::format_bandwidth(450e6), "450.0 GB/s");
}

TEST(FormatBandwidth, ScalesOutsideTheGigabyteRange) {
  EXPECT_EQ(madpipe::format_bandwidth(1e4), "10.0 MB/s");
  EXPECT_EQ(madpipe::format_bandwidth(1.0), "1.0 kB/s");
  EXPECT_EQ(madpipe::format_bandwidth(0.5), "500.0 B/s");
  EXPECT_EQ(madpipe::format_bandwidth(2e9), "2.0 TB/s");
}

TEST(FormatMs, UsesTwoDecimalsAndSecondsAbove10000) {
  EXPECT_EQ(madpipe::format_ms(41.7), "41.70 ms");
  EXPECT_EQ(madpipe::format_ms(0), "0.00 ms");
  EXPECT_EQ(madpipe::format_ms(0.004), "0.00 ms");
  EXPECT_EQ(madpipe::format_ms(1.236), "1.24 ms");
  EXPECT_EQ(madpipe::format_ms(10000), "10000.00 ms");
  EXPECT_EQ(madpipe::format_ms(10001), "10.00 s");
  EXPECT_EQ(madpipe::format_ms(12350), "12.35 s");
}

TEST(UnitsRoundTrip, FormattedBytesParseBack) {
  const std::vector<std::int64_t> sizes = {
      0, 1, 512, 1023, kKiB, 3 * kKiB / 2, 64 * kKiB, kMiB, 16 * kGiB, 80 * kGiB, kGiB * kKiB};
  for (const std::int64_t size : sizes) {
    const std::string text = madpipe::format_bytes(static_cast<double>(size));
    EXPECT_EQ(madpipe::parse_bytes(text), size) << text;
  }
}

TEST(UnitsRoundTrip, ParsedBytesFormatBack) {
  for (const char* text : {"16.0 GiB", "512 B", "1.5 KiB", "7.2 TiB", "80.0 GiB"}) {
    EXPECT_EQ(madpipe::format_bytes(static_cast<double>(madpipe::parse_bytes(text))), text);
  }
}

TEST(UnitsRoundTrip, FormattedBandwidthParsesBack) {
  for (const double bytes_per_ms : {12e6, 12.5e6, 0.9e6, 450e6, 1e4, 1.0, 0.5, 2e9}) {
    const std::string text = madpipe::format_bandwidth(bytes_per_ms);
    EXPECT_DOUBLE_EQ(madpipe::parse_bandwidth(text), bytes_per_ms) << text;
  }
}

TEST(FormatBytesUp, RoundsTheLastDigitUp) {
  EXPECT_EQ(madpipe::format_bytes_up(512), "512 B");
  EXPECT_EQ(madpipe::format_bytes_up(1024), "1.0 KiB");
  EXPECT_EQ(madpipe::format_bytes_up(1025), "1.1 KiB");
  EXPECT_EQ(madpipe::format_bytes_up(2.04 * 1024 * 1024 * 1024), "2.1 GiB");
  EXPECT_EQ(madpipe::format_bytes(2.04 * 1024 * 1024 * 1024), "2.0 GiB");
  EXPECT_EQ(madpipe::format_bytes_up(1023.99 * 1024), "1.0 MiB");
}
