// Helpers shared by the C ABI translation units (capi.cpp: prefill, capi_decode.cpp: decode):
// one thread-local last error, one conversion of the plain C structs.
#pragma once

#include <cstddef>
#include <string>

#include "gdn/gdn.h"
#include "gdn/gdn.hpp"

namespace gdn::capi {

// This thread's last error message ("" after a successful call); gdn_last_error() returns it.
extern thread_local std::string g_last_error;

// Records the outcome as the last error, copies it into msg (when given, NUL-terminated) and
// returns the status code as an int.
int finish(gdn::Code code, const std::string& message, char* msg, size_t msg_size);

// A C tensor as a TensorView; an undefined one (data == NULL) keeps rank and shape so validation
// reports shape errors on it the same way as in C++. Rejects rank outside 0..4 and unknown dtypes.
gdn::Status to_view(const char* name, const gdn_tensor& t, gdn::TensorView* out);

// The C problem as a gdn::Problem; rejects NULL and unknown head_map / state_layout values.
gdn::Status to_problem(const gdn_problem* p, gdn::Problem* out);

}  // namespace gdn::capi
