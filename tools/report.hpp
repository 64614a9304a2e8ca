// tools/report.hpp — `ckpt report PATH -o FILE`: one self-contained HTML page about a
// checkpoint or a manager's root, to open in a browser (no network access: the data is
// embedded as JSON and drawn by an inline script; report_template.hpp).
//
// Part of the ckpt tool's translation unit: ckpt_cli.cpp includes it after its helpers,
// whose figures it gathers, so that every figure is computed once, by the function the
// matching command prints: bytes per subtree (du_node, as `ckpt du`), the statistics of
// each leaf (stats_table, as `ckpt stats`), how far each leaf moved between consecutive
// steps (diff_json, as `ckpt diff --rel`), the steps and their metrics (steps_of and the
// manager's load_step_info, as `ckpt ls`), and TensorBoard scalars (ckpt::tensorboard).
#pragma once

#include "report_template.hpp"

#include <fstream>
#include <unordered_map>

namespace {

// JSON to embed in a <script> element: '<', '>' and '&' (which JSON holds only inside
// strings) as \u escapes, so that no name from a checkpoint can end the element
// (`</script>`) or open a comment (`<!--`) that changes how the page parses.
std::string script_json(const json& j) {
  const std::string s = dump(j);
  std::string out;
  out.reserve(s.size());
  for (const char c : s) {
    if (c == '<') out += "\\u003c";
    else if (c == '>') out += "\\u003e";
    else if (c == '&') out += "\\u0026";
    else out += c;
  }
  return out;
}

// The scalars of the event files in `dir` (tag) and in each directory under it, a run as
// TensorBoard's log directory holds them ("run/tag", as t5x names a metric):
// {name: [[step, value], ...]}, a value that is not finite as null.
json tensorboard_json(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw BadInput(dir.string() + ": not a directory (--tensorboard)");
  json out = json::object();
  const auto add = [&](const fs::path& d, const std::string& run) {
    for (const auto& [tag, values] : ckpt::tensorboard::read_all_scalars(d)) {
      json points = json::array();
      for (const auto& [step, v] : values) points.push_back({step, num_or_null(v)});
      out[run.empty() ? tag : run + "/" + tag] = std::move(points);
    }
  };
  add(dir, "");
  std::vector<fs::path> runs;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (std::error_code e2; it->is_directory(e2) && !it->is_symlink(e2)) runs.push_back(it->path());
  std::sort(runs.begin(), runs.end());
  for (const auto& r : runs) add(r, r.filename().string());
  if (out.empty())
    std::fprintf(stderr, "ckpt report: no scalars in the event files (events.out.tfevents.*) of %s or its subdirectories\n",
                 printable(dir.string()).c_str());
  return out;
}

// One checkpoint's part: its bytes per subtree (the whole tree) and its leaves with their
// bytes and statistics.
json report_checkpoint(const std::shared_ptr<const ckpt::Index>& index, std::uint64_t max_memory, Bar& bar) {
  StatsTable t = stats_table(index, max_memory, bar);
  std::unordered_map<std::string, const ckpt::IndexEntry*> by_path;
  for (const auto& e : index->entries()) by_path.emplace(e.path.str(), &e);
  for (auto& row : t.leaves) row["bytes"] = leaf_bytes(*by_path.at(row["path"].get<std::string>()));
  return {{"format", index->info().format},
          {"tree", du_node(*index, ckpt::Path(), std::numeric_limits<int>::max())},
          {"leaves", std::move(t.leaves)},
          {"total", stats_json(t.total)}};
}

int cmd_report(const fs::path& p, const fs::path& out, const std::string& tensorboard, std::uint64_t max_memory) {
  const bool root = is_root(p);
  const auto steps = root ? steps_of(p) : std::vector<std::pair<std::string, fs::path>>{{p.string(), p}};
  // Every index first (metadata only): a step that cannot be read stops before the work.
  std::vector<std::shared_ptr<const ckpt::Index>> index;
  std::uint64_t work = 0;
  for (const auto& [name, path] : steps) {
    index.push_back(open(path));
    work += total_bytes(*index.back()) * (index.size() == 1 ? 1 : 2);  // its statistics, and compared with the step before
  }
  json data = {{"path", p.string()}, {"root", root}, {"tensorboard", json::object()}};
  if (!tensorboard.empty()) data["tensorboard"] = tensorboard_json(tensorboard);
  json rows = json::array();
  {
    Bar bar("report", work);
    const auto dir = !root                         ? ckpt::storage::Location{}
                     : ckpt::storage::is_url(p)   ? ckpt::storage::open_location(p)
                                                  : ckpt::storage::directory_location(p);
    for (std::size_t i = 0; i < steps.size(); ++i) {
      json s = report_checkpoint(index[i], max_memory, bar);
      s["name"] = steps[i].first;
      if (root) {
        const auto step = ckpt::StepNaming::trailing_step(steps[i].first);
        s["step"] = step ? json(*step) : json(nullptr);
        const auto info = ckpt::detail::manager::load_step_info(dir.child(steps[i].first), steps[i].first);
        json metrics = json::object();
        for (const auto& [k, v] : info.metrics) metrics[k] = num_or_null(v);
        s["metrics"] = std::move(metrics);
        if (info.time != std::chrono::system_clock::time_point{})
          s["time"] = std::chrono::duration<double>(info.time.time_since_epoch()).count();
      }
      if (i > 0) s["moved"] = diff_json(index[i - 1], index[i], max_memory, bar)["moved"];  // from the step before
      rows.push_back(std::move(s));
    }
  }
  data["steps"] = std::move(rows);

  std::string html(report_template);
  const std::size_t at = html.find(report_data_marker);
  html.replace(at, report_data_marker.size(), script_json(data));
  // Written beside the target and renamed onto it: a reader never sees half a page.
  const fs::path tmp = out.string() + ".tmp-" + std::to_string(::getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f.write(html.data(), static_cast<std::streamsize>(html.size()));
    f.close();
    if (!f) {
      std::error_code ec;
      fs::remove(tmp, ec);
      throw BadInput(out.string() + ": cannot write the report");
    }
  }
  std::error_code ec;
  fs::rename(tmp, out, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw BadInput(out.string() + ": cannot write the report");
  }
  std::size_t bad = 0;
  for (const auto& s : data["steps"])
    for (const auto& l : s["leaves"])
      if (l.value("nan", 0) + l.value("inf", 0) > 0) {
        ++bad;
        break;
      }
  std::printf("%s: %s of %s, %zu leaves%s\n", out.c_str(),
              root ? (std::to_string(steps.size()) + (steps.size() == 1 ? " step" : " steps")).c_str() : "a checkpoint", printable(p.string()).c_str(),
              data["steps"].back()["leaves"].size(),
              bad ? (", " + (root ? std::to_string(bad) + (bad == 1 ? " step" : " steps") : std::string("leaves")) + " with NaN or Inf").c_str() : "");
  return 0;
}

}  // namespace
