// Reader for delimited text tables (CSV, TSV; RFC 4180 quoting), so users can train on a
// spreadsheet's export: numeric feature columns and one label column.
//
// The file is streamed once through zlib's gz* functions (so a .gz file is read as it is,
// and a plain file straight), a record at a time: fields split on the delimiter, a field in
// double quotes may hold the delimiter, newlines and "" for a quote; CRLF line ends are
// read as LF, a UTF-8 byte-order mark at the start is dropped, and lines with nothing on
// them are not records. Before the table, `skip_rows` physical lines are passed over (e.g.
// sklearn's metadata line "150,4,setosa,versicolor,virginica"). The first record is then
// the header (column names) unless `header` is false, when columns are named by index
// ("0", "1", ...).
//
// Every column but the label is a feature, parsed as a finite number into f32. Labels:
// when every label is a non-negative integer, the labels are those integers; otherwise each
// distinct label text is a class, numbered in the sorted order of the names, and the names
// come back in CsvTable::classes so a run can record them.
//
// Every problem is a braid::Error naming the file, the line (1-based, counting skipped
// lines) and, for a field, the column's index (0-based, as csv_label takes it) and name:
// a row with a different number of fields than the header, a feature that is not a number,
// an empty label, a label column that is not there (the columns are listed), an empty
// file, an unterminated quote, a corrupt gzip stream. Nothing is skipped silently.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace braid::data {

struct CsvOptions {
  char delimiter = 0;        // 0: '\t' for a .tsv or .tsv.gz file, else ','
  bool header = true;        // the first record (after skip_rows) names the columns
  int64_t skip_rows = 0;     // physical lines passed over before the table
  std::string label = "-1";  // a column name, or an index (negative from the end)
  // Where set, labels are these class names (a training file's), and a label outside them
  // is an error naming its line; integer labels are then taken as names too.
  const std::vector<std::string>* classes = nullptr;
  // Non-empty: no class label; these columns (names or indices, as `label`) are numeric
  // targets, parsed as finite numbers into CsvTable::data.targets, f32 [n, K] in this order.
  std::vector<std::string> targets;
};

struct CsvTable {
  ArrayDataset data;  // features f32 [n, features], labels i32 [n] (or targets f32 [n, K])
  std::vector<std::string> feature_names;  // in column order, the label column left out
  std::string label_name;
  std::vector<std::string> target_names;  // with CsvOptions::targets, their columns' names
  std::vector<std::string> classes;       // class id -> name; empty when the labels are integers
};

// The delimiter `options` implies for `path`.
char csv_delimiter(const std::string& path, char delimiter);

CsvTable load_csv(const std::string& path, const CsvOptions& options = {});

// Per-feature mean and standard deviation (population, as sklearn's StandardScaler; a
// constant feature's is taken as 1) of features [n, f]; standardize() maps x to
// (x - mean) / std in place.
struct FeatureScale {
  std::vector<float> mean, std;
};
FeatureScale feature_scale(const Tensor& features);
void standardize(Tensor& features, const FeatureScale& scale);

}  // namespace braid::data
