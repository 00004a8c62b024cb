// The CSV/TSV reader (data/csv.h): sklearn's bundled tables read as Debian's python3-sklearn
// ships them, small hand-written tables for each option, and every error naming its line
// and column.
#include "data/csv.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "test_files.h"

namespace braid::data {
namespace {

using testing_util::TempDir;
using testing_util::write_file;
using testing_util::write_gz;

const std::string kSklearn = "/usr/lib/python3/dist-packages/sklearn/datasets/data/";

#define REQUIRE_SKLEARN_DATA(file)                             \
  if (!std::filesystem::exists(kSklearn + (file)))             \
  GTEST_SKIP() << kSklearn << (file)                           \
               << " missing: apt-get install python3-sklearn " \
                  "(scripts/setup.sh --test-packages does)"

std::vector<int64_t> class_counts(const ArrayDataset& d) {
  std::vector<int64_t> counts(static_cast<size_t>(d.num_classes), 0);
  const int32_t* l = d.labels.data<int32_t>();
  for (int64_t i = 0; i < d.size(); ++i) ++counts[static_cast<size_t>(l[i])];
  return counts;
}

// sklearn's first line is metadata (n_samples, n_features, class names), not a header.
CsvOptions sklearn_options() {
  CsvOptions o;
  o.skip_rows = 1;
  o.header = false;
  return o;
}

TEST(CsvSklearn, Iris) {
  REQUIRE_SKLEARN_DATA("iris.csv");
  const CsvTable t = load_csv(kSklearn + "iris.csv", sklearn_options());
  ASSERT_EQ(t.data.features.shape(), (Shape{150, 4}));
  EXPECT_EQ(t.data.num_classes, 3);
  EXPECT_EQ(class_counts(t.data), (std::vector<int64_t>{50, 50, 50}));
  EXPECT_TRUE(t.classes.empty());  // integer labels
  const float* x = t.data.features.data<float>();
  EXPECT_FLOAT_EQ(x[0], 5.1f);
  EXPECT_FLOAT_EQ(x[1], 3.5f);
  EXPECT_FLOAT_EQ(x[2], 1.4f);
  EXPECT_FLOAT_EQ(x[3], 0.2f);
  EXPECT_EQ(t.data.labels.data<int32_t>()[0], 0);
  EXPECT_EQ(t.data.labels.data<int32_t>()[149], 2);
  EXPECT_EQ(t.label_name, "4");
  EXPECT_EQ(t.feature_names, (std::vector<std::string>{"0", "1", "2", "3"}));
}

TEST(CsvSklearn, Wine) {
  REQUIRE_SKLEARN_DATA("wine_data.csv");
  const CsvTable t = load_csv(kSklearn + "wine_data.csv", sklearn_options());
  ASSERT_EQ(t.data.features.shape(), (Shape{178, 13}));
  EXPECT_EQ(class_counts(t.data), (std::vector<int64_t>{59, 71, 48}));
  EXPECT_FLOAT_EQ(t.data.features.data<float>()[0], 14.23f);
  EXPECT_FLOAT_EQ(t.data.features.data<float>()[12], 1065.0f);
}

TEST(CsvSklearn, BreastCancer) {
  REQUIRE_SKLEARN_DATA("breast_cancer.csv");
  const CsvTable t = load_csv(kSklearn + "breast_cancer.csv", sklearn_options());
  ASSERT_EQ(t.data.features.shape(), (Shape{569, 30}));
  EXPECT_EQ(class_counts(t.data), (std::vector<int64_t>{212, 357}));
  EXPECT_FLOAT_EQ(t.data.features.data<float>()[0], 17.99f);
}

TEST(CsvSklearn, DigitsGzipNoHeader) {
  REQUIRE_SKLEARN_DATA("digits.csv.gz");
  CsvOptions o;
  o.header = false;
  o.label = "-1";
  const CsvTable t = load_csv(kSklearn + "digits.csv.gz", o);
  ASSERT_EQ(t.data.features.shape(), (Shape{1797, 64}));
  EXPECT_EQ(t.data.num_classes, 10);
  EXPECT_EQ(class_counts(t.data)[0], 178);
  EXPECT_EQ(t.data.labels.data<int32_t>()[0], 0);
  EXPECT_FLOAT_EQ(t.data.features.data<float>()[2], 5.0f);  // 0,0,5,13,9,...
  EXPECT_EQ(t.label_name, "64");
}

TEST(CsvReader, HeaderLabelByNameAnywhere) {
  TempDir dir;
  const std::string p = dir.file("t.csv");
  write_file(p, "a,y,b\n1,2,3\n4,0,5.5\n");
  CsvOptions o;
  o.label = "y";
  const CsvTable t = load_csv(p, o);
  ASSERT_EQ(t.data.features.shape(), (Shape{2, 2}));
  EXPECT_EQ(t.feature_names, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(t.label_name, "y");
  const float* x = t.data.features.data<float>();
  EXPECT_EQ((std::vector<float>{x[0], x[1], x[2], x[3]}), (std::vector<float>{1, 3, 4, 5.5f}));
  EXPECT_EQ(t.data.labels.data<int32_t>()[0], 2);
  EXPECT_EQ(t.data.num_classes, 3);
  o.label = "0";  // an index
  EXPECT_EQ(load_csv(p, o).label_name, "a");
}

TEST(CsvReader, TextLabelsMappedInSortedOrder) {
  TempDir dir;
  const std::string p = dir.file("t.csv");
  write_file(p, "x,species\n1,versicolor\n2,setosa\n3,virginica\n4,setosa\n");
  const CsvTable t = load_csv(p);
  EXPECT_EQ(t.classes, (std::vector<std::string>{"setosa", "versicolor", "virginica"}));
  const int32_t* l = t.data.labels.data<int32_t>();
  EXPECT_EQ((std::vector<int32_t>{l[0], l[1], l[2], l[3]}), (std::vector<int32_t>{1, 0, 2, 0}));
  EXPECT_EQ(t.data.num_classes, 3);
  // A test file takes the training file's classes; one it lacks is an error on its line.
  const std::string q = dir.file("q.csv");
  write_file(q, "x,species\n1,virginica\n2,setosa\n");
  CsvOptions o;
  o.classes = &t.classes;
  const CsvTable u = load_csv(q, o);
  EXPECT_EQ(u.data.labels.data<int32_t>()[0], 2);
  EXPECT_EQ(u.data.num_classes, 3);
  write_file(q, "x,species\n1,virginica\n2,oak\n");
  try {
    load_csv(q, o);
    FAIL() << "an unknown class was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("q.csv:3: column 1 'species'"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("'oak'"), std::string::npos) << e.what();
  }
}

TEST(CsvReader, QuotingCrlfBomAndBlankLines) {
  TempDir dir;
  const std::string p = dir.file("t.csv");
  write_file(p,
             "\xEF\xBB\xBF\"first, col\",\"label\"\r\n"
             "\"1.5\",\"a \"\"quoted\"\" name\"\r\n"
             "\r\n"
             "2,\"two\nlines\"\r\n"
             "3,plain\r\n");
  CsvOptions o;
  o.label = "label";
  const CsvTable t = load_csv(p, o);
  EXPECT_EQ(t.feature_names, (std::vector<std::string>{"first, col"}));
  EXPECT_EQ(t.classes, (std::vector<std::string>{"a \"quoted\" name", "plain", "two\nlines"}));
  ASSERT_EQ(t.data.size(), 3);
  EXPECT_FLOAT_EQ(t.data.features.data<float>()[0], 1.5f);
  EXPECT_FLOAT_EQ(t.data.features.data<float>()[2], 3.0f);
}

TEST(CsvReader, TsvByExtensionAndGzip) {
  TempDir dir;
  const std::string text = "f1\tf2\tclass\n0.5\t1\t1\n-2\t3e2\t0\n";
  write_file(dir.file("t.tsv"), text);
  write_gz(dir.file("t.tsv.gz"), text);
  for (const char* name : {"t.tsv", "t.tsv.gz"}) {
    const CsvTable t = load_csv(dir.file(name));
    ASSERT_EQ(t.data.features.shape(), (Shape{2, 2})) << name;
    EXPECT_FLOAT_EQ(t.data.features.data<float>()[3], 300.0f) << name;
    EXPECT_EQ(t.label_name, "class");
  }
  CsvOptions semi;
  semi.delimiter = ';';
  write_file(dir.file("s.csv"), "a;b\n1;0\n");
  EXPECT_EQ(load_csv(dir.file("s.csv"), semi).data.size(), 1);
}

TEST(CsvReader, SkipRowsAndNoHeader) {
  TempDir dir;
  const std::string p = dir.file("t.csv");
  write_file(p, "# made by hand\nmeta,data,\"line\n1,2,0\n3,4,1\n");
  CsvOptions o;
  o.skip_rows = 2;
  o.header = false;
  const CsvTable t = load_csv(p, o);
  ASSERT_EQ(t.data.size(), 2);
  EXPECT_FLOAT_EQ(t.data.features.data<float>()[0], 1.0f);
  EXPECT_EQ(t.data.labels.data<int32_t>()[1], 1);
}

TEST(CsvReader, Standardize) {
  TempDir dir;
  const std::string p = dir.file("t.csv");
  write_file(p, "a,b,y\n1,5,0\n3,5,1\n");
  CsvTable t = load_csv(p);
  const FeatureScale s = feature_scale(t.data.features);
  EXPECT_EQ(s.mean, (std::vector<float>{2, 5}));
  EXPECT_EQ(s.std, (std::vector<float>{1, 1}));  // b is constant: 1, not 0
  standardize(t.data.features, s);
  const float* x = t.data.features.data<float>();
  EXPECT_EQ((std::vector<float>{x[0], x[1], x[2], x[3]}), (std::vector<float>{-1, 0, 1, 0}));
}

// The error load_csv throws on `text`, written to `name`.
std::string error_for(const std::string& name, const std::string& text, CsvOptions o = {},
                      bool gz = false) {
  TempDir dir;
  const std::string p = dir.file(name);
  if (gz)
    write_gz(p, text);
  else
    write_file(p, text);
  try {
    load_csv(p, o);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)

TEST(CsvErrors, RaggedRowNamesLineAndCounts) {
  const std::string e = error_for("r.csv", "a,b,y\n1,2,0\n1,2\n");
  EXPECT_HAS(e, "r.csv:3: the row has 2 fields where the header has 3");
  const std::string more = error_for("r.csv", "a,b,y\n1,2,0,9\n");
  EXPECT_HAS(more, "r.csv:2: the row has 4 fields where the header has 3 (field 3 is '9')");
}

TEST(CsvErrors, NonNumericFeatureQuoted) {
  const std::string e = error_for("n.csv", "a,b,y\n1,2,0\n\n1,abc,0\n");
  EXPECT_HAS(e, "n.csv:4: column 1 'b': 'abc' is not a finite number");
  const std::string empty = error_for("n.csv", "a,b,y\n1,,0\n");
  EXPECT_HAS(empty, "n.csv:2: column 1 'b': '' is not a value (the field is empty)");
  CsvOptions no_header;
  no_header.header = false;
  const std::string nan = error_for("n.csv", "1,nan,0\n", no_header);
  EXPECT_HAS(nan, "n.csv:1: column 1: 'nan' is not a finite number");
}

TEST(CsvErrors, EmptyLabel) {
  const std::string e = error_for("l.csv", "a,y\n1,0\n2, \n");
  EXPECT_HAS(e, "l.csv:3: column 1 'y': the label is empty");
}

TEST(CsvErrors, NegativeIntegerLabel) {
  const std::string e = error_for("l.csv", "a,y\n1,0\n2,-3\n");
  EXPECT_HAS(e, "l.csv:3: column 1 'y': the label -3 is not a class id");
}

TEST(CsvErrors, MissingLabelColumnListsColumns) {
  CsvOptions o;
  o.label = "target";
  const std::string e = error_for("m.csv", "sepal,petal,species\n1,2,a\n", o);
  EXPECT_HAS(e,
             "no column named 'target' for csv_label; the header's columns are 'sepal', "
             "'petal', 'species'");
  o.label = "5";
  EXPECT_HAS(error_for("m.csv", "a,y\n1,0\n", o), "csv_label 5 is not a column index");
}

TEST(CsvErrors, EmptyFiles) {
  EXPECT_HAS(error_for("e.csv", ""), "e.csv: empty file: no header");
  EXPECT_HAS(error_for("e.csv", "a,y\n"), "e.csv: empty file: a header but no rows");
  CsvOptions skip;
  skip.skip_rows = 3;
  EXPECT_HAS(error_for("e.csv", "x\ny\n", skip), "fewer than csv_skip_rows 3");
  EXPECT_HAS(error_for("e.csv.gz", "", {}, true), "e.csv.gz: empty file");
}

TEST(CsvErrors, BadGzip) {
  EXPECT_HAS(error_for("g.csv.gz", "a,y\n1,0\n"), "g.csv.gz: not a gzip file");
  // A real gzip stream cut short.
  TempDir dir;
  std::string rows = "a,y\n";
  for (int i = 0; i < 2000; ++i) rows += std::to_string(i) + "," + std::to_string(i % 3) + "\n";
  write_gz(dir.file("full.csv.gz"), rows);
  const std::string bytes = testing_util::read_file(dir.file("full.csv.gz"));
  write_file(dir.file("cut.csv.gz"), bytes.substr(0, bytes.size() / 2));
  try {
    load_csv(dir.file("cut.csv.gz"));
    FAIL() << "a truncated gzip stream was accepted";
  } catch (const Error& e) {
    EXPECT_HAS(std::string(e.what()), "cut.csv.gz:");
    EXPECT_HAS(std::string(e.what()), "the gzip stream is");
  }
}

TEST(CsvErrors, UnterminatedQuoteAndJunkAfterQuote) {
  EXPECT_HAS(error_for("q.csv", "a,y\n1,\"open\n2,0\n"),
             "q.csv:2: field 1 opens a quote that is never closed");
  EXPECT_HAS(error_for("q.csv", "a,y\n\"1\"x,0\n"),
             "q.csv:2: field 0 has 'x' after its closing quote");
}

TEST(CsvErrors, OneColumnSuggestsDelimiter) {
  EXPECT_HAS(error_for("d.csv", "a;y\n1;0\n"), "is the delimiter ',' right? set csv_delimiter");
}

}  // namespace
}  // namespace braid::data
