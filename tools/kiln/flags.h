// The kiln command's flags, defined in flags.cc; each command reads those its usage names.
#pragma once

#include <cstdint>
#include <string>

#include "absl/flags/declare.h"

ABSL_DECLARE_FLAG(std::string, bundles);
ABSL_DECLARE_FLAG(std::string, dir);
ABSL_DECLARE_FLAG(int64_t, m);
ABSL_DECLARE_FLAG(int64_t, n);
ABSL_DECLARE_FLAG(int64_t, k);
ABSL_DECLARE_FLAG(std::string, sizes);
ABSL_DECLARE_FLAG(int64_t, rows);
ABSL_DECLARE_FLAG(int64_t, cols);
ABSL_DECLARE_FLAG(std::string, shapes);
ABSL_DECLARE_FLAG(bool, lines);
ABSL_DECLARE_FLAG(std::string, seeds);
ABSL_DECLARE_FLAG(bool, emulate);
ABSL_DECLARE_FLAG(std::string, layout);
ABSL_DECLARE_FLAG(int, split);
ABSL_DECLARE_FLAG(std::string, ptx);
ABSL_DECLARE_FLAG(int, watchdog);
ABSL_DECLARE_FLAG(std::string, dtype);
ABSL_DECLARE_FLAG(std::string, out_dtype);
ABSL_DECLARE_FLAG(std::string, epilogue);
ABSL_DECLARE_FLAG(std::string, tune_cache);
ABSL_DECLARE_FLAG(int, iters);
ABSL_DECLARE_FLAG(int64_t, b);
ABSL_DECLARE_FLAG(int64_t, h);
ABSL_DECLARE_FLAG(int64_t, hkv);
ABSL_DECLARE_FLAG(int64_t, paged);
ABSL_DECLARE_FLAG(int64_t, decode);
ABSL_DECLARE_FLAG(std::string, varlen);
ABSL_DECLARE_FLAG(bool, bshd);
ABSL_DECLARE_FLAG(int32_t, repeats);
ABSL_DECLARE_FLAG(int64_t, s);
ABSL_DECLARE_FLAG(int64_t, skv);
ABSL_DECLARE_FLAG(int64_t, d);
ABSL_DECLARE_FLAG(bool, causal);
ABSL_DECLARE_FLAG(double, scale);
ABSL_DECLARE_FLAG(std::string, kernel);
ABSL_DECLARE_FLAG(int32_t, steady_launches);
ABSL_DECLARE_FLAG(bool, flush_l2);
ABSL_DECLARE_FLAG(std::string, out);
ABSL_DECLARE_FLAG(std::string, cache);
ABSL_DECLARE_FLAG(bool, line_info);
