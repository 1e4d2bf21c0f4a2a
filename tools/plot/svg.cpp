#include "plot/svg.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "ffn/io.hpp"

namespace ffn::plot {
namespace {

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}
std::string px(double v) { return fmt("%.2f", v); }
// Characters (not bytes) in UTF-8 text, for estimating its width.
size_t utf8_length(std::string_view t) {
  return size_t(std::count_if(t.begin(), t.end(), [](char ch) { return (static_cast<unsigned char>(ch) & 0xC0) != 0x80; }));
}
// Full precision for data values in attributes.
std::string full(double v) { return fmt("%.17g", v); }

// Tick label: short, no trailing zeros.
std::string tick_label(double v) {
  if (v == 0) return "0";
  const double a = std::abs(v);
  if (a >= 1e-3 && a < 1e5) return fmt("%.6g", v);
  return fmt("%.0e", v);
}

// "Nice" linear ticks (1, 2, 5 × 10^k) covering [lo, hi].
std::vector<double> linear_ticks(double lo, double hi) {
  const double span = hi - lo;
  const double raw = span / 6.0;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * mag;
    if (span / step <= 7.0) break;
  }
  std::vector<double> t;
  const double k0 = std::ceil(lo / step - 1e-9), k1 = std::floor(hi / step + 1e-9);
  if (!(k1 - k0 < 20)) return {lo, hi};  // a span float cannot step through
  for (double k = k0; k <= k1; k += 1) {
    const double v = k * step;
    t.push_back(std::abs(v) < 1e-12 * span ? 0.0 : v);
  }
  return t;
}

// Ticks of a log axis, as log10 values within [lo, hi]: decades, or 1, 2, 5
// times a decade when the range spans fewer than three decades.
std::vector<double> log_ticks(double lo, double hi) {
  std::vector<double> t;
  const bool fine = hi - lo < 3.0;
  for (double e = std::floor(lo); e <= hi + 1e-9; e += 1) {
    for (double m : fine ? std::vector<double>{1, 2, 5} : std::vector<double>{1}) {
      const double v = e + std::log10(m);
      if (v >= lo - 1e-9 && v <= hi + 1e-9) t.push_back(v);
    }
  }
  if (t.size() < 2) t = {lo, hi};
  return t;
}

struct Window {
  double x0, x1, y0, y1;  // data window in plotted units (log10 for log axes)
  double left, top, w, h; // pixel box
  bool log_x, log_y;
  double X(double x) const { return left + ((log_x ? std::log10(x) : x) - x0) / (x1 - x0) * w; }
  double Y(double y) const { return top + h - ((log_y ? std::log10(y) : y) - y0) / (y1 - y0) * h; }
  bool valid(double x, double y) const {
    return std::isfinite(x) && std::isfinite(y) && (!log_x || x > 0) && (!log_y || y > 0);
  }
};

void widen(double& lo, double& hi, bool pad) {
  if (!(lo < hi)) {
    const double c = std::isfinite(lo) ? lo : 0.0;
    lo = c - 1;
    hi = c + 1;
    return;
  }
  if (pad) {
    const double p = 0.05 * (hi - lo);
    lo -= p;
    hi += p;
  }
}

std::string chart_body(const LineChart& c, double ox, double oy, int width, int height, int id) {
  const double inf = std::numeric_limits<double>::infinity();
  double xmin = inf, xmax = -inf, ymin = inf, ymax = -inf;
  const Window probe{0, 1, 0, 1, 0, 0, 1, 1, c.log_x, c.log_y};
  for (const Series& s : c.series) {
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!probe.valid(s.x[i], s.y[i])) continue;
      const double x = c.log_x ? std::log10(s.x[i]) : s.x[i];
      const double y = c.log_y ? std::log10(s.y[i]) : s.y[i];
      xmin = std::min(xmin, x);
      xmax = std::max(xmax, x);
      ymin = std::min(ymin, y);
      ymax = std::max(ymax, y);
    }
  }
  auto to_axis = [](double v, bool log) { return log ? std::log10(v) : v; };
  if (c.x_range) { xmin = to_axis((*c.x_range)[0], c.log_x); xmax = to_axis((*c.x_range)[1], c.log_x); }
  else widen(xmin, xmax, c.log_x);
  if (c.y_range) { ymin = to_axis((*c.y_range)[0], c.log_y); ymax = to_axis((*c.y_range)[1], c.log_y); }
  else widen(ymin, ymax, true);
  if (!(xmin < xmax)) widen(xmin, xmax, false);
  if (!(ymin < ymax)) widen(ymin, ymax, false);

  // The legend goes under the plot box (never over the data): entries left to
  // right in rows as wide as the box, widths estimated from the text length.
  struct Entry {
    std::string name, color, dash;
    bool band;
  };
  std::vector<Entry> entries;
  for (const Series& se : c.series) entries.push_back({se.name, se.color, se.dash, false});
  if (!c.vlines.empty() && !c.vlines_name.empty()) entries.push_back({c.vlines_name, "#999", "3 3", false});
  if (c.band && !c.band_name.empty()) entries.push_back({c.band_name, "#ffe680", "", true});
  const double box_left = ox + 78, box_w = width - 78.0 - 24;
  std::vector<std::pair<double, int>> place;  // x offset in the row, row
  {
    double x = 0;
    int row = 0;
    for (const Entry& e : entries) {
      const double w = 34 + 6.6 * double(utf8_length(e.name)) + 18;
      if (x > 0 && x + w > box_w) {
        x = 0;
        ++row;
      }
      place.emplace_back(x, row);
      x += w;
    }
  }
  const int legend_rows = entries.empty() ? 0 : place.back().second + 1;
  const double legend_h = 18.0 * legend_rows;
  const Window win{xmin, xmax, ymin, ymax, box_left, oy + 40, box_w, height - 40.0 - 64 - legend_h, c.log_x, c.log_y};
  std::string s;
  s += "<g class=\"chart\" data-x-min=\"" + full(c.log_x ? std::pow(10, xmin) : xmin) + "\" data-x-max=\"" +
       full(c.log_x ? std::pow(10, xmax) : xmax) + "\" data-y-min=\"" + full(c.log_y ? std::pow(10, ymin) : ymin) +
       "\" data-y-max=\"" + full(c.log_y ? std::pow(10, ymax) : ymax) + "\" data-log-x=\"" +
       (c.log_x ? "1" : "0") + "\" data-log-y=\"" + (c.log_y ? "1" : "0") + "\" data-left=\"" + px(win.left) +
       "\" data-top=\"" + px(win.top) + "\" data-width=\"" + px(win.w) + "\" data-height=\"" + px(win.h) + "\">\n";
  const std::string clip = "clip" + std::to_string(id);
  s += "<clipPath id=\"" + clip + "\"><rect x=\"" + px(win.left) + "\" y=\"" + px(win.top) + "\" width=\"" +
       px(win.w) + "\" height=\"" + px(win.h) + "\"/></clipPath>\n";
  s += "<text x=\"" + px(win.left + win.w / 2) + "\" y=\"" + px(oy + 24) +
       "\" text-anchor=\"middle\" font-size=\"16\">" + xml_escape(c.title) + "</text>\n";
  s += "<rect x=\"" + px(win.left) + "\" y=\"" + px(win.top) + "\" width=\"" + px(win.w) + "\" height=\"" +
       px(win.h) + "\" fill=\"none\" stroke=\"#444\"/>\n";

  // Ticks and grid.
  for (double t : c.log_x ? log_ticks(xmin, xmax) : linear_ticks(xmin, xmax)) {
    const double x = win.left + (t - xmin) / (xmax - xmin) * win.w;
    s += "<line x1=\"" + px(x) + "\" y1=\"" + px(win.top) + "\" x2=\"" + px(x) + "\" y2=\"" + px(win.top + win.h) +
         "\" stroke=\"#ddd\"/>\n";
    s += "<text x=\"" + px(x) + "\" y=\"" + px(win.top + win.h + 18) + "\" text-anchor=\"middle\" font-size=\"12\">" +
         tick_label(c.log_x ? std::pow(10, t) : t) + "</text>\n";
  }
  for (double t : c.log_y ? log_ticks(ymin, ymax) : linear_ticks(ymin, ymax)) {
    const double y = win.top + win.h - (t - ymin) / (ymax - ymin) * win.h;
    s += "<line x1=\"" + px(win.left) + "\" y1=\"" + px(y) + "\" x2=\"" + px(win.left + win.w) + "\" y2=\"" + px(y) +
         "\" stroke=\"#ddd\"/>\n";
    s += "<text x=\"" + px(win.left - 6) + "\" y=\"" + px(y + 4) + "\" text-anchor=\"end\" font-size=\"12\">" +
         tick_label(c.log_y ? std::pow(10, t) : t) + "</text>\n";
  }
  s += "<text x=\"" + px(win.left + win.w / 2) + "\" y=\"" + px(win.top + win.h + 44) +
       "\" text-anchor=\"middle\" font-size=\"13\">" + xml_escape(c.xlabel) + "</text>\n";
  s += "<text transform=\"translate(" + px(ox + 16) + "," + px(win.top + win.h / 2) +
       ") rotate(-90)\" text-anchor=\"middle\" font-size=\"13\">" + xml_escape(c.ylabel) + "</text>\n";

  s += "<g clip-path=\"url(#" + clip + ")\">\n";
  if (c.band) {
    const double b0 = win.X((*c.band)[0]), b1 = win.X((*c.band)[1]);
    s += "<rect class=\"band\" x=\"" + px(b0) + "\" y=\"" + px(win.top) + "\" width=\"" + px(b1 - b0) +
         "\" height=\"" + px(win.h) + "\" fill=\"#ffe680\" fill-opacity=\"0.3\"/>\n";
  }
  for (double v : c.vlines) {
    if (!std::isfinite(v) || (c.log_x && v <= 0)) continue;
    const double x = win.X(v);
    s += "<line class=\"vline\" data-x=\"" + full(v) + "\" x1=\"" + px(x) + "\" y1=\"" + px(win.top) + "\" x2=\"" +
         px(x) + "\" y2=\"" + px(win.top + win.h) + "\" stroke=\"#999\" stroke-dasharray=\"3 3\"/>\n";
  }
  for (const Series& se : c.series) {
    std::string pts;
    for (size_t i = 0; i < se.x.size() && i < se.y.size(); ++i) {
      if (!win.valid(se.x[i], se.y[i])) continue;
      pts += (pts.empty() ? "" : " ") + px(win.X(se.x[i])) + "," + px(win.Y(se.y[i]));
    }
    if (se.line) {
      s += "<polyline class=\"series\" data-name=\"" + xml_escape(se.name) + "\" points=\"" + pts +
           "\" fill=\"none\" stroke=\"" + se.color + "\" stroke-width=\"2\"" +
           (se.dash.empty() ? "" : " stroke-dasharray=\"" + se.dash + "\"") + "/>\n";
    }
    if (se.markers) {
      s += "<g class=\"markers\" data-name=\"" + xml_escape(se.name) + "\" fill=\"" + se.color + "\">";
      for (size_t i = 0; i < se.x.size() && i < se.y.size(); ++i) {
        if (!win.valid(se.x[i], se.y[i])) continue;
        s += "<circle cx=\"" + px(win.X(se.x[i])) + "\" cy=\"" + px(win.Y(se.y[i])) + "\" r=\"3.5\"/>";
      }
      s += "</g>\n";
    }
  }
  s += "</g>\n";

  // Legend, under the x label.
  s += "<g class=\"legend\">\n";
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    const double x = win.left + place[i].first, y = win.top + win.h + 64 + 18.0 * place[i].second;
    if (e.band)
      s += "<rect x=\"" + px(x) + "\" y=\"" + px(y - 10) + "\" width=\"24\" height=\"10\" fill=\"" + e.color +
           "\" fill-opacity=\"0.3\" stroke=\"#d4b000\"/>\n";
    else
      s += "<line x1=\"" + px(x) + "\" y1=\"" + px(y - 4) + "\" x2=\"" + px(x + 24) + "\" y2=\"" + px(y - 4) +
           "\" stroke=\"" + e.color + "\" stroke-width=\"2\"" +
           (e.dash.empty() ? "" : " stroke-dasharray=\"" + e.dash + "\"") + "/>\n";
    s += "<text x=\"" + px(x + 30) + "\" y=\"" + px(y) + "\" font-size=\"12\">" + xml_escape(e.name) + "</text>\n";
  }
  s += "</g>\n";
  s += "</g>\n";
  return s;
}

std::string header(int w, int h) {
  return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
         std::to_string(w) + "\" height=\"" + std::to_string(h) + "\" viewBox=\"0 0 " + std::to_string(w) + " " +
         std::to_string(h) + "\" font-family=\"sans-serif\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
}

}  // namespace

std::string xml_escape(std::string_view in) {
  std::string s;
  for (char ch : in) {
    switch (ch) {
      case '&': s += "&amp;"; break;
      case '<': s += "&lt;"; break;
      case '>': s += "&gt;"; break;
      case '"': s += "&quot;"; break;
      default: s += ch;
    }
  }
  return s;
}

std::string colormap(double t) {
  if (!std::isfinite(t)) t = 0.5;
  t = std::clamp(t, 0.0, 1.0);
  static constexpr double lo[3] = {33, 102, 172}, mid[3] = {247, 247, 247}, hi[3] = {178, 24, 43};
  const double* a = t < 0.5 ? lo : mid;
  const double* b = t < 0.5 ? mid : hi;
  const double u = t < 0.5 ? t * 2 : t * 2 - 1;
  char buf[8];
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", int(std::lround(a[0] + (b[0] - a[0]) * u)),
                int(std::lround(a[1] + (b[1] - a[1]) * u)), int(std::lround(a[2] + (b[2] - a[2]) * u)));
  return buf;
}

std::string render(const LineChart& chart, int width, int height) { return render({chart}, 1, width, height); }

std::string render(const std::vector<LineChart>& charts, int columns, int width, int height) {
  columns = std::max(1, std::min<int>(columns, int(charts.size())));
  const int rows = int((charts.size() + size_t(columns) - 1) / size_t(columns));
  std::string s = header(width * columns, height * rows);
  for (size_t i = 0; i < charts.size(); ++i)
    s += chart_body(charts[i], double(int(i) % columns) * width, double(int(i) / columns) * height, width, height,
                    int(i));
  return s + "</svg>\n";
}

std::string render(const std::vector<Heatmap>& maps, int columns, const std::string& title, int cell_px) {
  columns = std::max(1, std::min<int>(columns, int(maps.size())));
  const int rows = int((maps.size() + size_t(columns) - 1) / size_t(columns));
  // Token labels (xticks / yticks) need room left of and under the map.
  int label_left = 0, label_below = 0;
  for (const Heatmap& h : maps) {
    if (!h.yticks.empty()) label_left = 90;
    if (!h.xticks.empty()) label_below = 70;
  }
  const int pw = cell_px + 130 + label_left, ph = cell_px + 80 + label_below, top = 40;
  std::string s = header(pw * columns + 20, ph * rows + top);
  s += "<text x=\"" + std::to_string((pw * columns + 20) / 2) +
       "\" y=\"24\" text-anchor=\"middle\" font-size=\"17\">" + xml_escape(title) + "</text>\n";
  for (size_t m = 0; m < maps.size(); ++m) {
    const Heatmap& h = maps[m];
    const double left = 60.0 + label_left + double(int(m) % columns) * pw, ptop = top + 28.0 + double(int(m) / columns) * ph;
    auto color = [&](double t) { return h.sequential ? colormap(0.5 + 0.5 * std::clamp(t, 0.0, 1.0)) : colormap(t); };
    const double cw = double(cell_px) / h.nx, ch = double(cell_px) / h.ny;
    s += "<g class=\"heatmap\" data-nx=\"" + std::to_string(h.nx) + "\" data-ny=\"" + std::to_string(h.ny) +
         "\" data-x0=\"" + full(h.x0) + "\" data-x1=\"" + full(h.x1) + "\" data-y0=\"" + full(h.y0) + "\" data-y1=\"" +
         full(h.y1) + "\" data-vmin=\"" + full(h.vmin) + "\" data-vmax=\"" + full(h.vmax) + "\" data-title=\"" +
         xml_escape(h.title) + "\" data-sequential=\"" + (h.sequential ? "1" : "0") + "\">\n";
    s += "<text x=\"" + px(left + cell_px / 2.0) + "\" y=\"" + px(ptop - 8) +
         "\" text-anchor=\"middle\" font-size=\"14\">" + xml_escape(h.title) + "</text>\n";
    // Cells, row by row from the top (largest y) down, left to right: one
    // <rect> per cell.
    auto short_num = [](double v) { return fmt("%.6g", v); };
    s += "<g shape-rendering=\"crispEdges\">\n";
    for (int iy = h.ny - 1; iy >= 0; --iy) {
      for (int ix = 0; ix < h.nx; ++ix) {
        const double v = h.v[size_t(iy * h.nx + ix)];
        s += "<rect x=\"" + short_num(left + ix * cw) + "\" y=\"" + short_num(ptop + (h.ny - 1 - iy) * ch) + "\" width=\"" +
             short_num(cw) + "\" height=\"" + short_num(ch) + "\" fill=\"" + color((v - h.vmin) / (h.vmax - h.vmin)) + "\"/>";
      }
      s += "\n";
    }
    s += "</g>\n";
    auto X = [&](double x) { return left + (x - h.x0) / (h.x1 - h.x0) * cell_px; };
    auto Y = [&](double y) { return ptop + cell_px - (y - h.y0) / (h.y1 - h.y0) * cell_px; };
    for (const auto& g : h.segments)
      s += "<line x1=\"" + px(X(g[0])) + "\" y1=\"" + px(Y(g[1])) + "\" x2=\"" + px(X(g[2])) + "\" y2=\"" +
           px(Y(g[3])) + "\" stroke=\"black\" stroke-width=\"1.5\" stroke-dasharray=\"5 3\"/>\n";
    s += "<rect x=\"" + px(left) + "\" y=\"" + px(ptop) + "\" width=\"" + std::to_string(cell_px) + "\" height=\"" +
         std::to_string(cell_px) + "\" fill=\"none\" stroke=\"#444\"/>\n";
    for (int k = 0; k <= 4; ++k) {
      const double fx = h.x0 + (h.x1 - h.x0) * k / 4, fy = h.y0 + (h.y1 - h.y0) * k / 4;
      if (h.xticks.empty())
        s += "<text x=\"" + px(X(fx)) + "\" y=\"" + px(ptop + cell_px + 16) +
             "\" text-anchor=\"middle\" font-size=\"11\">" + tick_label(fx) + "</text>\n";
      if (h.yticks.empty())
        s += "<text x=\"" + px(left - 5) + "\" y=\"" + px(Y(fy) + 4) + "\" text-anchor=\"end\" font-size=\"11\">" +
             tick_label(fy) + "</text>\n";
    }
    // One label per column (rotated, under the map) and per row (left of it).
    for (size_t ix = 0; ix < h.xticks.size() && int(ix) < h.nx; ++ix) {
      const double x = left + (double(ix) + 0.5) * cw, y = ptop + cell_px + 8;
      s += "<text class=\"xtick\" x=\"" + px(x) + "\" y=\"" + px(y) + "\" transform=\"rotate(-60 " + px(x) + " " +
           px(y) + ")\" text-anchor=\"end\" dominant-baseline=\"middle\" font-size=\"11\">" + xml_escape(h.xticks[ix]) +
           "</text>\n";
    }
    for (size_t iy = 0; iy < h.yticks.size() && int(iy) < h.ny; ++iy)
      s += "<text class=\"ytick\" x=\"" + px(left - 5) + "\" y=\"" + px(ptop + (h.ny - 1 - int(iy) + 0.5) * ch + 4) +
           "\" text-anchor=\"end\" font-size=\"11\">" + xml_escape(h.yticks[iy]) + "</text>\n";
    s += "<text x=\"" + px(left + cell_px / 2.0) + "\" y=\"" + px(ptop + cell_px + 34 + label_below) +
         "\" text-anchor=\"middle\" font-size=\"12\">" + xml_escape(h.xlabel) + "</text>\n";
    s += "<text transform=\"translate(" + px(left - 38 - label_left) + "," + px(ptop + cell_px / 2.0) +
         ") rotate(-90)\" text-anchor=\"middle\" font-size=\"12\">" + xml_escape(h.ylabel) + "</text>\n";
    s += "</g>\n";
    // Colour bar right of the map: vmin at the bottom, vmax at the top, in
    // kBarSteps bands coloured at their centres, with three labelled ticks.
    constexpr int kBarSteps = 64;
    const double bx = left + cell_px + 14, bw = 14, bh = double(cell_px) / kBarSteps;
    s += "<g class=\"colorbar\" data-vmin=\"" + full(h.vmin) + "\" data-vmax=\"" + full(h.vmax) +
         "\" shape-rendering=\"crispEdges\">\n";
    for (int k = 0; k < kBarSteps; ++k)
      s += "<rect x=\"" + px(bx) + "\" y=\"" + px(ptop + cell_px - (k + 1) * bh) + "\" width=\"" + px(bw) +
           "\" height=\"" + px(bh + 0.05) + "\" fill=\"" + color((k + 0.5) / kBarSteps) + "\"/>";
    s += "\n<rect x=\"" + px(bx) + "\" y=\"" + px(ptop) + "\" width=\"" + px(bw) + "\" height=\"" +
         std::to_string(cell_px) + "\" fill=\"none\" stroke=\"#444\"/>\n";
    for (int k = 0; k <= 2; ++k) {
      const double v = h.vmin + (h.vmax - h.vmin) * k / 2, y = ptop + cell_px - cell_px * k / 2.0;
      s += "<line x1=\"" + px(bx + bw) + "\" y1=\"" + px(y) + "\" x2=\"" + px(bx + bw + 4) + "\" y2=\"" + px(y) +
           "\" stroke=\"#444\"/>\n";
      s += "<text class=\"colorbar-tick\" data-value=\"" + full(v) + "\" x=\"" + px(bx + bw + 7) + "\" y=\"" +
           px(y + 4) + "\" font-size=\"11\">" + tick_label(v) + "</text>\n";
    }
    s += "</g>\n";
  }
  return s + "</svg>\n";
}

void write_svg(const std::string& path, const std::string& svg) {
  io::write_file_atomic(path, [&](std::FILE* f) { io::write_all(f, svg.data(), svg.size(), path); });
}

}  // namespace ffn::plot
