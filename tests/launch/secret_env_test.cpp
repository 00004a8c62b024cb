// read_secret over a fake environment: BRAID_SECRET before BRAID_SECRET_FILE before
// nothing, and errors that name the variable without echoing the secret.
#include "launch/secret_env.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <map>
#include <string>

#include "core/error.h"
#include "fake_env.h"
#include "temp_dir.h"

namespace braid::launch {
namespace {

using testing::fake;
using testing::Vars;

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Secrets of exactly the minimum length, 16 bytes.
const std::string kHexA = "000102030405060708090a0b0c0d0e0f";
const std::string kHexB = "f0e0d0c0b0a090807060504030201000";

std::string write_file(const testing::TempDir& dir, const std::string& name,
                       const std::string& text, mode_t mode = 0600) {
  const std::string path = dir.file(name);
  std::ofstream(path) << text;
  EXPECT_EQ(::chmod(path.c_str(), mode), 0);
  return path;
}

std::string error_of(const Vars& vars) {
  try {
    read_secret(fake(vars));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ReadSecret, PrefersBraidSecretThenTheFileThenNothing) {
  const testing::TempDir dir;
  const std::string file = write_file(dir, "f", kHexA + "\n");
  EXPECT_TRUE(read_secret(fake({})).empty());
  EXPECT_EQ(read_secret(fake({{"BRAID_SECRET_FILE", file}})).hex(), kHexA);
  EXPECT_EQ(read_secret(fake({{"BRAID_SECRET_FILE", file}, {"BRAID_SECRET", kHexB}})).hex(), kHexB);
  // An empty value counts as unset, so `BRAID_SECRET= cmd` clears an inherited one.
  EXPECT_EQ(read_secret(fake({{"BRAID_SECRET_FILE", file}, {"BRAID_SECRET", ""}})).hex(), kHexA);
  EXPECT_EQ(read_secret(fake({{"BRAID_SECRET", " " + kHexB + "\n"}})).hex(), kHexB);
}

TEST(ReadSecret, BadOrShortValuesNameTheVariableWithoutEchoingTheSecret) {
  const std::string odd = error_of({{"BRAID_SECRET", "caf"}});
  EXPECT_TRUE(contains(odd, "BRAID_SECRET")) << odd;
  const std::string short_hex = kHexA.substr(2);  // 15 bytes
  const std::string short_error = error_of({{"BRAID_SECRET", short_hex}});
  EXPECT_TRUE(contains(short_error, "the secret in BRAID_SECRET")) << short_error;
  EXPECT_TRUE(contains(short_error, "15 bytes")) << short_error;
  EXPECT_TRUE(contains(short_error, "at least 16")) << short_error;
  EXPECT_TRUE(contains(short_error, "openssl rand -hex 32")) << short_error;
  EXPECT_FALSE(contains(short_error, short_hex)) << short_error;
}

TEST(ReadSecret, FileErrorsNameTheVariableAndTheFile) {
  const testing::TempDir dir;
  const std::string short_file = write_file(dir, "short", "beef\n");
  const std::string short_error = error_of({{"BRAID_SECRET_FILE", short_file}});
  EXPECT_TRUE(contains(short_error, "BRAID_SECRET_FILE: ")) << short_error;
  EXPECT_TRUE(contains(short_error, short_file)) << short_error;
  EXPECT_TRUE(contains(short_error, "2 bytes")) << short_error;

  const std::string shared = write_file(dir, "shared", kHexA, 0644);
  const std::string shared_error = error_of({{"BRAID_SECRET_FILE", shared}});
  EXPECT_TRUE(contains(shared_error, "BRAID_SECRET_FILE: ")) << shared_error;
  EXPECT_TRUE(contains(shared_error, "chmod 600 " + shared)) << shared_error;

  const std::string missing = dir.file("missing");
  try {
    read_secret(fake({{"BRAID_SECRET_FILE", missing}}));
    ADD_FAILURE() << "a missing secret file was accepted";
  } catch (const IoError& e) {
    EXPECT_TRUE(contains(e.what(), "BRAID_SECRET_FILE: ")) << e.what();
    EXPECT_TRUE(contains(e.what(), missing)) << e.what();
  }
}

}  // namespace
}  // namespace braid::launch
