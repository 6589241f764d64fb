#include "svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace onecard::client {

std::string xml_escape(const std::string& s) {
    std::string out;
    for (char c : s) {
        switch (c) {
            case '&':
                out += "&amp;";
                break;
            case '<':
                out += "&lt;";
                break;
            case '>':
                out += "&gt;";
                break;
            case '"':
                out += "&quot;";
                break;
            default:
                out += c;
        }
    }
    return out;
}

std::vector<double> nice_ticks(double lo, double hi, int n_target) {
    if (!(hi > lo)) hi = lo + 1;
    const double raw = (hi - lo) / std::max(1, n_target);
    const double mag = std::pow(10.0, std::floor(std::log10(raw)));
    double step = mag;
    for (double m : {1.0, 2.0, 5.0, 10.0})
        if (m * mag >= raw) {
            step = m * mag;
            break;
        }
    std::vector<double> ticks;
    // From the last step at or below `lo` to the first at or above `hi`, so the axis covers the data.
    for (double t = std::floor(lo / step) * step;; t += step) {
        ticks.push_back(t);
        if (t >= hi - step * 1e-9 && ticks.size() >= 2) break;
    }
    return ticks;
}

namespace {

constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"};

std::string num(double v) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.1f", v);
    return buf;
}

std::string tick_label(double v) {
    char buf[32];
    if (std::fabs(v) >= 1000 || v == std::floor(v))
        std::snprintf(buf, sizeof(buf), "%.0f", v);
    else
        std::snprintf(buf, sizeof(buf), "%.3g", v);
    return buf;
}

void render_panel(std::string& out, const PlotPanel& p, double ox, int w, int h) {
    const double ml = 70, mr = 20, mt = 40, mb = 55;  // margins
    double x_lo = std::numeric_limits<double>::max(), x_hi = -x_lo, y_hi = 0;
    for (const auto& s : p.series)
        for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
            x_lo = std::min(x_lo, s.x[i]);
            x_hi = std::max(x_hi, s.x[i]);
            y_hi = std::max(y_hi, s.y[i]);
        }
    if (x_lo > x_hi) x_lo = 0, x_hi = 1;
    x_lo = std::min(0.0, x_lo);
    const auto xt = nice_ticks(x_lo, x_hi), yt = nice_ticks(0, y_hi > 0 ? y_hi : 1);
    const double x0 = xt.front(), x1 = xt.back(), y0 = yt.front(), y1 = yt.back();
    const double pw = w - ml - mr, ph = h - mt - mb;
    auto X = [&](double v) { return ox + ml + (v - x0) / (x1 - x0) * pw; };
    auto Y = [&](double v) { return mt + ph - (v - y0) / (y1 - y0) * ph; };
    out += "<text x=\"" + num(ox + w / 2.0) +
           "\" y=\"22\" text-anchor=\"middle\" font-size=\"14\" font-weight=\"bold\">" + xml_escape(p.title) +
           "</text>\n";
    for (double t : xt)
        out += "<line x1=\"" + num(X(t)) + "\" y1=\"" + num(mt) + "\" x2=\"" + num(X(t)) + "\" y2=\"" + num(mt + ph) +
               "\" stroke=\"#e5e5e5\"/>\n<text x=\"" + num(X(t)) + "\" y=\"" + num(mt + ph + 16) +
               "\" text-anchor=\"middle\" font-size=\"11\">" + tick_label(t) + "</text>\n";
    for (double t : yt)
        out += "<line x1=\"" + num(ox + ml) + "\" y1=\"" + num(Y(t)) + "\" x2=\"" + num(ox + ml + pw) + "\" y2=\"" +
               num(Y(t)) + "\" stroke=\"#e5e5e5\"/>\n<text x=\"" + num(ox + ml - 6) + "\" y=\"" + num(Y(t) + 4) +
               "\" text-anchor=\"end\" font-size=\"11\">" + tick_label(t) + "</text>\n";
    out += "<rect x=\"" + num(ox + ml) + "\" y=\"" + num(mt) + "\" width=\"" + num(pw) + "\" height=\"" + num(ph) +
           "\" fill=\"none\" stroke=\"#333\"/>\n";
    out += "<text x=\"" + num(ox + ml + pw / 2) + "\" y=\"" + num(h - 12.0) +
           "\" text-anchor=\"middle\" font-size=\"12\">" + xml_escape(p.x_label) + "</text>\n";
    out += "<text transform=\"translate(" + num(ox + 16) + "," + num(mt + ph / 2) +
           ") rotate(-90)\" text-anchor=\"middle\" font-size=\"12\">" + xml_escape(p.y_label) + "</text>\n";
    for (size_t is = 0; is < p.series.size(); ++is) {
        const auto& s = p.series[is];
        const char* color = kColors[is % std::size(kColors)];
        const size_t n = std::min(s.x.size(), s.y.size());
        std::string pts;
        for (size_t i = 0; i < n; ++i) pts += num(X(s.x[i])) + "," + num(Y(s.y[i])) + " ";
        if (n > 1)
            out += "<polyline points=\"" + pts + "\" fill=\"none\" stroke=\"" + color + "\" stroke-width=\"2\"/>\n";
        for (size_t i = 0; i < n; ++i) {
            out += "<circle cx=\"" + num(X(s.x[i])) + "\" cy=\"" + num(Y(s.y[i])) + "\" r=\"3.5\" fill=\"" + color +
                   "\"/>\n";
            if (i < s.labels.size() && !s.labels[i].empty())
                out += "<text x=\"" + num(X(s.x[i]) + 5) + "\" y=\"" + num(Y(s.y[i]) - 6) +
                       "\" font-size=\"10\" fill=\"" + color + "\">" + xml_escape(s.labels[i]) + "</text>\n";
        }
        const double ly = mt + 14 + 16.0 * static_cast<double>(is);
        out += "<rect x=\"" + num(ox + ml + 10) + "\" y=\"" + num(ly - 9) + "\" width=\"12\" height=\"4\" fill=\"" +
               color + "\"/>\n<text x=\"" + num(ox + ml + 28) + "\" y=\"" + num(ly - 3) + "\" font-size=\"11\">" +
               xml_escape(s.name) + "</text>\n";
    }
}

}  // namespace

std::string render_svg(const std::string& title, const std::vector<PlotPanel>& panels, int panel_w, int panel_h) {
    const int top = 28;
    const int w = panel_w * static_cast<int>(std::max<size_t>(1, panels.size())), h = panel_h + top;
    std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
                      std::to_string(w) + "\" height=\"" + std::to_string(h) + "\" viewBox=\"0 0 " + std::to_string(w) +
                      " " + std::to_string(h) + "\" font-family=\"sans-serif\">\n";
    out += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
    out += "<text x=\"" + std::to_string(w / 2) + "\" y=\"18\" text-anchor=\"middle\" font-size=\"15\">" +
           xml_escape(title) + "</text>\n<g transform=\"translate(0," + std::to_string(top) + ")\">\n";
    for (size_t i = 0; i < panels.size(); ++i)
        render_panel(out, panels[i], static_cast<double>(i) * panel_w, panel_w, panel_h);
    out += "</g>\n</svg>\n";
    return out;
}

}  // namespace onecard::client
