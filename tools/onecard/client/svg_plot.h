// A small SVG writer for line charts (no library): panels side by side, each with axes, "nice"
// ticks, several labelled series and a legend. The file opens in any browser.
#pragma once

#include <string>
#include <vector>

namespace onecard::client {

struct PlotSeries {
    std::string name;
    std::vector<double> x, y;
    std::vector<std::string> labels;  // drawn next to each point (may be empty)
};

struct PlotPanel {
    std::string title, x_label, y_label;
    std::vector<PlotSeries> series;
};

// Round tick values covering [lo, hi] (about `n_target` of them: steps of 1, 2 or 5 x 10^k).
std::vector<double> nice_ticks(double lo, double hi, int n_target = 5);

// An SVG document with the panels in one row, each `panel_w` x `panel_h` pixels.
std::string render_svg(const std::string& title, const std::vector<PlotPanel>& panels, int panel_w = 520,
                       int panel_h = 380);

std::string xml_escape(const std::string& s);

}  // namespace onecard::client
