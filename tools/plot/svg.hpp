// Small SVG charts for the demonstrations and the training loss curve: line
// charts (linear or log axes) and heat maps. Each chart records its data
// window and pixel box as data-* attributes on its <g class="chart"> and each
// series is a <polyline class="series" data-name="...">, so a reader (or a
// test) can map the drawn points back to data.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ffn::plot {

struct Series {
  std::string name;
  std::vector<double> x, y;
  std::string color = "#1f77b4";
  bool markers = false;   // a circle at each point
  bool line = true;       // a polyline through the points
  std::string dash;       // stroke-dasharray, e.g. "4 3"
};

struct LineChart {
  std::string title, xlabel, ylabel;
  bool log_x = false, log_y = false;
  std::vector<Series> series;
  std::vector<double> vlines;  // vertical marker lines (e.g. the kinks)
  std::string vlines_name;     // their legend entry (the legend sits under the plot box)
  std::optional<std::array<double, 2>> band;  // a shaded x interval (e.g. the training interval)
  std::string band_name;
  std::optional<std::array<double, 2>> x_range, y_range;  // default: the data's extent
};

// A grid of values v[iy * nx + ix] over [x0, x1] × [y0, y1], cell (ix, iy)
// centred at x0 + (ix + 0.5)(x1 - x0)/nx (iy likewise, y upwards), coloured by
// colormap((v - vmin) / (vmax - vmin)).
struct Heatmap {
  std::string title;
  int nx = 0, ny = 0;
  double x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  std::vector<double> v;
  double vmin = 0, vmax = 1;
  std::string xlabel, ylabel;
  std::vector<std::array<double, 4>> segments;  // reference lines (x0, y0, x1, y1) in data coordinates
  // Optional labels of the columns (nx) and rows (ny, from the bottom), in
  // place of the numeric ticks: e.g. the tokens of an attention map.
  std::vector<std::string> xticks, yticks;
  bool sequential = false;  // white at vmin to red at vmax (else blue-white-red)
};

// One chart, width × height pixels.
std::string render(const LineChart& chart, int width = 720, int height = 440);
// Several charts side by side, `columns` per row, as one SVG.
std::string render(const std::vector<LineChart>& charts, int columns, int width = 720, int height = 440);
// Heat maps in a grid of `columns`, under a common title.
std::string render(const std::vector<Heatmap>& maps, int columns, const std::string& title, int cell_px = 256);

// Diverging blue-white-red colour for t in [0, 1] (clamped), as "#rrggbb".
std::string colormap(double t);
// Escapes &, <, >, " for XML text and attributes.
std::string xml_escape(std::string_view s);
// Writes atomically (temporary file + rename); errors name the path.
void write_svg(const std::string& path, const std::string& svg);

}  // namespace ffn::plot
