// `braid train` on a CSV table (dataset csv): sklearn's iris as Debian's python3-sklearn
// ships it, trained by a small JSON model on one thread; and text labels recorded in
// OUT/data.json beside the config.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "run_braid.h"
#include "temp_dir.h"

namespace {

namespace fs = std::filesystem;
using braid::testing::run_braid;
using braid::testing::TempDir;
using nlohmann::json;

const std::string kIris = "/usr/lib/python3/dist-packages/sklearn/datasets/data/iris.csv";

// The last evaluation's accuracy in a run's metrics.jsonl (-1 when there is none).
double last_accuracy(const std::string& out) {
  std::ifstream in(out + "/metrics.jsonl");
  double acc = -1;
  for (std::string line; std::getline(in, line);) {
    const json rec = json::parse(line, nullptr, false);
    if (rec.is_object() && rec.contains("accuracy")) acc = rec["accuracy"].get<double>();
  }
  return acc;
}

json mlp(int in, int classes) {
  return json{{"input", {in}},
              {"layers",
               {{{"type", "linear"}, {"out_features", 16}},
                {{"type", "relu"}},
                {{"type", "linear"}, {"out_features", classes}}}}};
}

TEST(CsvCli, IrisTrainsToNinetyPercent) {
  if (!fs::exists(kIris))
    GTEST_SKIP() << kIris << " missing: apt-get install python3-sklearn "
                 << "(scripts/setup.sh --test-packages does)";
  const TempDir tmp;
  std::ofstream(tmp.file("config.json"))
      << json{{"model", mlp(4, 3)},
              {"dataset", "csv"},
              {"csv_train", kIris},
              {"csv_skip_rows", 1},
              {"csv_header", false},
              {"csv_label", "-1"},
              {"csv_standardize", true},
              {"optimizer", {{"name", "adam"}, {"lr", 0.01}}},
              {"batch", 16},
              {"epochs", 40},
              {"threads", 1},
              {"seed", 2},  // its held-out fold: 0.967 at 40 epochs
              {"out", tmp.file("out")}};
  const auto r = run_braid("train --config " + tmp.file("config.json"));
  ASSERT_EQ(r.code, 0) << r.output;
  // The held-out fold: 30 of the 150 rows.
  EXPECT_GE(last_accuracy(tmp.file("out")), 0.9) << r.output;
  json record;
  std::ifstream(tmp.file("out/data.json")) >> record;
  EXPECT_EQ(record["num_classes"], 3);
  EXPECT_EQ(record["label"], "4");
  EXPECT_EQ(record["standardize"]["mean"].size(), 4u);
  EXPECT_FALSE(record.contains("classes"));  // integer labels
}

TEST(CsvCli, TextLabelsRecordedAndErrorsNameTheLine) {
  const TempDir tmp;
  std::string rows = "width,height,kind\n";
  for (int i = 0; i < 40; ++i)
    rows += std::to_string(i % 4) + "," + std::to_string(i % 5) + "," +
            (i % 2 ? "square" : "circle") + "\n";
  std::ofstream(tmp.file("train.csv")) << rows;
  std::ofstream(tmp.file("test.csv")) << "width,height,kind\n1,2,square\n3,4,circle\n";
  const json config{{"model", mlp(2, 2)},     {"dataset", "csv"},      {"csv_train", "train.csv"},
                    {"csv_test", "test.csv"}, {"csv_label", "kind"},   {"batch", 8},
                    {"max_steps", 3},         {"out", tmp.file("out")}};
  std::ofstream(tmp.file("config.json")) << config;
  auto r = run_braid("train --config " + tmp.file("config.json"), "cd / &&");
  ASSERT_EQ(r.code, 0) << r.output;
  json record;
  std::ifstream(tmp.file("out/data.json")) >> record;
  EXPECT_EQ(record["classes"], (json{"circle", "square"}));
  EXPECT_EQ(record["features"], (json{"width", "height"}));

  std::ofstream(tmp.file("test.csv")) << "width,height,kind\n1,2,square\n3,x4,circle\n";
  r = run_braid("train --overwrite --config " + tmp.file("config.json"));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("test.csv:3: column 1 'height': 'x4' is not a finite number"),
            std::string::npos)
      << r.output;
}

}  // namespace
