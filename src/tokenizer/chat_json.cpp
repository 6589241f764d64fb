#include "tokenizer/chat_json.h"

#include "core/error.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace onecard {

void py_json_append_string(std::string& out, std::string_view s) {
    out.push_back('"');
    for (char ch : s) {
        const auto c = static_cast<unsigned char>(ch);
        switch (c) {
            case '"':
                out += "\\\"";
                break;
            case '\\':
                out += "\\\\";
                break;
            case '\n':
                out += "\\n";
                break;
            case '\r':
                out += "\\r";
                break;
            case '\t':
                out += "\\t";
                break;
            case '\b':
                out += "\\b";
                break;
            case '\f':
                out += "\\f";
                break;
            default:
                if (c < 0x20) {
                    char buf[8];
                    std::snprintf(buf, sizeof(buf), "\\u%04x", c);
                    out += buf;
                } else {
                    out.push_back(ch);
                }
        }
    }
    out.push_back('"');
}

std::string py_float_repr(double d) {
    ONECARD_CHECK(std::isfinite(d), "chat JSON: non-finite number {} cannot be written as JSON", d);
    if (d == 0.0) return std::signbit(d) ? "-0.0" : "0.0";
    // Shortest round-trip digits in scientific form: [-]D[.DDD]e[+-]XX.
    char buf[64];
    auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
    std::string_view sci(buf, static_cast<size_t>(res.ptr - buf));
    std::string sign;
    if (sci.front() == '-') {
        sign = "-";
        sci.remove_prefix(1);
    }
    const size_t epos = sci.find('e');
    std::string digits;
    for (char c : sci.substr(0, epos))
        if (c != '.') digits.push_back(c);
    const int exp10 = std::atoi(std::string(sci.substr(epos + 1)).c_str());
    const int n_digits = static_cast<int>(digits.size());

    std::string out = sign;
    if (exp10 >= -4 && exp10 < 16) {
        if (exp10 < 0) {
            out += "0.";
            out.append(static_cast<size_t>(-exp10 - 1), '0');
            out += digits;
        } else if (n_digits <= exp10 + 1) {
            out += digits;
            out.append(static_cast<size_t>(exp10 + 1 - n_digits), '0');
            out += ".0";
        } else {
            out += digits.substr(0, static_cast<size_t>(exp10 + 1));
            out += '.';
            out += digits.substr(static_cast<size_t>(exp10 + 1));
        }
        return out;
    }
    out += digits.substr(0, 1);
    if (n_digits > 1) {
        out += '.';
        out += digits.substr(1);
    }
    char ebuf[16];
    std::snprintf(ebuf, sizeof(ebuf), "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
    out += ebuf;
    return out;
}

namespace {

void dump_at(std::string& out, const OrderedJson& v, int depth) {
    if (v.is_structured())
        ONECARD_CHECK(depth < kPyJsonMaxDepth, "chat JSON: value nested deeper than the limit of {} levels",
                      kPyJsonMaxDepth);
    switch (v.type()) {
        case OrderedJson::value_t::null:
            out += "null";
            break;
        case OrderedJson::value_t::boolean:
            out += v.get<bool>() ? "true" : "false";
            break;
        case OrderedJson::value_t::number_integer:
            out += std::to_string(v.get<int64_t>());
            break;
        case OrderedJson::value_t::number_unsigned:
            out += std::to_string(v.get<uint64_t>());
            break;
        case OrderedJson::value_t::number_float:
            out += py_float_repr(v.get<double>());
            break;
        case OrderedJson::value_t::string:
            py_json_append_string(out, v.get_ref<const std::string&>());
            break;
        case OrderedJson::value_t::array: {
            out.push_back('[');
            bool first = true;
            for (const auto& e : v) {
                if (!first) out += ", ";
                first = false;
                dump_at(out, e, depth + 1);
            }
            out.push_back(']');
            break;
        }
        case OrderedJson::value_t::object: {
            out.push_back('{');
            bool first = true;
            for (const auto& [k, e] : v.items()) {
                if (!first) out += ", ";
                first = false;
                py_json_append_string(out, k);
                out += ": ";
                dump_at(out, e, depth + 1);
            }
            out.push_back('}');
            break;
        }
        case OrderedJson::value_t::binary:
        case OrderedJson::value_t::discarded:
            fail("chat JSON: value of type {} cannot be serialised", v.type_name());
    }
}

}  // namespace

void py_json_dump_to(std::string& out, const OrderedJson& v) {
    dump_at(out, v, 0);
}

std::string py_json_dumps(const OrderedJson& v) {
    std::string out;
    py_json_dump_to(out, v);
    return out;
}

bool json_truthy(const OrderedJson& v) {
    switch (v.type()) {
        case OrderedJson::value_t::null:
            return false;
        case OrderedJson::value_t::boolean:
            return v.get<bool>();
        case OrderedJson::value_t::number_integer:
            return v.get<int64_t>() != 0;
        case OrderedJson::value_t::number_unsigned:
            return v.get<uint64_t>() != 0;
        case OrderedJson::value_t::number_float:
            return v.get<double>() != 0.0;
        case OrderedJson::value_t::string:
            return !v.get_ref<const std::string&>().empty();
        case OrderedJson::value_t::array:
        case OrderedJson::value_t::object:
            return !v.empty();
        default:
            return true;
    }
}

}  // namespace onecard
