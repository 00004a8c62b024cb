// CSV/TSV reading (see csv.h): a record reader over a gz stream, then a table builder
// that checks each record against the header as it arrives.
#include "data/csv.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <utility>

#include "core/error.h"

namespace braid::data {
namespace {

bool ends_with(const std::string& s, std::string_view tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// A value as an error message shows it: quoted, and cut short past 40 characters.
std::string quoted(const std::string& v) {
  if (v.size() <= 40) return detail::concat("'", v, "'");
  return detail::concat("'", v.substr(0, 40), "...' (", v.size(), " characters)");
}

// Streams records out of a (possibly gzipped) file. A record's fields come back unquoted;
// line() is the 1-based line the record began on.
class RecordReader {
 public:
  RecordReader(const std::string& path, char delimiter) : path_(path), delim_(delimiter) {
    errno = 0;
    file_ = gzopen(path.c_str(), "rb");
    if (!file_) {
      const int err = errno;
      BRAID_THROW(IoError, path, ": cannot open (", err ? std::strerror(err) : "out of memory",
                  ")");
    }
    gzbuffer(file_, 1 << 16);
    if (!ends_with(path, ".gz")) return;
    // A constructor that throws runs no destructor: the file is closed here.
    try {
      // gzopen reads a plain file as it is; a .gz name that is not gzip is a mistake.
      const int a = gzgetc(file_), b = gzgetc(file_);
      check_stream();
      if (a == -1) BRAID_THROW(IoError, path, ": empty file (no gzip data)");
      BRAID_CHECK(!gzdirect(file_), path, ": not a gzip file (it does not start with the gzip ",
                  "magic bytes 1f 8b); rename it without .gz or compress it with gzip");
      if (b != -1) gzungetc(b, file_);
      gzungetc(a, file_);
    } catch (...) {
      gzclose(file_);
      throw;
    }
  }
  ~RecordReader() { gzclose(file_); }
  RecordReader(const RecordReader&) = delete;
  RecordReader& operator=(const RecordReader&) = delete;

  // Passes over n physical lines; false when the file ends first.
  bool skip_lines(int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      for (;;) {
        const int c = get();
        if (c < 0) return false;
        if (c == '\n') break;
      }
      ++line_;
    }
    return true;
  }

  // The next record's fields; false at the end of the file. Empty lines are not records.
  bool next(std::vector<std::string>& fields) {
    fields.clear();
    for (;;) {
      record_line_ = line_;
      int c = get();
      if (c < 0) return false;
      if (first_) {
        first_ = false;
        if (c == 0xEF) {  // a UTF-8 byte-order mark
          const int b = get(), d = get();
          if (b == 0xBB && d == 0xBF)
            c = get();
          else
            BRAID_THROW(Error, path_, ":", line_, ": starts with byte 0xEF but no UTF-8 BOM");
          if (c < 0) return false;
        }
      }
      if (c == '\r') {
        const int d = get();
        if (d == '\n' || d < 0)
          c = d;
        else
          unget(d);
      }
      if (c == '\n') {
        ++line_;
        continue;  // an empty line
      }
      if (c < 0) return false;
      unget(c);
      break;
    }
    std::string field;
    enum class State { start, plain, quoted, quote_seen } state = State::start;
    for (;;) {
      const int c = get();
      if (c < 0) {
        BRAID_CHECK(state != State::quoted, path_, ":", quote_line_, ": field ", fields.size(),
                    " opens a quote that is never closed before the end of the file");
        fields.push_back(std::move(field));
        return true;
      }
      if (state == State::quoted) {
        if (c == '"')
          state = State::quote_seen;
        else {
          if (c == '\n') ++line_;
          field.push_back(static_cast<char>(c));
        }
        continue;
      }
      if (state == State::quote_seen && c == '"') {  // "" inside quotes
        field.push_back('"');
        state = State::quoted;
        continue;
      }
      if (c == '\r') {
        const int d = get();
        if (d == '\n' || d < 0) {
          unget(d);
          continue;
        }
        unget(d);
      }
      if (c == delim_) {
        fields.push_back(std::move(field));
        field.clear();
        state = State::start;
        continue;
      }
      if (c == '\n') {
        ++line_;
        fields.push_back(std::move(field));
        return true;
      }
      if (state == State::quote_seen)
        BRAID_THROW(Error, path_, ":", line_, ": field ", fields.size(), " has ",
                    quoted(std::string(1, static_cast<char>(c))),
                    " after its closing quote; a quote inside a quoted field is written \"\"");
      if (state == State::start && c == '"') {
        state = State::quoted;
        quote_line_ = line_;
        continue;
      }
      state = State::plain;
      field.push_back(static_cast<char>(c));
    }
  }

  int64_t line() const { return record_line_; }
  int64_t lines_read() const { return line_ - 1; }

 private:
  int get() {
    if (pending_ >= 0) {
      const int c = pending_;
      pending_ = -1;
      return c;
    }
    const int c = gzgetc(file_);
    if (c < 0) check_stream();
    return c;
  }
  void unget(int c) { pending_ = c; }

  // gzgetc's -1 is the end of the data or an error; a corrupt or truncated stream is an error.
  void check_stream() {
    int code = Z_OK;
    const char* msg = gzerror(file_, &code);
    if (code == Z_OK || code == Z_STREAM_END) return;
    BRAID_THROW(IoError, path_, ":", line_, ": the gzip stream is ",
                code == Z_BUF_ERROR ? "truncated" : "corrupt", " (", msg,
                "); download or compress the file again");
  }

  std::string path_;
  char delim_;
  gzFile file_ = nullptr;
  int pending_ = -1;
  bool first_ = true;
  int64_t line_ = 1, record_line_ = 1, quote_line_ = 1;
};

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool parse_float(std::string_view s, float& out) {
  s = trim(s);
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return !s.empty() && ec == std::errc() && end == s.data() + s.size() && std::isfinite(out);
}

bool parse_int(std::string_view s, int64_t& out) {
  s = trim(s);
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return !s.empty() && ec == std::errc() && end == s.data() + s.size();
}

// The label column's index among `names`: a name first, else an index (negative from the
// end), else an error listing the columns.
size_t label_column(const std::string& path, const std::vector<std::string>& names,
                    const std::string& label, bool header) {
  if (header)
    for (size_t i = 0; i < names.size(); ++i)
      if (names[i] == label) return i;
  const auto m = static_cast<int64_t>(names.size());
  int64_t index = 0;
  if (parse_int(label, index)) {
    BRAID_CHECK(index >= -m && index < m, path, ": csv_label ", label,
                " is not a column index: the file has ", m, " columns (0..", m - 1, ", or -", m,
                "..-1 from the end)");
    return static_cast<size_t>(index < 0 ? index + m : index);
  }
  std::string list;
  for (size_t i = 0; i < names.size() && i < 64; ++i)
    list += detail::concat(i ? ", " : "", quoted(names[i]));
  if (names.size() > 64) list += detail::concat(", ... (", names.size(), " in all)");
  BRAID_THROW(
      Error, path, ": no column named ", quoted(label), " for csv_label; ",
      header ? "the header's columns are " : "the file has no header (csv_header false), ",
      header ? list : std::string("so name the label column by index, e.g. -1 for the last"));
}

// load_csv with numeric targets: every column is a number, the target columns' in
// data.targets [n, K] and the rest in data.features. `fields` holds the first row when
// `have_row`.
CsvTable load_targets(const std::string& path, const CsvOptions& options, RecordReader& reader,
                      std::vector<std::string>& fields, const std::vector<std::string>& names,
                      bool have_row) {
  const size_t m = names.size();
  std::vector<size_t> target_of(m, SIZE_MAX);  // column -> its place among the targets
  CsvTable table;
  for (size_t k = 0; k < options.targets.size(); ++k) {
    const size_t j = label_column(path, names, options.targets[k], options.header);
    BRAID_CHECK(target_of[j] == SIZE_MAX, path, ": target column ", quoted(names[j]),
                " is named twice in csv_targets");
    target_of[j] = k;
    table.target_names.push_back(names[j]);
  }
  const size_t k_targets = options.targets.size();
  BRAID_CHECK(k_targets < m, path, ": every one of its ", m,
              " columns is a target; a table needs at least one feature");
  for (size_t j = 0; j < m; ++j)
    if (target_of[j] == SIZE_MAX) table.feature_names.push_back(names[j]);
  table.label_name = table.target_names.front();
  std::vector<float> features, targets, row(k_targets);
  int64_t n = 0;
  while (have_row || reader.next(fields)) {
    have_row = false;
    const int64_t line = reader.line();
    BRAID_CHECK(fields.size() == m, path, ":", line, ": the row has ", fields.size(),
                " fields where the ", options.header ? "header" : "first row", " has ", m);
    for (size_t j = 0; j < m; ++j) {
      float v = 0;
      BRAID_CHECK(parse_float(fields[j], v), path, ":", line, ": column ", j, " ", quoted(names[j]),
                  ": ", quoted(fields[j]), " is not a ",
                  trim(fields[j]).empty() ? "value (the field is empty)" : "finite number",
                  target_of[j] != SIZE_MAX ? " (a numeric target)" : "");
      if (target_of[j] != SIZE_MAX)
        row[target_of[j]] = v;
      else
        features.push_back(v);
    }
    targets.insert(targets.end(), row.begin(), row.end());
    ++n;
  }
  BRAID_CHECK(n > 0, path, ": empty file: a header but no rows after line ", reader.lines_read());
  const auto f = static_cast<int64_t>(m - k_targets), k = static_cast<int64_t>(k_targets);
  table.data.features = Tensor::empty({n, f}, DType::f32, MemCategory::data);
  std::copy(features.begin(), features.end(), table.data.features.data<float>());
  table.data.targets = Tensor::empty({n, k}, DType::f32, MemCategory::data);
  std::copy(targets.begin(), targets.end(), table.data.targets.data<float>());
  table.data.num_classes = static_cast<int32_t>(k);
  return table;
}

}  // namespace

char csv_delimiter(const std::string& path, char delimiter) {
  if (delimiter != 0) return delimiter;
  return ends_with(path, ".tsv") || ends_with(path, ".tsv.gz") || ends_with(path, ".tab") ? '\t'
                                                                                          : ',';
}

CsvTable load_csv(const std::string& path, const CsvOptions& options) {
  BRAID_CHECK(options.skip_rows >= 0, "csv_skip_rows must be >= 0, got ", options.skip_rows);
  const char delim = csv_delimiter(path, options.delimiter);
  RecordReader reader(path, delim);
  BRAID_CHECK(reader.skip_lines(options.skip_rows), path, ": the file has ", reader.lines_read(),
              " lines, fewer than csv_skip_rows ", options.skip_rows, " to skip");
  std::vector<std::string> fields;
  BRAID_CHECK(reader.next(fields), path, ": empty file: no ", options.header ? "header" : "rows",
              " after line ", reader.lines_read(),
              options.skip_rows ? detail::concat(" (csv_skip_rows ", options.skip_rows, ")") : "");
  std::vector<std::string> names;
  bool have_row = false;
  if (options.header) {
    names = fields;
  } else {
    for (size_t i = 0; i < fields.size(); ++i) names.push_back(std::to_string(i));
    have_row = true;
  }
  const size_t m = names.size();
  BRAID_CHECK(m >= 2, path, ":", reader.line(), ": ", options.header ? "the header" : "the row",
              " has ", m, " column; a table needs a label and at least one feature (is the ",
              "delimiter ", quoted(std::string(1, delim)), " right? set csv_delimiter)");
  if (!options.targets.empty()) return load_targets(path, options, reader, fields, names, have_row);
  const size_t label_col = label_column(path, names, options.label, options.header);

  CsvTable table;
  table.label_name = names[label_col];
  for (size_t j = 0; j < m; ++j)
    if (j != label_col) table.feature_names.push_back(names[j]);
  // The column a message names: its index, and its name when the file has a header.
  auto column = [&](size_t j) {
    return options.header ? detail::concat("column ", j, " ", quoted(names[j]))
                          : detail::concat("column ", j);
  };

  std::vector<float> features;
  std::vector<std::string> labels;
  std::vector<int64_t> label_lines;
  while (have_row || reader.next(fields)) {
    have_row = false;
    const int64_t line = reader.line();
    BRAID_CHECK(fields.size() == m, path, ":", line, ": the row has ", fields.size(),
                " fields where the ", options.header ? "header" : "first row", " has ", m,
                fields.size() > m ? detail::concat(" (field ", m, " is ", quoted(fields[m]), ")")
                                  : std::string());
    for (size_t j = 0; j < m; ++j) {
      if (j == label_col) continue;
      float v = 0;
      BRAID_CHECK(parse_float(fields[j], v), path, ":", line, ": ", column(j), ": ",
                  quoted(fields[j]), " is not a ",
                  trim(fields[j]).empty() ? "value (the field is empty)" : "finite number");
      features.push_back(v);
    }
    std::string label(trim(fields[label_col]));
    BRAID_CHECK(!label.empty(), path, ":", line, ": ", column(label_col), ": the label is empty");
    labels.push_back(std::move(label));
    label_lines.push_back(line);
  }
  const auto n = static_cast<int64_t>(labels.size());
  BRAID_CHECK(n > 0, path, ": empty file: a header but no rows after line ", reader.lines_read());

  // Integer labels are classes as they are, unless the caller gave class names.
  std::vector<int32_t> ids(labels.size());
  bool integers = options.classes == nullptr;
  for (size_t i = 0; integers && i < labels.size(); ++i) {
    int64_t v = 0;
    if (!parse_int(labels[i], v))
      integers = false;
    else {
      BRAID_CHECK(v >= 0 && v < (int64_t{1} << 31) - 1, path, ":", label_lines[i], ": ",
                  column(label_col), ": the label ", v,
                  " is not a class id (integer labels must be in 0..2^31-2)");
      ids[i] = static_cast<int32_t>(v);
    }
  }
  if (integers) {
    table.data.num_classes = *std::max_element(ids.begin(), ids.end()) + 1;
  } else {
    if (options.classes) {
      table.classes = *options.classes;
    } else {
      table.classes = labels;
      std::sort(table.classes.begin(), table.classes.end());
      table.classes.erase(std::unique(table.classes.begin(), table.classes.end()),
                          table.classes.end());
    }
    std::map<std::string_view, int32_t> id_of;
    for (size_t c = 0; c < table.classes.size(); ++c)
      id_of.emplace(table.classes[c], static_cast<int32_t>(c));
    for (size_t i = 0; i < labels.size(); ++i) {
      const auto it = id_of.find(labels[i]);
      BRAID_CHECK(it != id_of.end(), path, ":", label_lines[i], ": ", column(label_col),
                  ": the label ", quoted(labels[i]), " is not one of the training file's classes (",
                  table.classes.size(), ")");
      ids[i] = it->second;
    }
    table.data.num_classes = static_cast<int32_t>(table.classes.size());
  }

  const auto f = static_cast<int64_t>(m - 1);
  table.data.features = Tensor::empty({n, f}, DType::f32, MemCategory::data);
  std::copy(features.begin(), features.end(), table.data.features.data<float>());
  table.data.labels = Tensor::empty({n}, DType::i32, MemCategory::data);
  std::copy(ids.begin(), ids.end(), table.data.labels.data<int32_t>());
  return table;
}

FeatureScale feature_scale(const Tensor& features) {
  BRAID_CHECK(features.shape().rank() == 2, "feature_scale takes features [n, f], got ",
              features.shape().str());
  const int64_t n = features.dim(0), f = features.dim(1);
  const float* x = features.data<float>();
  std::vector<double> sum(static_cast<size_t>(f), 0.0), sq(static_cast<size_t>(f), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < f; ++j) sum[static_cast<size_t>(j)] += x[i * f + j];
  FeatureScale s;
  for (int64_t j = 0; j < f; ++j)
    s.mean.push_back(static_cast<float>(sum[static_cast<size_t>(j)] / static_cast<double>(n)));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < f; ++j) {
      const double d = x[i * f + j] - static_cast<double>(s.mean[static_cast<size_t>(j)]);
      sq[static_cast<size_t>(j)] += d * d;
    }
  for (int64_t j = 0; j < f; ++j) {
    const double sd = std::sqrt(sq[static_cast<size_t>(j)] / static_cast<double>(n));
    s.std.push_back(sd > 0 ? static_cast<float>(sd) : 1.0f);
  }
  return s;
}

void standardize(Tensor& features, const FeatureScale& scale) {
  const int64_t n = features.dim(0), f = features.dim(1);
  BRAID_CHECK(static_cast<int64_t>(scale.mean.size()) == f, "standardize: ", f,
              " features but a scale of ", scale.mean.size());
  float* x = features.data<float>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < f; ++j)
      x[i * f + j] =
          (x[i * f + j] - scale.mean[static_cast<size_t>(j)]) / scale.std[static_cast<size_t>(j)];
}

}  // namespace braid::data
