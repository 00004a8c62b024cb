// `braid train --loss mse` end to end on real data: sklearn's diabetes table (442 patients,
// 10 measurements, a disease-progression score a year later) as Debian's python3-sklearn
// ships it, written as one CSV with a header; trained on the first 342 rows, tested on the
// last 100. The test MSE must fall well below predicting the training mean, computed here
// from the data; the run and `braid eval` report MSE and MAE, never an accuracy.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "run_braid.h"
#include "temp_dir.h"

namespace {

namespace fs = std::filesystem;
using braid::testing::run_braid;
using braid::testing::TempDir;
using nlohmann::json;

const std::string kData = "/usr/lib/python3/dist-packages/sklearn/datasets/data/";
constexpr size_t kTrainRows = 342;

// The rows of a space-separated .csv.gz, each a vector of numbers.
std::vector<std::vector<double>> read_gz_table(const std::string& path) {
  const std::string cmd = "gzip -dc '" + path + "'";
  FILE* pipe = popen(cmd.c_str(), "r");
  std::string text;
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), pipe)) text.append(buf.data(), n);
  pclose(pipe);
  std::vector<std::vector<double>> rows;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);
    std::vector<double> row;
    for (double v; fields >> v;) row.push_back(v);
    if (!row.empty()) rows.push_back(row);
  }
  return rows;
}

// The last evaluation record of a run's metrics.jsonl.
json last_eval(const std::string& out) {
  std::ifstream in(out + "/metrics.jsonl");
  json last;
  for (std::string line; std::getline(in, line);) {
    const json rec = json::parse(line, nullptr, false);
    if (rec.is_object() && rec.value("event", "") == "eval") last = rec;
  }
  return last;
}

TEST(RegressionCli, DiabetesMseFallsWellBelowTheMeanBaseline) {
  const std::string x_path = kData + "diabetes_data_raw.csv.gz";
  const std::string y_path = kData + "diabetes_target.csv.gz";
  if (!fs::exists(x_path) || !fs::exists(y_path))
    GTEST_SKIP() << x_path << " missing: apt-get install python3-sklearn";
  const auto x = read_gz_table(x_path);
  const auto y = read_gz_table(y_path);
  ASSERT_EQ(x.size(), 442u);
  ASSERT_EQ(y.size(), x.size());

  const TempDir tmp;
  const std::string header = "age,sex,bmi,bp,s1,s2,s3,s4,s5,s6,progression\n";
  std::ofstream train(tmp.file("train.csv")), test(tmp.file("test.csv"));
  train << header;
  test << header;
  double train_mean = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    std::ofstream& out = i < kTrainRows ? train : test;
    for (const double v : x[i]) out << v << ",";
    out << y[i][0] << "\n";
    if (i < kTrainRows) train_mean += y[i][0] / kTrainRows;
  }
  train.close();
  test.close();
  // The baseline: every test patient predicted at the training mean.
  double baseline = 0;
  for (size_t i = kTrainRows; i < y.size(); ++i)
    baseline += (y[i][0] - train_mean) * (y[i][0] - train_mean) / double(y.size() - kTrainRows);

  const json model{{"input", {10}},
                   {"layers",
                    {{{"type", "linear"}, {"out_features", 16}},
                     {{"type", "relu"}},
                     {{"type", "linear"}, {"out_features", 1}}}}};
  std::ofstream(tmp.file("config.json")) << json{{"model", model},
                                                 {"dataset", "csv"},
                                                 {"csv_train", tmp.file("train.csv")},
                                                 {"csv_test", tmp.file("test.csv")},
                                                 {"csv_label", "progression"},
                                                 {"csv_standardize", true},
                                                 {"optimizer", {{"name", "adam"}, {"lr", 0.05}}},
                                                 {"batch", 32},
                                                 {"epochs", 150},
                                                 {"eval_every", 0},
                                                 {"threads", 1},
                                                 {"seed", 1},
                                                 {"out", tmp.file("out")}};
  const auto r = run_braid("train --loss mse --config " + tmp.file("config.json"));
  ASSERT_EQ(r.code, 0) << r.output;
  const json e = last_eval(tmp.file("out"));
  ASSERT_TRUE(e.contains("mse") && e.contains("mae")) << e.dump();
  EXPECT_FALSE(e.contains("accuracy")) << e.dump();
  EXPECT_EQ(r.output.find("accuracy"), std::string::npos) << r.output;
  const double mse = e["mse"].get<double>();
  std::printf("diabetes: test MSE %.1f (MAE %.1f), the mean baseline %.1f\n", mse,
              e["mae"].get<double>(), baseline);
  EXPECT_LT(mse, 0.65 * baseline) << "baseline " << baseline;
  EXPECT_NEAR(e["loss"].get<double>(), mse, 1e-3 * mse);  // loss mse is the MSE
  json record;
  std::ifstream(tmp.file("out/data.json")) >> record;
  EXPECT_EQ(record["targets"], json{"progression"});

  // braid eval reads the loss from the checkpoint's config and says MSE and MAE.
  const auto ev = run_braid("eval --checkpoint " + tmp.file("out"));
  ASSERT_EQ(ev.code, 0) << ev.output;
  EXPECT_NE(ev.output.find("mse "), std::string::npos) << ev.output;
  EXPECT_NE(ev.output.find("mae "), std::string::npos) << ev.output;
  EXPECT_NE(ev.output.find("over 100 samples"), std::string::npos) << ev.output;
  EXPECT_EQ(ev.output.find("accuracy"), std::string::npos) << ev.output;

  // stop.metric mse stops the run once it is reached; accuracy is refused for regression.
  const auto stopped = run_braid("train --overwrite --loss mse --stop.metric mse --stop.target " +
                                 std::to_string(baseline) + " --config " + tmp.file("config.json"));
  ASSERT_EQ(stopped.code, 0) << stopped.output;
  EXPECT_NE(stopped.output.find("stop.target: mse "), std::string::npos) << stopped.output;
  const auto refused = run_braid("train --overwrite --loss mse --stop.metric accuracy --config " +
                                 tmp.file("config.json"));
  EXPECT_NE(refused.code, 0);
  EXPECT_NE(refused.output.find("a regression loss is evaluated by its loss, mse and mae"),
            std::string::npos)
      << refused.output;
}

// Several target columns (csv_targets) train one output each; the model's outputs must match.
TEST(RegressionCli, CsvTargetsAndAModelOfTheWrongWidth) {
  const TempDir tmp;
  std::string rows = "a,b,y1,y2\n";
  for (int i = 0; i < 64; ++i)
    rows += std::to_string(i % 7) + "," + std::to_string(i % 5) + "," + std::to_string(i % 7 * 2) +
            "," + std::to_string(i % 5 - i % 7) + "\n";
  std::ofstream(tmp.file("t.csv")) << rows;
  auto config = [&](int outputs) {
    return json{
        {"model", {{"input", {2}}, {"layers", {{{"type", "linear"}, {"out_features", outputs}}}}}},
        {"dataset", "csv"},
        {"csv_train", tmp.file("t.csv")},
        {"csv_targets", {"y1", "y2"}},
        {"loss", "huber"},
        {"batch", 8},
        {"max_steps", 40},
        {"optimizer", {{"name", "adam"}, {"lr", 0.05}}},
        {"out", tmp.file("out")}};
  };
  std::ofstream(tmp.file("c.json")) << config(2);
  auto r = run_braid("train --config " + tmp.file("c.json"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(last_eval(tmp.file("out")).contains("mae")) << r.output;
  std::ofstream(tmp.file("c.json")) << config(1);
  r = run_braid("train --overwrite --config " + tmp.file("c.json"));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("loss huber: the model outputs 1 value per sample but the training "
                          "targets have 2; end the model in {\"type\": \"linear\", "
                          "\"out_features\": 2}"),
            std::string::npos)
      << r.output;
  // A list of numbers as a flag: one weight per class, each a number.
  r = run_braid("train --loss-class-weights 1 x --config " + tmp.file("c.json"));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("'loss_class_weights' must be a list of numbers"), std::string::npos)
      << r.output;
}

}  // namespace
