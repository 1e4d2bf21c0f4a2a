// The SVG charts: well-formed XML (parsed with pugixml), and they contain the
// data they claim: every drawn point maps back, through the chart's recorded
// data window and pixel box, to the number it stands for.
#include <gtest/gtest.h>

#include <cmath>
#include <pugixml.hpp>
#include <sstream>

#include "demo/demos.hpp"
#include "plot/svg.hpp"

using namespace ffn;

namespace {

pugi::xml_document parse(const std::string& svg) {
  pugi::xml_document doc;
  const pugi::xml_parse_result r = doc.load_string(svg.c_str());
  EXPECT_TRUE(r) << r.description() << " at offset " << r.offset;
  EXPECT_STREQ(doc.document_element().name(), "svg");
  return doc;
}

std::vector<std::pair<double, double>> points(const char* attr) {
  std::vector<std::pair<double, double>> p;
  std::istringstream in(attr);
  std::string tok;
  while (in >> tok) {
    const size_t c = tok.find(',');
    p.emplace_back(std::stod(tok.substr(0, c)), std::stod(tok.substr(c + 1)));
  }
  return p;
}

// Pixel position of a data point in a <g class="chart">, from its attributes.
struct Frame {
  double x0, x1, y0, y1, left, top, w, h;
  bool lx, ly;
  explicit Frame(const pugi::xml_node& g)
      : x0(g.attribute("data-x-min").as_double()), x1(g.attribute("data-x-max").as_double()),
        y0(g.attribute("data-y-min").as_double()), y1(g.attribute("data-y-max").as_double()),
        left(g.attribute("data-left").as_double()), top(g.attribute("data-top").as_double()),
        w(g.attribute("data-width").as_double()), h(g.attribute("data-height").as_double()),
        lx(g.attribute("data-log-x").as_int()), ly(g.attribute("data-log-y").as_int()) {}
  double X(double x) const {
    auto f = [&](double v) { return lx ? std::log10(v) : v; };
    return left + (f(x) - f(x0)) / (f(x1) - f(x0)) * w;
  }
  double Y(double y) const {
    auto f = [&](double v) { return ly ? std::log10(v) : v; };
    return top + h - (f(y) - f(y0)) / (f(y1) - f(y0)) * h;
  }
};

pugi::xml_node series(const pugi::xml_node& chart, const std::string& prefix) {
  for (pugi::xpath_node x : chart.select_nodes(".//polyline[@class='series']")) {
    const pugi::xml_node n = x.node();
    if (std::string(n.attribute("data-name").value()).rfind(prefix, 0) == 0) return n;
  }
  return {};
}

// Token labels and the sequential (white to red) colours of an attention
// map: one label per column under the map and per row left of it, rows
// labelled from the bottom as their values; each cell's colour maps back to
// its value.
TEST(Svg, AttentionMapHasTokenLabelsAndSequentialColours) {
  plot::Heatmap h;
  h.title = "attention";
  h.nx = 3;
  h.ny = 2;
  h.v = {0.0, 0.25, 0.75, 1.0, 0.5, 0.0};  // row 0 (bottom) then row 1 (top)
  h.vmin = 0;
  h.vmax = 1;
  h.sequential = true;
  h.xticks = {"_one", "<b>", "four"};
  h.yticks = {"</s>", "_cent"};
  const pugi::xml_document doc = parse(plot::render({h}, 1, "t"));
  const pugi::xml_node map = doc.select_node("//g[@class='heatmap']").node();
  EXPECT_STREQ(map.attribute("data-sequential").value(), "1");
  std::vector<std::string> xt, yt;
  std::vector<double> xs, ys;
  for (pugi::xpath_node n : map.select_nodes(".//text[@class='xtick']")) {
    xt.push_back(n.node().child_value());
    xs.push_back(n.node().attribute("x").as_double());
  }
  for (pugi::xpath_node n : map.select_nodes(".//text[@class='ytick']")) {
    yt.push_back(n.node().child_value());
    ys.push_back(n.node().attribute("y").as_double());
  }
  EXPECT_EQ(xt, (std::vector<std::string>{"_one", "<b>", "four"}));
  EXPECT_EQ(yt, (std::vector<std::string>{"</s>", "_cent"}));
  ASSERT_EQ(xs.size(), 3u);
  EXPECT_LT(xs[0], xs[1]);
  EXPECT_LT(xs[1], xs[2]);
  ASSERT_EQ(ys.size(), 2u);
  EXPECT_GT(ys[0], ys[1]);  // row 0 is the bottom one
  std::vector<pugi::xml_node> cells;
  for (pugi::xpath_node n : map.select_nodes(".//rect[@fill][not(@fill='none')]")) cells.push_back(n.node());
  ASSERT_EQ(cells.size(), 6u);
  // Cells from the top row down: row 1's values, then row 0's.
  const double want[6] = {1.0, 0.5, 0.0, 0.0, 0.25, 0.75};
  for (int k = 0; k < 6; ++k)
    EXPECT_EQ(std::string(cells[size_t(k)].attribute("fill").value()), plot::colormap(0.5 + 0.5 * want[k])) << k;
  EXPECT_EQ(plot::colormap(0.5 + 0.5 * 0.0), "#f7f7f7");  // 0 is white
}

}  // namespace

TEST(Svg, ApproximateChartHoldsTheFitAndTheKinks) {
  demo::ApproximateOptions o;
  o.neurons = 5;
  o.steps = 100;
  const demo::ApproximateResult r = demo::approximate(o);
  const pugi::xml_document doc = parse(plot::render(r.chart));
  const pugi::xml_node chart = doc.select_node("//g[@class='chart']").node();
  ASSERT_TRUE(chart);
  const Frame fr(chart);
  EXPECT_DOUBLE_EQ(fr.x0, -2.0);
  EXPECT_DOUBLE_EQ(fr.x1, 2.0);

  // The fit: 801 points over [-2, 2], each the layer's output there (pixels rounded to 0.01).
  const pugi::xml_node fit = series(chart, "FFN");
  ASSERT_TRUE(fit);
  const auto pts = points(fit.attribute("points").value());
  ASSERT_EQ(pts.size(), 801u);
  std::vector<float> x(801), y(801);
  for (int i = 0; i < 801; ++i) x[size_t(i)] = float(-2.0 + 4.0 * i / 800.0);
  r.layer.forward(x.data(), y.data(), Shape::tokens(801));
  for (size_t i = 0; i < pts.size(); ++i) {
    ASSERT_NEAR(pts[i].first, fr.X(x[i]), 0.006) << i;
    ASSERT_NEAR(pts[i].second, fr.Y(y[i]), 0.006) << i;
  }
  // The target is x².
  const auto tp = points(series(chart, "target").attribute("points").value());
  ASSERT_EQ(tp.size(), 801u);
  for (size_t i = 0; i < tp.size(); ++i) ASSERT_NEAR(tp[i].second, fr.Y(double(x[i]) * x[i]), 0.006) << i;

  // One dashed line per kink, at -b1/w1.
  std::vector<double> kinks;
  for (pugi::xpath_node n : chart.select_nodes(".//line[@class='vline']")) kinks.push_back(n.node().attribute("data-x").as_double());
  ASSERT_EQ(kinks.size(), r.kinks.size());
  for (size_t i = 0; i < kinks.size(); ++i) EXPECT_DOUBLE_EQ(kinks[i], r.kinks[i]);
  EXPECT_EQ(r.kinks.size(), 5u);
}

// Every legend entry lies under the plot box, so none covers data; the
// target's entry names the function (sin is sin(πx)).
TEST(Svg, LegendSitsOutsideThePlotBox) {
  demo::ApproximateOptions o;
  o.function = "sin";
  o.neurons = 4;
  o.steps = 20;
  const demo::ApproximateResult r = demo::approximate(o);
  const pugi::xml_document doc = parse(plot::render(r.chart));
  const pugi::xml_node chart = doc.select_node("//g[@class='chart']").node();
  const Frame fr(chart);
  const auto texts = chart.select_nodes(".//g[@class='legend']/text");
  ASSERT_EQ(texts.size(), 4u);  // target, fit, kinks, interval
  for (pugi::xpath_node t : texts) {
    EXPECT_GT(t.node().attribute("y").as_double() - 12, fr.top + fr.h) << t.node().child_value();
    EXPECT_LT(t.node().attribute("y").as_double(), 440.0) << t.node().child_value();
  }
  EXPECT_STREQ(texts[0].node().child_value(), "target f(x) = sin(πx)");
  EXPECT_EQ(std::string(r.chart.title).rfind("f(x) = sin(πx) with 4 ReLU units", 0), 0u) << r.chart.title;
  // Many long entries wrap onto more rows, and the plot box shrinks to make room.
  plot::LineChart c;
  for (int i = 0; i < 8; ++i) c.series.push_back({"a rather long series name " + std::to_string(i), {0, 1}, {0, 1}});
  const pugi::xml_document d2 = parse(plot::render(c));
  const Frame f2(d2.select_node("//g[@class='chart']").node());
  EXPECT_LT(f2.h, fr.h);
  for (pugi::xpath_node t : d2.select_nodes("//g[@class='legend']/text")) {
    EXPECT_GT(t.node().attribute("y").as_double() - 12, f2.top + f2.h);
    EXPECT_LT(t.node().attribute("y").as_double(), 440.0);
  }
}

TEST(Svg, SweepChartHoldsTheErrorsOnLogAxes) {
  demo::ApproximateOptions o;
  o.steps = 50;
  const demo::SweepResult s = demo::approximate_sweep(o, {2, 4, 8});
  const pugi::xml_document doc = parse(plot::render(s.chart));
  const pugi::xml_node chart = doc.select_node("//g[@class='chart']").node();
  const Frame fr(chart);
  EXPECT_TRUE(fr.lx && fr.ly);
  const auto pts = points(series(chart, "trained").attribute("points").value());
  ASSERT_EQ(pts.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_NEAR(pts[i].first, fr.X(double(s.neurons[i])), 0.006);
    EXPECT_NEAR(pts[i].second, fr.Y(s.max_error[i]), 0.006);
  }
  const auto best = points(series(chart, "best").attribute("points").value());
  ASSERT_EQ(best.size(), 3u);
  EXPECT_NEAR(best[2].second, fr.Y(4.0 / (8.0 * 81.0)), 0.006);
}

TEST(Svg, InteractionHeatmapsHoldBothModels) {
  demo::InteractionOptions o;
  o.epochs = 2;
  o.train = 512;
  o.test = 256;
  const demo::InteractionResult r = demo::interaction(o);
  const pugi::xml_document doc = parse(plot::render(r.maps, 2, "t"));
  const auto maps = doc.select_nodes("//g[@class='heatmap']");
  ASSERT_EQ(maps.size(), 4u);
  // The FFN's a·b map: cell (i, j) is coloured by the layer's output 0 at the cell's centre.
  const pugi::xml_node ffn_map = maps[1].node();
  const int nx = ffn_map.attribute("data-nx").as_int(), ny = ffn_map.attribute("data-ny").as_int();
  ASSERT_EQ(nx, 32);
  std::vector<float> c(size_t(2 * nx * ny)), y(c.size());
  for (int j = 0; j < ny; ++j)
    for (int i = 0; i < nx; ++i) {
      c[size_t(2 * (j * nx + i))] = float(-1.0 + (i + 0.5) * 2.0 / nx);
      c[size_t(2 * (j * nx + i) + 1)] = float(-1.0 + (j + 0.5) * 2.0 / ny);
    }
  r.layer.forward(c.data(), y.data(), Shape::tokens(nx * ny));
  std::vector<pugi::xml_node> cells;
  for (pugi::xpath_node n : ffn_map.select_nodes(".//rect[@fill][not(@fill='none')]")) cells.push_back(n.node());
  ASSERT_EQ(cells.size(), size_t(nx * ny));
  size_t k = 0;
  for (int j = ny - 1; j >= 0; --j)  // rows from the top
    for (int i = 0; i < nx; ++i, ++k) {
      const double v = y[size_t(2 * (j * nx + i))];
      ASSERT_EQ(std::string(cells[k].attribute("fill").value()), plot::colormap((v + 1) / 2)) << i << "," << j;
    }
  // The linear a·b map: cell colour from the fitted plane.
  std::vector<pugi::xml_node> lin;
  for (pugi::xpath_node n : maps[0].node().select_nodes(".//rect[@fill][not(@fill='none')]")) lin.push_back(n.node());
  const auto& p = r.linear_product;
  const double a = -1.0 + 0.5 * 2.0 / nx, b = 1.0 - 0.5 * 2.0 / ny;  // top-left cell
  EXPECT_EQ(std::string(lin[0].attribute("fill").value()), plot::colormap((p[0] * a + p[1] * b + p[2] + 1) / 2));
}

// Each heat map has a colour bar from its vmin (bottom) to its vmax (top),
// banded in the map's own colours, labelled at both ends and the middle.
TEST(Svg, HeatmapsHaveAColourBar) {
  plot::Heatmap h;
  h.title = "m";
  h.nx = h.ny = 2;
  h.v = {0, 1, 2, 3};
  h.vmin = -0.5;
  h.vmax = 1.5;
  const pugi::xml_document doc = parse(plot::render({h, h}, 2, "t"));
  const auto bars = doc.select_nodes("//g[@class='colorbar']");
  ASSERT_EQ(bars.size(), 2u);
  const pugi::xml_node bar = bars[0].node();
  EXPECT_DOUBLE_EQ(bar.attribute("data-vmin").as_double(), -0.5);
  EXPECT_DOUBLE_EQ(bar.attribute("data-vmax").as_double(), 1.5);
  std::vector<pugi::xml_node> bands;
  for (pugi::xpath_node n : bar.select_nodes("./rect[not(@fill='none')]")) bands.push_back(n.node());
  ASSERT_EQ(bands.size(), 64u);
  // Drawn bottom up: the first band is the lowest and has vmin's colour end.
  EXPECT_GT(bands.front().attribute("y").as_double(), bands.back().attribute("y").as_double());
  EXPECT_EQ(std::string(bands.front().attribute("fill").value()), plot::colormap(0.5 / 64));
  EXPECT_EQ(std::string(bands.back().attribute("fill").value()), plot::colormap(63.5 / 64));
  std::vector<std::string> ticks;
  for (pugi::xpath_node n : bar.select_nodes("./text")) ticks.push_back(n.node().child_value());
  EXPECT_EQ(ticks, (std::vector<std::string>{"-0.5", "0.5", "1.5"}));
  // The bar sits beside the map, not on it.
  const double map_right = doc.select_node("//g[@class='heatmap']/rect[@fill='none']").node().attribute("x").as_double() + 256;
  EXPECT_GT(bands.front().attribute("x").as_double(), map_right);
}

TEST(Svg, TextIsEscapedAndColoursSpanTheMap) {
  plot::LineChart c;
  c.title = "a < b & \"c\" > d";
  c.series = {{"s<1>", {1, 2, 3}, {1, 4, 9}}};
  const pugi::xml_document doc = parse(plot::render(c));
  EXPECT_TRUE(doc.select_node("//text[.='a < b & \"c\" > d']"));
  EXPECT_TRUE(doc.select_node("//polyline[@data-name='s<1>']"));
  EXPECT_EQ(plot::colormap(0.0), "#2166ac");
  EXPECT_EQ(plot::colormap(0.5), "#f7f7f7");
  EXPECT_EQ(plot::colormap(1.0), "#b2182b");
  EXPECT_EQ(plot::colormap(-3.0), plot::colormap(0.0));
}
